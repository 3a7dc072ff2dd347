"""The failure-cause taxonomy (docs/ACCOUNTING.md "Failure causes"): domain, plan and kind."""

from __future__ import annotations

import pytest

from backend.ett import catalogue
from backend.ett.catalogue import CAUSES, failure_cause, failure_domain, is_planned


def test_every_cause_has_a_known_domain_and_kind() -> None:
    for row in CAUSES.values():
        assert row.domain in catalogue.FAILURE_DOMAINS, row
        assert row.kind in catalogue.FAILURE_KINDS, row
    planned = {c for c, row in CAUSES.items() if row.planned}
    # planned means preemption, maintenance or a user cancel (and a drill, a requeue)
    assert planned == {"preemption", "requeue", "sigterm", "maintenance", "user_cancel", "injected"}


@pytest.mark.parametrize(
    ("kind", "cause", "planned", "domain", "counted"),
    [
        ("preemption", None, True, "scheduler", "preemption"),  # an old event: its kind says
        ("app_error", None, False, "workload", "unknown"),
        ("infra", None, False, "infrastructure", "unknown"),
        ("induced", None, True, "workload", "injected"),
        ("unknown", None, False, "unknown", "unknown"),
        ("infra", "maintenance", True, "infrastructure", "maintenance"),  # the cause decides
        ("app_error", "gpu_oom", False, "workload", "gpu_oom"),
        ("infra", "nccl_timeout", False, "infrastructure", "nccl_timeout"),
        ("preemption", "unknown", True, "scheduler", "unknown"),  # unknown cause: the kind's
        ("app_error", "no-such-cause", False, "workload", "unknown"),
    ],
)
def test_planned_and_domain(
    kind: str, cause: str | None, planned: bool, domain: str, counted: str
) -> None:
    assert is_planned(kind, cause) is planned
    assert failure_domain(kind, cause) == domain
    assert failure_cause(kind, cause) == counted


def test_job_ends_name_causes_of_the_taxonomy() -> None:
    for end in catalogue.JOB_ENDS.values():
        if end.failure_kind is not None:
            assert end.cause in CAUSES
            assert CAUSES[end.cause].kind == end.failure_kind or end.cause == "unknown"
    assert catalogue.JOB_ENDS["cancelled"].cause == "user_cancel"
    assert catalogue.JOB_ENDS["timeout"].cause == "time_limit"


# -- the initiating failure and its cascade (hand-worked cases) ---------------------------------

from backend.ett.engine import compute_job  # noqa: E402
from tests.backend.ett.builders import JobEvents, assert_consistent  # noqa: E402


def _job(*failures: dict, status: str = "succeeded", restart: bool = True) -> JobEvents:
    """Attempt 0 trains from 10 to 100 s and fails with `failures`; attempt 1 (if `restart`)
    trains from 200 to 300 s."""
    j = JobEvents()
    j.submitted(0.0)
    j.started(0, 5.0)
    j.progress(0, 10.0, 100.0, 0, 90)
    for f in failures:
        j.add("failure", 0, **f)
    if restart:
        j.started(1, 150.0)
        j.progress(1, 200.0, 300.0, 90, 190)
    j.job_ended(310.0, status)
    return j


def _l1(j: JobEvents) -> dict:
    result = compute_job(j.events, now=1e6)
    assert_consistent(result)
    return result.to_dict()["l1"]


def test_one_interruption_many_reports_earliest_initiates() -> None:
    # rank 3 runs out of GPU memory at 101 s; 600 s of NCCL watchdog later rank 0 times out
    j = _job(
        {"ts": 101.0, "kind": "app_error", "cause": "gpu_oom", "rank": 3},
        {"ts": 140.0, "kind": "infra", "cause": "nccl_timeout", "rank": 0},
        {"ts": 140.5, "kind": "infra", "cause": "nccl_timeout", "rank": 1},
    )
    l1 = _l1(j)
    assert l1["nof"] == 1  # one interruption, three reports
    (f,) = l1["failures"]
    assert (f["cause"], f["domain"], f["planned"], f["rank"], f["ts"]) == (
        "gpu_oom",
        "workload",
        False,
        3,
        101.0,
    )
    assert [(c["cause"], c["rank"], c["ts"]) for c in f["cascade"]] == [
        ("nccl_timeout", 0, 140.0),
        ("nccl_timeout", 1, 140.5),
    ]
    assert l1["nof_by_kind"]["app_error"] == 1 and l1["nof_by_kind"]["infra"] == 0


