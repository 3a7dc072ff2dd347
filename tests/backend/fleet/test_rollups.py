"""The day rollups stay equal to a rebuild from the per-job results through recomputes."""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import delete, select, update

from backend.ett.models import JobInterval, JobResult
from backend.fleet import rollups
from backend.fleet.models import FleetDayRollup, FleetDayTotal, FleetFailure, FleetJob
from backend.fleet.rollups import job_facts
from tests.backend.fleet.fleet_jobs import D0, job_a, job_b


def snapshot(s: Any) -> dict[tuple[Any, ...], tuple[float, float]]:
    """The rollup table as a dict, values rounded against float noise."""
    rows = s.execute(
        select(
            FleetDayRollup.day,
            FleetDayRollup.model,
            FleetDayRollup.component,
            FleetDayRollup.phase,
            FleetDayRollup.wall_s,
            FleetDayRollup.gpu_s,
        )
    )
    out = {tuple(r[:4]): (round(r[4], 6), round(r[5], 6)) for r in rows}
    # The totals table must equal the rollup summed over models.
    summed: dict[tuple[Any, ...], list[float]] = {}
    for (day, _model, comp, phase), (wall, gpu) in out.items():
        acc = summed.setdefault((day, comp, phase), [0.0, 0.0])
        acc[0] += wall
        acc[1] += gpu
    totals = s.execute(
        select(
            FleetDayTotal.day,
            FleetDayTotal.component,
            FleetDayTotal.phase,
            FleetDayTotal.wall_s,
            FleetDayTotal.gpu_s,
        )
    )
    assert {tuple(r[:3]): (round(r[3], 6), round(r[4], 6)) for r in totals} == {
        k: (round(v[0], 6), round(v[1], 6)) for k, v in summed.items()
    }
    return out


def test_incremental_equals_rebuild_after_changes(post: Any, database: Any) -> None:
    post(job_a().events)
    post(job_b().events)
    with database.session() as s:
        incremental = snapshot(s)
        assert incremental[(D0, "m-b", "wasted_training", "replay")] == (500.0, 1000.0)
        # A recompute that moves a job to another model and shortens it: the old
        # contribution must leave the old key entirely.
        s.execute(update(JobResult).where(JobResult.job_id == "job-b").values(model="m-z", gpus=4))
        s.execute(update(JobInterval).where(JobInterval.job_id == "job-b").values(gpus=4))
        s.execute(
            delete(JobInterval).where(JobInterval.job_id == "job-b", JobInterval.start >= D0 + 2200)
        )
        rollups.refresh_job_rollups(db_session=s, job_ids=["job-b"])
        s.commit()
        after = snapshot(s)
        assert not any(k[1] == "m-b" for k in after)
        assert after[(D0, "m-z", "effective_training", "")] == (1000.0, 4000.0)
        assert s.scalar(select(FleetJob.model).where(FleetJob.job_id == "job-b")) == "m-z"
        rollups.rebuild_rollups(db_session=s)
        s.commit()
        assert snapshot(s) == after


def test_removed_result_removes_contribution(post: Any, database: Any) -> None:
    post(job_b().events)
    with database.session() as s:
        assert s.scalar(select(FleetFailure.kind)) == "preemption"
        s.execute(delete(JobInterval).where(JobInterval.job_id == "job-b"))
        s.execute(delete(JobResult).where(JobResult.job_id == "job-b"))
        rollups.refresh_job_rollups(db_session=s, job_ids=["job-b"])
        s.commit()
        assert snapshot(s) == {}
        assert s.scalar(select(FleetFailure.kind)) is None


@pytest.mark.parametrize(
    ("failures", "attempts", "expected"),
    [
        ([], [{"attempt": 0}], (1, 1, 0)),
        ([{"kind": "preemption", "attempt": 0}], [{"attempt": 0}, {"attempt": 1}], (2, 1, 1)),
        # a failure of the last attempt caused no restart
        (
            [{"kind": "preemption", "attempt": 1}, {"kind": "app_error", "attempt": 0}],
            [{"attempt": 0}, {"attempt": 1}],
            (2, 2, 2),
        ),
    ],
)
def test_job_facts(failures: list, attempts: list, expected: tuple[int, int, int]) -> None:
    assert job_facts({"failures": failures}, attempts) == expected
