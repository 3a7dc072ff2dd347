"""How a job ends (every status a scheduler reports) and restarts (in place or requeued)."""

from __future__ import annotations

from typing import Any

import pytest

from backend.ett.catalogue import JOB_ENDS, attempt_label
from backend.ett.engine import JobETT, compute_job
from backend.results import read
from tests.backend.ett.builders import JobEvents, assert_consistent
from tests.conftest import post_events
from trainer_agent.events import JOB_STATUSES

T0 = 1_777_000_000.0


def run(j: JobEvents, now: float = 1e6) -> JobETT:
    result = compute_job(j.events, now=now)
    assert_consistent(result)
    return result


def component_at(r: JobETT, t: float) -> tuple[str, str | None]:
    (iv,) = [iv for iv in r.intervals if iv.start <= t < iv.end]
    return iv.component, iv.phase


# (status, the job's status, kind of the failure of its last attempt, inferred)
ENDS = [
    ("succeeded", "succeeded", None, False),
    ("failed", "failed", "unknown", True),
    ("cancelled", "cancelled", None, False),
    ("preempted", "preempted", "preemption", False),
    ("timeout", "timeout", "app_error", False),
    ("node_failure", "node_failure", "infra", False),
    ("out_of_memory", "out_of_memory", "app_error", False),
]


def test_the_agent_and_the_server_know_the_same_statuses() -> None:
    assert tuple(JOB_ENDS) == JOB_STATUSES == tuple(e[0] for e in ENDS)


@pytest.mark.parametrize(("status", "shown", "kind", "inferred"), ENDS)
def test_every_end_a_scheduler_reports_is_accepted_and_read(
    client: Any, ingest_token: str, status: str, shown: str, kind: str | None, inferred: bool
) -> None:
    """job_ended(status=preempted) and the other scheduler ends are stored, and the job ends
    there with its status, instead of being refused and left 'running' until the abandon
    timeout."""
    job = f"end-{status}"
    events = [
        {
            "event_id": "s",
            "job_id": job,
            "type": "job_submitted",
            "ts": T0,
            "model": "m",
            "gpus": 8,
        },
        {"event_id": "a", "job_id": job, "type": "attempt_started", "attempt": 0, "ts": T0 + 10},
        {
            "event_id": "p",
            "job_id": job,
            "type": "progress",
            "attempt": 0,
            "start": T0 + 20,
            "end": T0 + 120,
            "cursor_start": 0,
            "cursor_end": 100,
            "steps": 10,
        },
        {"event_id": "e", "job_id": job, "type": "job_ended", "ts": T0 + 130, "status": status},
    ]
    answer = post_events(client, ingest_token, events).json()
    assert answer["accepted"] == 4 and answer["rejected"] == [], answer
    got = client.get(f"/api/v1/jobs/{job}/ett").json()
    assert got["status"] == shown and not got["provisional"] and not got["abandoned"]
    assert got["e2e_s"] == 130.0
    failures = got["l1"]["failures"]
    if kind is None:
        assert failures == []
    else:
        (failure,) = failures
        # placed at the attempt's last event, the end of its last progress window
        assert failure["kind"] == kind and failure["inferred"] is inferred
        assert failure["ts"].startswith("2026-04-24T03:08:40")
        assert got["l1"]["nof_by_kind"][kind] == 1
    listed = client.get("/api/v1/jobs", params={"status": shown}).json()
    assert [r["job_id"] for r in listed["jobs"]] == [job]


def test_an_explicit_failure_wins_over_the_status_kind() -> None:
    j = JobEvents()
    j.submitted(0)
    j.started(0, 0)
    j.progress(0, 0, 100, 0, 100)
    j.failure(0, 100, kind="infra")
    j.job_ended(110, status="timeout")
    r = run(j)
    assert r.status == "timeout"
    assert [(f.kind, f.ts, f.inferred) for f in r.l1.failures] == [("infra", 100.0, False)]


