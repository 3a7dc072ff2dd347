"""Models (workloads) for the REST API: headline numbers from the day rollups, jobs from results."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from backend.config import Settings
from backend.ett.catalogue import FAILURE_KINDS
from backend.ett.models import JobResult
from backend.ett.partition import EFFECTIVE
from backend.fleet import service as fleet
from backend.fleet.days import day_start
from backend.fleet.models import FleetFailure
from backend.jobs.models import Model
from backend.owners import service as owners_service

SORTS = ("lost_gpu_h", "ett_pct", "trend_pp", "wall_gpu_h", "name")
JOB_LIMIT = 200


def _headline(now: dict[str, float], before: dict[str, float] | None) -> dict[str, Any]:
    wall = sum(now.values())
    ett, prev = fleet.ett_pct(now), fleet.ett_pct(before or {})
    lost = {c: v / 3600.0 for c, v in now.items() if c != EFFECTIVE and v > 0}
    return {
        "ett_pct": ett,
        "previous_ett_pct": prev,
        "previous_wall_gpu_h": sum((before or {}).values()) / 3600.0,
        "trend_pp": ett - prev if ett is not None and prev is not None else None,
        "wall_gpu_h": wall / 3600.0,
        "lost_gpu_h": (wall - now.get(EFFECTIVE, 0.0)) / 3600.0,
        "top_lost_component": max(sorted(lost), key=lambda c: lost[c]) if lost else None,
    }


def list_models(
    *,
    db_session: Session,
    start: float,
    end: float,
    q: str | None = None,
    owner: str | None = None,
    sort: str = "lost_gpu_h",
    descending: bool = True,
    limit: int = 100,
    offset: int = 0,
) -> tuple[list[dict[str, Any]], int]:
    """Models with their ETT% over [start, end), the trend against the window before it (same
    length, in points), owner, tier, GPU-hours lost, jobs submitted; one page and the total."""
    if sort not in SORTS:
        raise ValueError(f"sort must be one of {list(SORTS)}, not {sort!r}")
    stmt = select(Model.name, Model.owner, Model.tier)
    if q:
        stmt = stmt.where(Model.name.ilike(f"%{q}%"))
    if owner is not None:
        stmt = stmt.where(Model.owner == owner)
    models = db_session.execute(stmt.order_by(Model.name)).all()
    names = [m.name for m in models]
    span = end - start
    now = fleet.by_model(db_session, start, end, names, None)
    # The previous window ends where the current one's first UTC day begins (no day twice).
    before = fleet.by_model(db_session, start - span, day_start(start), names, None)
    jobs = dict(
        db_session.execute(
            select(JobResult.model, func.count())
            .where(JobResult.submitted_at >= start, JobResult.submitted_at < end)
            .group_by(JobResult.model)
        ).all()
    )
    rows = [
        {
            "model": m.name,
            "owner": m.owner,
            "tier": m.tier,
            "jobs": int(jobs.get(m.name, 0)),
            **_headline(now.get(m.name, {}), before.get(m.name)),
        }
        for m in models
    ]

    if sort == "name":
        rows.sort(key=lambda r: r["model"], reverse=descending)
    else:
        # Rows without a value (no GPU-time in the window) go last in either direction.
        valued = sorted(
            (r for r in rows if r[sort] is not None),
            key=lambda r: r[sort],
            reverse=descending,
        )
        rows = valued + sorted((r for r in rows if r[sort] is None), key=lambda r: r["model"])
    return rows[offset : offset + limit], len(rows)


def model_page(
    *,
    db_session: Session,
    model: str,
    start: float,
    end: float,
    bucket: str = "day",
    settings: Settings | None = None,
    job_limit: int = JOB_LIMIT,
) -> dict[str, Any]:
    """Everything a model's page needs over [start, end): headline numbers and trend, ETT% series,
    components and lost GPU-hours by owner, failures by kind, and its latest jobs (newest first).
    LookupError for an unknown model."""
    row = db_session.get(Model, model)
    if row is None:
        raise LookupError(f"unknown model {model!r}")
    # One read of the model's rollup rows over both windows serves every number below.
    cut = day_start(start)
    rows = fleet.gpu_rows(
        db_session=db_session,
        start=start - (end - start),
        end=end,
        group=("day", "component", "phase"),
        models=[model],
    )
    now: dict[str, float] = defaultdict(float)
    before: dict[str, float] = defaultdict(float)
    current = []
    for day, comp, phase, _wall, gpu in rows:
        if day >= cut:
            now[comp] += gpu
            current.append((day, comp, phase, gpu))
        else:
            before[comp] += gpu
    series = fleet.series_from_rows(
        [(d, c, g) for d, c, _p, g in current], start=start, end=end, bucket=bucket
    )
    by_owner = fleet.lost_from_rows(
        [(c, p, g) for _d, c, p, g in current],
        by="owner",
        resolver=owners_service.resolver(db_session=db_session, settings=settings),
    )
    kinds = dict.fromkeys(FAILURE_KINDS, 0)
    for kind, n in db_session.execute(
        select(FleetFailure.kind, func.count())
        .where(
            FleetFailure.model == model,
            FleetFailure.ts >= start,
            FleetFailure.ts < end,
        )
        .group_by(FleetFailure.kind)
    ):
        kinds[kind] = int(n)
    jobs = db_session.execute(
        select(
            JobResult.job_id,
            JobResult.status,
            JobResult.provisional,
            JobResult.gpus,
            JobResult.submitted_at,
            JobResult.ended_at,
            JobResult.e2e_s,
            JobResult.ett_pct,
            JobResult.tts_s,
            JobResult.nof,
            JobResult.recovery_s,
            JobResult.gpu_hours_lost,
        )
        .where(
            JobResult.model == model,
            JobResult.submitted_at >= start,
            JobResult.submitted_at < end,
        )
        .order_by(JobResult.submitted_at.desc(), JobResult.job_id)
        .limit(job_limit)
    ).all()
    n_jobs = db_session.scalar(
        select(func.count())
        .select_from(JobResult)
        .where(
            JobResult.model == model,
            JobResult.submitted_at >= start,
            JobResult.submitted_at < end,
        )
    )
    return {
        "model": model,
        "owner": row.owner,
        "tier": row.tier,
        "labels": row.labels or {},
        "start": start,
        "end": end,
        **_headline(dict(now), dict(before) if before else None),
        "components_gpu_h": series["total"]["components_gpu_h"],
        "lost_by_owner": by_owner,
        "nof_by_kind": kinds,
        "series": series["series"],
        "job_count": int(n_jobs or 0),
        "jobs": [dict(j._mapping) for j in jobs],
    }