def test_within_the_skew_tolerance_a_named_cause_wins_over_unknown() -> None:
    # rank 0's clock runs 1.5 s ahead: its unknown report looks earliest, rank 2 names the cause
    j = _job(
        {"ts": 100.0, "kind": "unknown", "rank": 0},
        {"ts": 101.5, "kind": "infra", "cause": "gpu_hardware", "message": "Xid 79", "rank": 2},
    )
    (f,) = _l1(j)["failures"]
    assert (f["cause"], f["rank"], f["message"]) == ("gpu_hardware", 2, "Xid 79")
    assert f["ts"] == 100.0  # the attempt still stopped at its first sign
    assert [c["rank"] for c in f["cascade"]] == [0]


def test_past_the_skew_tolerance_the_earliest_initiates_even_unknown() -> None:
    j = _job(
        {"ts": 100.0, "kind": "unknown", "rank": 0},
        {"ts": 102.5, "kind": "infra", "cause": "gpu_hardware", "rank": 2},
    )
    (f,) = _l1(j)["failures"]
    assert (f["cause"], f["rank"]) == ("unknown", 0)
    assert [c["cause"] for c in f["cascade"]] == ["gpu_hardware"]


def test_a_sigterm_yields_to_the_schedulers_cause() -> None:
    # SLURM's time limit: SIGTERM first (the agent), TIMEOUT from the hook 30 s later
    j = _job(
        {"ts": 100.0, "kind": "preemption", "cause": "sigterm"},
        {
            "ts": 130.0,
            "kind": "app_error",
            "cause": "time_limit",
            "scope": "allocation",
            "message": "SLURM job state TIMEOUT",
        },
    )
    (f,) = _l1(j)["failures"]
    assert (f["kind"], f["cause"], f["planned"], f["ts"]) == (
        "app_error",
        "time_limit",
        False,
        100.0,
    )
    assert [c["cause"] for c in f["cascade"]] == ["sigterm"]


def test_a_sigterm_of_a_cancelled_job_is_no_failure() -> None:
    # scancel: the agent sees SIGTERM, the hook says CANCELLED: planned, and NoF 0
    j = _job(
        {"ts": 100.0, "kind": "preemption", "cause": "sigterm"}, status="cancelled", restart=False
    )
    j.ended(0, 100.0, "preempted")
    j.add("attempt_ended", 0, ts=101.0, reason="cancelled", scope="allocation")
    result = compute_job(j.events, now=1e6)
    assert result.status == "cancelled"
    assert result.l1.nof == 0
    assert result.to_dict()["attempts"][0]["reason"] == "cancelled"
    # a SIGTERM whose job goes on is a preemption, as before
    l1 = _l1(_job({"ts": 100.0, "kind": "preemption", "cause": "sigterm"}, status="succeeded"))
    assert l1["nof"] == 1 and l1["failures"][0]["cause"] == "sigterm"
    assert l1["failures"][0]["planned"] is True


def test_old_events_without_causes_count_under_their_kind() -> None:
    l1 = _l1(_job({"ts": 100.0, "kind": "preemption"}))
    (f,) = l1["failures"]
    assert (f["cause"], f["domain"], f["planned"], f["cascade"]) == (
        "preemption",
        "scheduler",
        True,
        [],
    )
    # rule 4: a job_ended status names its cause
    l1 = _l1(_job(status="timeout", restart=False))
    assert l1["failures"][0]["cause"] == "time_limit"


def test_a_result_stored_before_causes_reads_under_its_kinds_cause() -> None:
    from backend.results.read import _failure_times
    from backend.results.schemas import FailureRead

    old = {"ts": 100.0, "kind": "preemption", "attempt": 0, "inferred": False,
           "event_id": "e", "message": None, "ttr_s": 5.0, "interrupted": False,
           "censored": False}  # fmt: skip
    read = FailureRead(**_failure_times(old, lambda t: f"t{t}"))
    assert (read.cause, read.domain, read.planned, read.cascade) == (
        "preemption",
        "scheduler",
        True,
        [],
    )
    new = {**old, "kind": "app_error", "cause": "gpu_oom", "domain": "workload", "planned": False,
           "rank": 3, "cascade": [{"ts": 130.0, "kind": "infra", "cause": "nccl_timeout",
                                   "domain": "infrastructure", "planned": False, "rank": 0,
                                   "event_id": "c", "message": None}]}  # fmt: skip
    read = FailureRead(**_failure_times(new, lambda t: f"t{t}"))
    assert (read.cause, read.ts, read.cascade[0].ts, read.cascade[0].rank) == (
        "gpu_oom",
        "t100.0",
        "t130.0",
        0,
    )
