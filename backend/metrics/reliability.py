"""MTTF by job size: effective training hours per unplanned failure, by GPU-count bucket.

Kokolis et al. (HPCA 2025) chart MTTF against job size; this is the same chart from the
fleet's own results. Over whole UTC days [start, end): a bucket's effective training hours are
its jobs' wall hours in the effective component on those days (fleet_job_days), its failures
the unplanned ones dated in them (fleet_failures; planned: backend.metrics.lemons.is_planned).
A job's bucket is its GPU count (fleet_jobs.gpus).
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from backend.ett.partition import EFFECTIVE
from backend.fleet.days import day_start
from backend.fleet.models import FleetFailure, FleetJob, FleetJobDay
from backend.metrics.lemons import is_planned

# Upper bounds of the GPU-count buckets (the last is open): 1-8, 9-32, ..., over 2048.
GPU_BUCKETS: tuple[int, ...] = (8, 32, 128, 512, 2048)


def bucket_of(gpus: int | None) -> str:
    """The bucket label of a GPU count: '1-8', '9-32', ..., '>2048'."""
    g = max(1, gpus or 1)
    lo = 1
    for hi in GPU_BUCKETS:
        if g <= hi:
            return f"{lo}-{hi}"
        lo = hi + 1
    return f">{GPU_BUCKETS[-1]}"


def bucket_labels() -> list[str]:
    """Every bucket label, smallest jobs first."""
    return [bucket_of(1), *(bucket_of(hi + 1) for hi in GPU_BUCKETS)]


def mttf_by_size(*, db_session: Session, start: float, end: float) -> dict[str, Any]:
    """`{"start", "end", "buckets": [{"gpus", "jobs", "effective_h", "unplanned_failures",
    "mttf_h"}]}`: mttf_h is null for a bucket without an unplanned failure."""
    if end <= start:
        raise ValueError("end must be after start")
    lo = day_start(start)
    eff: dict[str, float] = defaultdict(float)
    jobs: dict[str, set[str]] = defaultdict(set)
    stmt = (
        select(FleetJobDay.job_id, FleetJob.gpus, func.sum(FleetJobDay.wall_s))
        .join(FleetJob, FleetJob.job_id == FleetJobDay.job_id)
        .where(FleetJobDay.day >= lo, FleetJobDay.day < end, FleetJobDay.component == EFFECTIVE)
        .group_by(FleetJobDay.job_id, FleetJob.gpus)
    )
    for job_id, gpus, wall_s in db_session.execute(stmt):
        b = bucket_of(gpus)
        eff[b] += wall_s or 0.0
        jobs[b].add(job_id)
    fails: dict[str, int] = defaultdict(int)
    stmt2 = (
        select(FleetJob.gpus, FleetFailure.kind, func.count())
        .join(FleetJob, FleetJob.job_id == FleetFailure.job_id)
        .where(FleetFailure.day >= lo, FleetFailure.day < end)
        .group_by(FleetJob.gpus, FleetFailure.kind)
    )
    for gpus, kind, n in db_session.execute(stmt2):
        if not is_planned(kind):
            fails[bucket_of(gpus)] += n
    rows = []
    for b in bucket_labels():
        if b not in eff and b not in fails:
            continue
        hours = eff.get(b, 0.0) / 3600.0
        n = fails.get(b, 0)
        rows.append(
            {
                "gpus": b,
                "jobs": len(jobs.get(b, ())),
                "effective_h": hours,
                "unplanned_failures": n,
                "mttf_h": hours / n if n else None,
            }
        )
    return {"start": start, "end": end, "buckets": rows}
