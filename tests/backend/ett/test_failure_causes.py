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