def in_place_job(*, in_place: bool) -> JobEvents:
    """A0 trains 0-100 and its worker crashes; A1 starts at 104 (in place or requeued)."""
    j = JobEvents()
    j.submitted(0)
    j.started(0, 0)
    j.progress(0, 0, 100, 0, 100)
    j.failure(0, 100)
    j.started(1, 104, **({"in_place": True} if in_place else {}))
    j.phase(1, "trainer_init.process_start", 104, 110)
    j.progress(1, 110, 200, 100, 190)
    j.ended(1, 200)
    j.job_ended(200)
    return j


def test_an_in_place_restart_waits_in_hardware_setup_not_in_the_queue() -> None:
    r = run(in_place_job(in_place=True))
    assert component_at(r, 102) == ("hardware_setup", "hardware_setup")
    assert r.components["scheduling"] == 0.0
    assert r.components["hardware_setup"] == pytest.approx(4.0)
    assert r.l1.nof == 1 and r.l1.failures[0].ttr_s == pytest.approx(10.0)
    # The same restart without in_place (old events, a requeue) is queue time, as before.
    old = run(in_place_job(in_place=False))
    assert component_at(old, 102) == ("scheduling", "scheduling")
    assert old.components["scheduling"] == pytest.approx(4.0)
    assert old.components["hardware_setup"] == 0.0


def test_a_scheduler_end_of_the_allocation_ends_its_latest_in_place_restart() -> None:
    """SLURM's hook knows allocation 0 only; torchrun restarted in place inside it (A1). The
    requeue ends A1, which counts its preemption; A0 keeps its own app_error."""
    j = JobEvents()
    j.submitted(0)
    j.started(0, 10)  # the hook: StartTime of allocation 0
    j.progress(0, 20, 100, 0, 80)
    j.failure(0, 100, kind="app_error")  # the worker crashed
    j.started(1, 104, in_place=True)
    j.progress(1, 110, 300, 80, 270)
    j.add("failure", 0, ts=300, kind="preemption", scope="allocation")  # the hook, at END
    j.add("attempt_ended", 0, ts=300, reason="preempted", scope="allocation")
    j.started(1000, 360)  # allocation 1
    j.progress(1000, 370, 500, 270, 400)
    j.add("attempt_ended", 1000, ts=500, reason="completed", scope="allocation")
    j.job_ended(500)
    r = run(j)
    assert [a.attempt for a in r.attempts] == [0, 1, 1000]
    assert [(f.attempt, f.kind, f.ts) for f in r.l1.failures] == [
        (0, "app_error", 100.0),
        (1, "preemption", 300.0),
    ]
    assert r.l1.nof_by_kind()["preemption"] == 1 and r.l1.nof_by_kind()["app_error"] == 1
    assert [f.ttr_s for f in r.l1.failures] == [pytest.approx(10.0), pytest.approx(70.0)]
    by = {a.attempt: a for a in r.attempts}
    assert by[1].ended_at == 300.0 and by[1].reason == "preempted"
    assert by[1000].reason == "completed"
    assert component_at(r, 102) == ("hardware_setup", "hardware_setup")
    assert component_at(r, 330) == ("scheduling", "scheduling")
    # Without the scope the hook's preemption would be lost behind A0's app_error, and A1's
    # failure inferred as unknown.
    plain = [{k: v for k, v in e.items() if k != "scope"} for e in j.events]
    old = compute_job(plain, now=1e6)
    assert [(f.attempt, f.kind, f.inferred) for f in old.l1.failures] == [
        (0, "app_error", False),
        (1, "unknown", True),
    ]


