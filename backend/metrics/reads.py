"""The database reads the metrics layer sums: day rollups, per-job day tables, failures, intervals.

Every GPU-second read here was weighted once, by `backend.fleet.rollups` (each interval at its
attempt's GPUs, NULL `gpus` as the job's, NULL job `gpus` as 1 GPU), or is weighted here in SQL
with the same rule (`interval_gpus_sql`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import case, func, select
from sqlalchemy.orm import Session

from backend.ett.models import JobInterval, JobResult
from backend.fleet.days import day_start
from backend.fleet.models import FleetDayRollup, FleetDayTotal, FleetFailure, FleetJob, FleetJobDay
from backend.jobs.models import Job, Model
from backend.jobs.team import job_team_sql, team_clause
from backend.metrics.core import NULL_GPUS


def gpus_sql() -> Any:
    """A job's GPU count in SQL with the NULL rule of `core.gpus_of`."""
    return func.coalesce(JobResult.gpus, NULL_GPUS)


def interval_gpus_sql() -> Any:
    """An interval's GPU count in SQL with the rule of `core.interval_gpus`."""
    return func.coalesce(JobInterval.gpus, JobResult.gpus, NULL_GPUS)


def scope_models(
    *, db_session: Session, model: str | None = None, owner: str | None = None
) -> list[str] | None:
    """The model names a query is limited to (None: all); LookupError for an unknown model or team.

    `owner` (the team) does not narrow the models: a model's jobs can belong to several teams,
    so the reads below filter its jobs (`team=`, `backend.jobs.team`).
    """
    if owner is not None:
        known_team(db_session=db_session, team=owner)
    if model is not None:
        if db_session.get(Model, model) is None:
            raise LookupError(f"unknown model {model!r}")
        return [model]
    return None


def known_team(*, db_session: Session, team: str) -> None:
    """LookupError unless some job belongs to `team` (or some model is owned by it)."""
    if db_session.scalar(select(Model.name).where(Model.owner == team).limit(1)) is not None:
        return
    stmt = select(Job.job_id).outerjoin(Model, Model.name == Job.model).where(team_clause(team))
    if db_session.scalar(stmt.limit(1)) is None:
        raise LookupError(f"unknown team {team!r}: no job belongs to it")


def teams(*, db_session: Session) -> list[str]:
    """Every team some job belongs to (`backend.jobs.team`), sorted."""
    team = job_team_sql()
    stmt = select(team).select_from(Job).outerjoin(Model, Model.name == Job.model)
    return sorted({t for t in db_session.scalars(stmt.where(team.is_not(None)).distinct()) if t})


def label_clauses(labels: dict[str, str] | None) -> list[Any]:
    """SQL clauses: the job's submission labels carry every key=value."""
    return [Job.labels[k].as_string() == v for k, v in (labels or {}).items()]


def _scoped(stmt: Any, src: Any, labels: dict[str, str] | None, team: str | None) -> Any:
    """`stmt` over per-job rows `src` limited to the jobs with these labels and of this team."""
    if labels or team is not None:
        stmt = stmt.join(Job, Job.job_id == src.job_id).where(*label_clauses(labels))
    if team is not None:
        stmt = stmt.outerjoin(Model, Model.name == src.model).where(team_clause(team))
    return stmt


def gpu_rows(
    *,
    db_session: Session,
    start: float,
    end: float,
    group: Sequence[str],
    models: list[str] | None = None,
    labels: dict[str, str] | None = None,
    components: Sequence[str] | None = None,
    team: str | None = None,
) -> list[tuple[Any, ...]]:
    """Rows of (*group columns, wall_s, gpu_s) summed over the UTC days meeting [start, end).

    Reads the smallest table that can answer: the fleet totals when nothing filters by model,
    the per-model rollup when something does, the per-job day table when labels or a team do or
    the rows are per job (`job_id` in group). `components` keeps only those components.
    """
    if models is not None and not models:
        return []
    if labels or team is not None or "job_id" in group:
        src: Any = FleetJobDay
    elif models is None and "model" not in group:
        src = FleetDayTotal
    else:
        src = FleetDayRollup
    cols = [getattr(src, g) for g in group]
    stmt = select(*cols, func.sum(src.wall_s), func.sum(src.gpu_s)).where(
        src.day >= day_start(start), src.day < end
    )
    if src is FleetJobDay:
        stmt = _scoped(stmt, src, labels, team)
    if models is not None:
        stmt = stmt.where(src.model.in_(models))
    if components is not None:
        stmt = stmt.where(src.component.in_(list(components)))
    if cols:
        stmt = stmt.group_by(*cols)
    return [tuple(r) for r in db_session.execute(stmt)]


