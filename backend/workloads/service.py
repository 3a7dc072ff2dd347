"""Models (workloads) for the REST API: headline numbers from the day rollups, jobs from results."""

from __future__ import annotations

from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from backend.config import Settings
from backend.ett.models import JobResult
from backend.jobs.models import Job, Model
from backend.jobs.team import team_clause
from backend.metrics import workloads as metrics

SORTS = ("lost_gpu_h", "ett_pct", "trend_pp", "wall_gpu_h", "name")
JOB_LIMIT = 200


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
    length, in points), owner, tier, GPU-hours lost, jobs submitted; one page and the total.

    With `owner` (a team): the models with a job of that team, each summed over those jobs.
    """
    if sort not in SORTS:
        raise ValueError(f"sort must be one of {list(SORTS)}, not {sort!r}")
    stmt = select(Model.name, Model.owner, Model.tier)
    if q:
        stmt = stmt.where(Model.name.ilike(f"%{q}%"))
    if owner is not None:
        # The models with a job of this team (none for an unknown team); their numbers sum
        # that team's jobs only.
        teams_jobs = select(Job.model).outerjoin(Model, Model.name == Job.model)
        stmt = stmt.where(Model.name.in_(teams_jobs.where(team_clause(owner))))
    models = db_session.execute(stmt.order_by(Model.name)).all()
    names = [m.name for m in models]
    heads = metrics.model_headlines(
        db_session=db_session, models=names, start=start, end=end, team=owner
    )
    rows = [
        {
            "model": m.name,
            "owner": owner if owner is not None else m.owner,
            "tier": m.tier,
            **heads[m.name],
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
    summary = metrics.model_summary(
        db_session=db_session, model=model, start=start, end=end, bucket=bucket, settings=settings
    )
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
        **summary,
        "job_count": int(n_jobs or 0),
        "jobs": [dict(j._mapping) for j in jobs],
    }
