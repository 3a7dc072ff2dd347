"""GPU-time over an exact window [t0, t1] (not whole days), for the alert indicators.

An interval counts for its overlap with the window times its job's GPUs (NULL as 1, like the day
rollups), so over a window of whole UTC days the answer equals the fleet answer of those days.
One implementation serves every scope: a model name, and label filters, are SQL clauses.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import and_, case, func, select
from sqlalchemy.orm import Session

from backend.ett.models import JobInterval, JobResult
from backend.ett.partition import EFFECTIVE
from backend.jobs.models import Job
from backend.metrics.core import gpu_h, pct
from backend.metrics.reads import clipped_gpu_s, label_clauses

TOP_N = 5

ModelOk = Callable[[str | None], bool]
Totals = list[tuple[str | None, str, str | None, float]]


def _where(t0: float, t1: float, model: str | None) -> list[Any]:
    where: list[Any] = [JobInterval.end > t0, JobInterval.start < t1]
    if model is not None:
        where.append(JobResult.model == model)
    return where


def _base(stmt: Any, labels: dict[str, str] | None) -> Any:
    stmt = stmt.join(JobResult, JobResult.job_id == JobInterval.job_id)
    if labels:
        stmt = stmt.join(Job, Job.job_id == JobInterval.job_id).where(*label_clauses(labels))
    return stmt


def window_totals(
    *,
    db_session: Session,
    start: float,
    end: float,
    model: str | None = None,
    labels: dict[str, str] | None = None,
    model_ok: ModelOk | None = None,
) -> tuple[Totals, dict[str | None, int]]:
    """GPU-seconds per (model, component, phase) inside [start, end] and jobs per model."""
    ok = model_ok or (lambda _m: True)
    where = _where(start, end, model)
    stmt = _base(
        select(
            JobResult.model,
            JobInterval.component,
            JobInterval.phase,
            func.sum(clipped_gpu_s(start, end)),
        ),
        labels,
    )
    totals = [
        (m, component, phase, float(gpu_s or 0.0))
        for m, component, phase, gpu_s in db_session.execute(
            stmt.where(*where).group_by(JobResult.model, JobInterval.component, JobInterval.phase)
        )
        if ok(m)
    ]
    jobs_stmt = _base(
        select(JobResult.model, func.count(func.distinct(JobInterval.job_id))), labels
    )
    jobs = {
        m: int(n)
        for m, n in db_session.execute(jobs_stmt.where(*where).group_by(JobResult.model))
        if ok(m)
    }
    return totals, jobs


def top_jobs(
    *,
    db_session: Session,
    start: float,
    end: float,
    ranked: Any,
    hit: Any,
    per_model: bool,
    model: str | None = None,
    labels: dict[str, str] | None = None,
    model_ok: ModelOk | None = None,
    limit_in_sql: bool = True,
) -> dict[str | None, list[dict[str, Any]]]:
    """The jobs with the most GPU-seconds where `ranked` holds, each with its own % where `hit`
    holds (both SQL clauses on job_intervals); keyed by model when per_model, else under None."""
    ok = model_ok or (lambda _m: True)
    gpu_s = clipped_gpu_s(start, end)
    score = func.sum(case((ranked, gpu_s), else_=0.0))
    stmt = (
        _base(
            select(
                JobInterval.job_id,
                JobResult.model,
                score,
                func.sum(case((hit, gpu_s), else_=0.0)),
                func.sum(gpu_s),
            ),
            labels,
        )
        .where(*_where(start, end, model))
        .group_by(JobInterval.job_id, JobResult.model)
        .having(score > 0)
        .order_by(score.desc(), JobInterval.job_id)
    )
    if not per_model and limit_in_sql:
        stmt = stmt.limit(TOP_N)
    out: dict[str | None, list[dict[str, Any]]] = defaultdict(list)
    for job_id, m, _score, hit_s, all_s in db_session.execute(stmt):
        if not ok(m):
            continue
        group = out[m if per_model else None]
        if len(group) < TOP_N:
            share = pct(float(hit_s or 0.0), float(all_s or 0.0)) or 0.0
            group.append({"job_id": job_id, "model": m, "value": share})
    return out


@dataclass
class Share:
    """A share of wall GPU-time in one group: value (%), jobs, and the models driving it."""

    model: str | None
    value: float
    jobs: int
    models: list[dict[str, Any]] = field(default_factory=list)


def shares(
    totals: Totals,
    jobs: dict[str | None, int],
    *,
    is_hit: Callable[[str, str | None], bool],
    per_model: bool,
    rank_lost: bool,
) -> list[Share]:
    """100 x GPU-seconds that hit / all GPU-seconds, per model or over all, with the models
    that drive it: the most GPU-seconds hit, or (rank_lost, for a floor) the most not hit."""
    hit: dict[str | None, float] = defaultdict(float)
    all_: dict[str | None, float] = defaultdict(float)
    for m, component, phase, gpu_s in totals:
        all_[m] += gpu_s
        if is_hit(component, phase):
            hit[m] += gpu_s
    if per_model:
        groups: dict[str | None, list[str | None]] = {m: [m] for m in all_ if m is not None}
    else:
        groups = {None: list(all_)}

    def rank(m: str | None) -> float:
        return all_[m] - hit[m] if rank_lost else hit[m]

    out = []
    for group_model, members in sorted(groups.items(), key=lambda kv: kv[0] or ""):
        value = pct(sum(hit[m] for m in members), sum(all_[m] for m in members))
        if value is None:
            continue
        models = [
            {"model": m, "value": pct(hit[m], all_[m])}
            for m in sorted(members, key=lambda m: -rank(m))
            if m is not None and all_[m] > 0 and rank(m) > 0
        ][:TOP_N]
        out.append(
            Share(
                model=group_model,
                value=value,
                jobs=sum(jobs.get(m, 0) for m in members),
                models=models,
            )
        )
    return out


@dataclass
class Rolling:
    """GPU-time over one trailing window: wall and effective GPU-hours and their ETT%."""

    window_s: float
    wall_gpu_h: float
    effective_gpu_h: float

    @property
    def ett_pct(self) -> float | None:
        """Effective / wall GPU-time x 100 (None without GPU-time)."""
        return pct(self.effective_gpu_h, self.wall_gpu_h)


def rolling_ett(
    *, db_session: Session, now: float, windows: Sequence[float]
) -> dict[str | None, dict[float, Rolling]]:
    """The fleet's (key None) and each model's GPU-weighted ETT% over each [now - w, now].

    Open jobs count with their provisional time (the intervals their stored result holds, up
    to when it was computed), so this is what the fleet is doing now, not what finished. One
    read for every window: each interval's GPU-seconds clipped to each window.
    """
    windows = sorted(set(windows))
    longest = windows[-1]
    cols = []
    for w in windows:
        t0 = now - w
        inside = and_(JobInterval.end > t0, JobInterval.start < now)
        gpu_s = case((inside, clipped_gpu_s(t0, now)), else_=0.0)
        cols.append(func.sum(gpu_s))
        cols.append(func.sum(case((JobInterval.component == EFFECTIVE, gpu_s), else_=0.0)))
    stmt = (
        select(JobResult.model, *cols)
        .select_from(JobInterval)
        .join(JobResult, JobResult.job_id == JobInterval.job_id)
        .where(JobInterval.end > now - longest, JobInterval.start < now)
        .group_by(JobResult.model)
    )
    out: dict[str | None, dict[float, Rolling]] = {}
    fleet = {w: [0.0, 0.0] for w in windows}
    for model, *sums in db_session.execute(stmt):
        per: dict[float, Rolling] = {}
        for i, w in enumerate(windows):
            wall, eff = float(sums[2 * i] or 0.0), float(sums[2 * i + 1] or 0.0)
            fleet[w][0] += wall
            fleet[w][1] += eff
            per[w] = Rolling(w, gpu_h(wall), gpu_h(eff))
        if model is not None:
            out[model] = per
    out[None] = {w: Rolling(w, gpu_h(a), gpu_h(b)) for w, (a, b) in fleet.items()}
    return out