def jobs_with_time(
    *,
    db_session: Session,
    start: float,
    end: float,
    models: list[str] | None = None,
    labels: dict[str, str] | None = None,
    team: str | None = None,
) -> dict[str, int]:
    """Per model, the jobs with GPU-time on the UTC days meeting [start, end) (a trend's base)."""
    if models is not None and not models:
        return {}
    stmt = select(FleetJobDay.model, func.count(func.distinct(FleetJobDay.job_id))).where(
        FleetJobDay.day >= day_start(start), FleetJobDay.day < end
    )
    stmt = _scoped(stmt, FleetJobDay, labels, team)
    if models is not None:
        stmt = stmt.where(FleetJobDay.model.in_(models))
    return {m: int(n) for m, n in db_session.execute(stmt.group_by(FleetJobDay.model))}


def failure_counts(
    s: Session,
    lo: float,
    hi: float,
    models: list[str] | None,
    labels: dict[str, str] | None,
    group: Sequence[str],
    team: str | None = None,
) -> list[tuple[Any, ...]]:
    """(*group, failures) over the UTC days meeting [lo, hi)."""
    if models is not None and not models:
        return []
    cols = [getattr(FleetFailure, g) for g in group]
    stmt = select(*cols, func.count()).where(
        FleetFailure.day >= day_start(lo), FleetFailure.day < hi
    )
    stmt = _scoped(stmt, FleetFailure, labels, team)
    if models is not None:
        stmt = stmt.where(FleetFailure.model.in_(models))
    return [tuple(r) for r in s.execute(stmt.group_by(*cols))]


def job_counts(
    s: Session,
    lo: float,
    hi: float,
    models: list[str] | None,
    labels: dict[str, str] | None,
    group: Sequence[str],
    team: str | None = None,
) -> list[tuple[Any, ...]]:
    """(*group, jobs, attempts, attempts not caused by a preemption) by submission day."""
    if models is not None and not models:
        return []
    cols = [getattr(FleetJob, g) for g in group]
    stmt = select(
        *cols,
        func.count(),
        func.sum(FleetJob.attempts),
        func.sum(FleetJob.attempts_excl_preemption),
    ).where(FleetJob.day >= day_start(lo), FleetJob.day < hi)
    stmt = _scoped(stmt, FleetJob, labels, team)
    if models is not None:
        stmt = stmt.where(FleetJob.model.in_(models))
    return [tuple(r) for r in s.execute(stmt.group_by(*cols))]


def model_owners(*, db_session: Session) -> dict[str, str | None]:
    """Model name -> owning team."""
    return dict(db_session.execute(select(Model.name, Model.owner)).all())


def jobs_submitted(
    *,
    db_session: Session,
    start: float,
    end: float,
    model: str | None = None,
    team: str | None = None,
) -> dict[str | None, int]:
    """Jobs submitted in [start, end) per model (of one team's jobs, with `team`)."""
    stmt = select(JobResult.model, func.count()).where(
        JobResult.submitted_at >= start, JobResult.submitted_at < end
    )
    if model is not None:
        stmt = stmt.where(JobResult.model == model)
    if team is not None:
        stmt = _scoped(stmt, JobResult, None, team)
    return {m: int(n) for m, n in db_session.execute(stmt.group_by(JobResult.model))}


def failures_by_kind_exact(
    *, db_session: Session, model: str, start: float, end: float
) -> dict[str, int]:
    """A model's failures per kind dated by their own instant inside [start, end)."""
    return {
        kind: int(n)
        for kind, n in db_session.execute(
            select(FleetFailure.kind, func.count())
            .where(FleetFailure.model == model, FleetFailure.ts >= start, FleetFailure.ts < end)
            .group_by(FleetFailure.kind)
        )
    }


def clipped_s(t0: float, t1: float) -> Any:
    """An interval's seconds inside [t0, t1] (SQL)."""
    lo = case((JobInterval.start < t0, t0), else_=JobInterval.start)
    hi = case((JobInterval.end > t1, t1), else_=JobInterval.end)
    return hi - lo


def clipped_gpu_s(t0: float, t1: float) -> Any:
    """An interval's GPU-seconds inside [t0, t1] (SQL), at its attempt's GPUs."""
    return clipped_s(t0, t1) * interval_gpus_sql()