def test_a_scheduler_end_in_whole_seconds_covers_what_happened_within_its_second() -> None:
    """SLURM truncates END to the second: a requeue at 300.7 is stamped 300, after the in-place
    restart at 300.07 and its first window. The end is the attempt's last event of that second,
    never before the attempt's start."""
    j = JobEvents()
    j.submitted(0)
    j.started(0, 10)
    j.progress(0, 20, 100, 0, 80)
    j.failure(0, 299.5, kind="app_error")
    j.started(1, 300.07, in_place=True)
    j.progress(1, 300.2, 300.6, 80, 84)
    j.add("failure", 0, ts=300, kind="preemption", scope="allocation")
    j.add("attempt_ended", 0, ts=300, reason="preempted", scope="allocation")
    j.job_ended(301, status="preempted")
    r = run(j)
    codes = {w["code"] for w in r.warnings}
    assert "attempt_ended_before_start" not in codes
    assert [(f.attempt, f.kind, f.ts) for f in r.l1.failures] == [
        (0, "app_error", 299.5),
        (1, "preemption", 300.6),
    ]
    by = {a.attempt: a for a in r.attempts}
    assert by[1].ended_at == 300.6 and r.components["effective_training"] == pytest.approx(80.4)
    assert r.status == "preempted"


@pytest.mark.parametrize(
    ("attempt", "in_place", "words"),
    [
        (0, False, None),
        (1, False, None),  # another emitter's own second attempt: nothing to add
        (1, True, "in-place restart 1"),
        (1000, False, "requeue 1"),
        (1001, True, "requeue 1, in-place restart 1"),
        (2003, False, "requeue 2, in-place restart 3"),
    ],
)
def test_an_attempt_number_in_words(attempt: int, in_place: bool, words: str | None) -> None:
    assert attempt_label(attempt, in_place) == words


def test_the_job_answer_says_what_each_attempt_number_is(client: Any, ingest_token: str) -> None:
    """Attempts 0, 1 (in place), 1000 (after a requeue) and 1001 (in place again): the job's
    answer names each by its parts, so 1000 does not read as a thousandth attempt, and the
    page's timeline rows and TTR rows say the same."""
    j = JobEvents("words")
    j.submitted(T0)
    for n, start, in_place in ((0, 10, False), (1, 110, True), (1000, 300, False)):
        j.started(n, T0 + start, **({"in_place": True} if in_place else {}))
        j.progress(n, T0 + start + 5, T0 + start + 80, start, start + 75)
        j.failure(n, T0 + start + 80, kind="app_error" if in_place is False else "infra")
    j.started(1001, T0 + 390, in_place=True)
    j.progress(1001, T0 + 395, T0 + 480, 395, 480)
    j.ended(1001, T0 + 480)
    j.job_ended(T0 + 480)
    answer = post_events(client, ingest_token, j.events).json()
    assert answer["rejected"] == [], answer
    got = client.get("/api/v1/jobs/words/ett").json()
    assert [(a["attempt"], a["in_place"], a["label"]) for a in got["attempts"]] == [
        (0, False, None),
        (1, True, "in-place restart 1"),
        (1000, False, "requeue 1"),
        (1001, True, "requeue 1, in-place restart 1"),
    ]
    # A result stored before attempts had words: read from the number alone.
    stored = {k: v for k, v in got["attempts"][2].items() if k not in ("label", "in_place")}
    assert read._format_times({"attempts": [stored]}, str)["attempts"][0]["label"] == "requeue 1"

    from dashboard import figures
    from dashboard.pages import job as job_page

    fig = job_page.timeline_figure(got)
    assert list(fig.layout.yaxis.categoryarray)[::-1] == [
        "attempt 0",
        "attempt 1 (in-place restart 1)",
        "attempt 1000 (requeue 1)",
        "attempt 1001 (requeue 1, in-place restart 1)",
    ]
    # The table comes wrapped with its CSV download: the DataTable is the first child.
    rows = job_page.l1_table(got).children[0].data
    parts = [r["part"] for r in rows if r["part"].startswith("TTR")]
    assert parts == [
        "TTR 1: app_error, attempt 0",
        "TTR 2: infra, attempt 1 (in-place restart 1)",
        "TTR 3: app_error, attempt 1000 (requeue 1)",
    ]
    assert figures.attempt_name(2001) == "attempt 2001 (requeue 2, in-place restart 1)"
