"""Service queries that measure an SLO's indicator over its window, from the per-job tables.

Wall GPU-time is an interval's overlap with the window times the job's GPUs (job_intervals joined
to job_results), so a long job counts in each window only for the instants it spent there.
"""

from __future__ import annotations

import fnmatch
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np
from sqlalchemy import and_, case, func, or_, select
from sqlalchemy.orm import Session

from backend.alerts.content import Evaluation
from backend.alerts.slos import SloSpec
from backend.ett.models import JobInterval, JobResult
from backend.fleet.models import FleetFailure
from backend.jobs.models import Attempt, Job

TOP_N = 5


@dataclass(frozen=True)
class _Row:
    job_id: str
    model: str | None
    gpus: int
    component: str
    phase: str | None
    seconds: float


def measure(
    db_session: Session, slo: SloSpec, now: float, cache: dict[Any, Any] | None = None
) -> list[Evaluation]:
    """The SLO's indicator over [now - window, now]: one Evaluation, or one per model.

    `cache` (one dict per evaluation pass) shares the window totals between SLOs that have the
    same window and model filter, which is most of them.
    """
    t0, t1 = now - slo.window_s, now
    cache = {} if cache is None else cache
    if slo.indicator in ("gpu_time_share", "ett_floor") and not slo.labels:
        return _share_in_sql(db_session, slo, t0, t1, cache)
    if slo.indicator == "gpu_time_share":
        return _gpu_time_share(db_session, slo, t0, t1)
    if slo.indicator == "ett_floor":
        return _ett_floor(db_session, slo, t0, t1)
    if slo.indicator == "duration_percentile":
        return _duration_percentile(db_session, slo, t0, t1)
    if slo.indicator == "failures_per_job":
        return _failures_per_job(db_session, slo, t0, t1)
    if slo.indicator == "no_progress_s":
        return _no_progress(db_session, slo, t0, t1)
    raise ValueError(f"unknown indicator {slo.indicator!r}")


# ---- scope -------------------------------------------------------------------------------------


def _is_glob(pattern: str) -> bool:
    return any(c in pattern for c in "*?[")


def _model_clause(slo: SloSpec) -> Any:
    if slo.model and not _is_glob(slo.model):
        return JobResult.model == slo.model
    return None


def _model_ok(slo: SloSpec, model: str | None) -> bool:
    if not slo.model:
        return True
    return model is not None and fnmatch.fnmatchcase(model, slo.model)


def _label_filter(db_session: Session, slo: SloSpec, job_ids: Iterable[str]) -> set[str] | None:
    """Jobs whose labels carry every key=value of the SLO's filter (None: no filter)."""
    if not slo.labels:
        return None
    ids = list(set(job_ids))
    keep: set[str] = set()
    for i in range(0, len(ids), 1000):
        chunk = ids[i : i + 1000]
        for job_id, labels in db_session.execute(
            select(Job.job_id, Job.labels).where(Job.job_id.in_(chunk))
        ):
            labels = labels or {}
            if all(str(labels.get(k)) == v for k, v in slo.labels.items()):
                keep.add(job_id)
    return keep


def _matches_phase(slo: SloSpec, component: str, phase: str | None) -> bool:
    if component != slo.component:
        return False
    if not slo.phase:
        return True
    return phase is not None and (phase == slo.phase or phase.startswith(slo.phase + "."))


def _clipped_s(t0: float, t1: float) -> Any:
    """An interval's seconds inside [t0, t1] (SQL)."""
    lo = case((JobInterval.start < t0, t0), else_=JobInterval.start)
    hi = case((JobInterval.end > t1, t1), else_=JobInterval.end)
    return hi - lo


def _clipped_rows(db_session: Session, slo: SloSpec, t0: float, t1: float) -> list[_Row]:
    """Seconds of each (job, component, phase) inside the window, for jobs in the SLO's scope."""
    stmt = (
        select(
            JobInterval.job_id,
            JobResult.model,
            JobResult.gpus,
            JobInterval.component,
            JobInterval.phase,
            func.sum(_clipped_s(t0, t1)),
        )
        .join(JobResult, JobResult.job_id == JobInterval.job_id)
        .where(JobInterval.end > t0, JobInterval.start < t1)
        .group_by(
            JobInterval.job_id,
            JobResult.model,
            JobResult.gpus,
            JobInterval.component,
            JobInterval.phase,
        )
    )
    clause = _model_clause(slo)
    if clause is not None:
        stmt = stmt.where(clause)
    rows = [
        _Row(job_id, model, int(gpus or 1), component, phase, float(seconds or 0.0))
        for job_id, model, gpus, component, phase, seconds in db_session.execute(stmt)
        if _model_ok(slo, model)
    ]
    keep = _label_filter(db_session, slo, (r.job_id for r in rows))
    return rows if keep is None else [r for r in rows if r.job_id in keep]


def _group(slo: SloSpec, items: Iterable[Any], model_of: Any) -> dict[str | None, list[Any]]:
    groups: dict[str | None, list[Any]] = defaultdict(list)
    for item in items:
        groups[model_of(item) if slo.per_model else None].append(item)
    return groups


# ---- share of wall GPU-time and the ETT% floor -----------------------------------------------------


def _share_evaluation(
    rows: list[_Row], hit: Any, model: str | None, *, drivers_high: bool
) -> Evaluation:
    """100 x GPU-seconds that hit / all GPU-seconds, with the models and jobs that drive it."""
    per_job_hit: dict[str, float] = defaultdict(float)
    per_job_all: dict[str, float] = defaultdict(float)
    per_model_hit: dict[str | None, float] = defaultdict(float)
    per_model_all: dict[str | None, float] = defaultdict(float)
    job_model: dict[str, str | None] = {}
    for r in rows:
        gpu_s = r.seconds * r.gpus
        per_job_all[r.job_id] += gpu_s
        per_model_all[r.model] += gpu_s
        job_model[r.job_id] = r.model
        if hit(r):
            per_job_hit[r.job_id] += gpu_s
            per_model_hit[r.model] += gpu_s
    total = sum(per_job_all.values())
    if total <= 0:
        return Evaluation(value=None, jobs=0, model=model)
    value = 100.0 * sum(per_job_hit.values()) / total

    def pct(h: dict[Any, float], a: dict[Any, float], key: Any) -> float:
        return 100.0 * h.get(key, 0.0) / a[key] if a[key] > 0 else 0.0

    if drivers_high:
        # Who contributes the most GPU-seconds to the breaching component.
        job_order = sorted(per_job_hit, key=lambda j: -per_job_hit[j])
        model_order = sorted(per_model_hit, key=lambda m: -per_model_hit[m])
    else:
        # For a floor: who loses the most GPU-seconds outside effective training.
        job_order = sorted(per_job_all, key=lambda j: -(per_job_all[j] - per_job_hit.get(j, 0.0)))
        model_order = sorted(
            per_model_all, key=lambda m: -(per_model_all[m] - per_model_hit.get(m, 0.0))
        )
    return Evaluation(
        value=value,
        jobs=len(per_job_all),
        model=model,
        models=[
            {"model": m, "value": pct(per_model_hit, per_model_all, m)}
            for m in model_order[:TOP_N]
            if m is not None
        ],
        job_drivers=[
            {
                "job_id": j,
                "model": job_model[j],
                "value": pct(per_job_hit, per_job_all, j),
            }
            for j in job_order[:TOP_N]
        ],
    )


def _gpu_time_share(db_session: Session, slo: SloSpec, t0: float, t1: float) -> list[Evaluation]:
    rows = _clipped_rows(db_session, slo, t0, t1)
    return [
        _share_evaluation(
            group, lambda r: _matches_phase(slo, r.component, r.phase), model, drivers_high=True
        )
        for model, group in sorted(_group(slo, rows, lambda r: r.model).items(), key=_key)
    ]


def _ett_floor(db_session: Session, slo: SloSpec, t0: float, t1: float) -> list[Evaluation]:
    rows = _clipped_rows(db_session, slo, t0, t1)
    return [
        _share_evaluation(
            group, lambda r: r.component == "effective_training", model, drivers_high=False
        )
        for model, group in sorted(_group(slo, rows, lambda r: r.model).items(), key=_key)
        if model is not None
    ]


def _clipped_gpu_s(t0: float, t1: float) -> Any:
    return _clipped_s(t0, t1) * JobResult.gpus


def _phase_clause(slo: SloSpec) -> Any:
    clause: Any = JobInterval.component == slo.component
    if slo.phase:
        clause = and_(
            clause, or_(JobInterval.phase == slo.phase, JobInterval.phase.like(slo.phase + ".%"))
        )
    return clause


def _window_totals(
    db_session: Session, slo: SloSpec, t0: float, t1: float, cache: dict[Any, Any]
) -> tuple[list[tuple[str | None, str, str | None, float]], dict[str | None, int]]:
    """GPU-seconds per (model, component, phase) and jobs per model in the window (cached)."""
    key = ("totals", t0, t1, slo.model)
    if key in cache:
        return cache[key]
    where = [JobInterval.end > t0, JobInterval.start < t1]
    clause = _model_clause(slo)
    if clause is not None:
        where.append(clause)
    totals = [
        (model, component, phase, float(gpu_s or 0.0))
        for model, component, phase, gpu_s in db_session.execute(
            select(
                JobResult.model,
                JobInterval.component,
                JobInterval.phase,
                func.sum(_clipped_gpu_s(t0, t1)),
            )
            .join(JobResult, JobResult.job_id == JobInterval.job_id)
            .where(*where)
            .group_by(JobResult.model, JobInterval.component, JobInterval.phase)
        )
        if _model_ok(slo, model)
    ]
    jobs = {
        model: int(n)
        for model, n in db_session.execute(
            select(JobResult.model, func.count(func.distinct(JobInterval.job_id)))
            .join(JobResult, JobResult.job_id == JobInterval.job_id)
            .where(*where)
            .group_by(JobResult.model)
        )
        if _model_ok(slo, model)
    }
    cache[key] = (totals, jobs)
    return totals, jobs


def _top_jobs(
    db_session: Session,
    slo: SloSpec,
    t0: float,
    t1: float,
    ranked: Any,
    hit: Any,
    *,
    per_model: bool,
) -> dict[str | None, list[dict[str, Any]]]:
    """The jobs with the most GPU-seconds in `ranked`, each with its own % of `hit`.

    Keyed by model when per_model (one query for every model), else under None.
    """
    gpu_s = _clipped_gpu_s(t0, t1)
    where = [JobInterval.end > t0, JobInterval.start < t1]
    if (clause := _model_clause(slo)) is not None:
        where.append(clause)
    score = func.sum(case((ranked, gpu_s), else_=0.0))
    stmt = (
        select(
            JobInterval.job_id,
            JobResult.model,
            score,
            func.sum(case((hit, gpu_s), else_=0.0)),
            func.sum(gpu_s),
        )
        .join(JobResult, JobResult.job_id == JobInterval.job_id)
        .where(*where)
        .group_by(JobInterval.job_id, JobResult.model)
        .having(score > 0)
        .order_by(score.desc(), JobInterval.job_id)
    )
    if not per_model and not (slo.model and _is_glob(slo.model)):
        stmt = stmt.limit(TOP_N)
    out: dict[str | None, list[dict[str, Any]]] = defaultdict(list)
    for job_id, m, _score, hit_s, all_s in db_session.execute(stmt):
        if not _model_ok(slo, m):
            continue
        group = out[m if per_model else None]
        if len(group) < TOP_N:
            share = 100.0 * float(hit_s or 0) / float(all_s or 1)
            group.append({"job_id": job_id, "model": m, "value": share})
    return out


def _share_in_sql(
    db_session: Session, slo: SloSpec, t0: float, t1: float, cache: dict[Any, Any]
) -> list[Evaluation]:
    """Share of wall GPU-time (or the ETT% floor) with the sums done by the database."""
    totals, jobs = _window_totals(db_session, slo, t0, t1, cache)
    floor = slo.indicator == "ett_floor"

    def is_hit(component: str, phase: str | None) -> bool:
        if floor:
            return component == "effective_training"
        return _matches_phase(slo, component, phase)

    hit_sql = JobInterval.component == "effective_training" if floor else _phase_clause(slo)
    # Who drives it: for a ceiling, the most GPU-seconds in the component; for a floor, the
    # most GPU-seconds lost outside effective training.
    ranked_sql = JobInterval.component != "effective_training" if floor else hit_sql
    per_model_hit: dict[str | None, float] = defaultdict(float)
    per_model_all: dict[str | None, float] = defaultdict(float)
    for model, component, phase, gpu_s in totals:
        per_model_all[model] += gpu_s
        if is_hit(component, phase):
            per_model_hit[model] += gpu_s
    if slo.per_model:
        groups: dict[str | None, list[str | None]] = {
            m: [m] for m in per_model_all if m is not None
        }
    else:
        groups = {None: list(per_model_all)}
    top = _top_jobs(db_session, slo, t0, t1, ranked_sql, hit_sql, per_model=slo.per_model)
    out = []
    for group_model, members in sorted(groups.items(), key=lambda kv: kv[0] or ""):
        total = sum(per_model_all[m] for m in members)
        if total <= 0:
            continue
        hit = sum(per_model_hit[m] for m in members)

        def rank(m: str | None) -> float:
            return per_model_all[m] - per_model_hit[m] if floor else per_model_hit[m]

        models = [
            {"model": m, "value": 100.0 * per_model_hit[m] / per_model_all[m]}
            for m in sorted(members, key=lambda m: -rank(m))
            if m is not None and per_model_all[m] > 0 and rank(m) > 0
        ][:TOP_N]
        out.append(
            Evaluation(
                value=100.0 * hit / total,
                jobs=sum(jobs.get(m, 0) for m in members),
                model=group_model,
                models=models,
                job_drivers=top.get(group_model, []),
            )
        )
    return out


def _key(item: tuple[str | None, Any]) -> str:
    return item[0] or ""


# ---- per-attempt duration percentile -------------------------------------------------------------


def _duration_percentile(
    db_session: Session, slo: SloSpec, t0: float, t1: float
) -> list[Evaluation]:
    """Percentile of each attempt's exposed time in the phase, for attempts that began it in the window."""
    phase_clause = _phase_clause(slo)
    first = func.min(JobInterval.start)
    stmt = (
        select(
            JobInterval.job_id,
            JobInterval.attempt,
            JobResult.model,
            func.sum(JobInterval.end - JobInterval.start),
        )
        .join(JobResult, JobResult.job_id == JobInterval.job_id)
        .where(phase_clause)
        .group_by(JobInterval.job_id, JobInterval.attempt, JobResult.model)
        .having(and_(first >= t0, first < t1))
    )
    clause = _model_clause(slo)
    if clause is not None:
        stmt = stmt.where(clause)
    attempts = [
        (job_id, attempt, model, float(seconds or 0.0))
        for job_id, attempt, model, seconds in db_session.execute(stmt)
        if _model_ok(slo, model)
    ]
    keep = _label_filter(db_session, slo, (a[0] for a in attempts))
    if keep is not None:
        attempts = [a for a in attempts if a[0] in keep]
    out = []
    for model, group in sorted(_group(slo, attempts, lambda a: a[2]).items(), key=_key):
        durations = np.array([a[3] for a in group], dtype=float)
        value = float(np.percentile(durations, slo.percentile or 50.0))
        by_model: dict[str | None, list[float]] = defaultdict(list)
        for a in group:
            by_model[a[2]].append(a[3])
        model_values = {
            m: float(np.percentile(np.array(v), slo.percentile or 50.0))
            for m, v in by_model.items()
        }
        slowest = sorted(group, key=lambda a: -a[3])
        seen: set[str] = set()
        job_drivers = []
        for job_id, attempt, m, seconds in slowest:
            if job_id in seen:
                continue
            seen.add(job_id)
            job_drivers.append({"job_id": job_id, "model": m, "attempt": attempt, "value": seconds})
            if len(job_drivers) >= TOP_N:
                break
        out.append(
            Evaluation(
                value=value,
                jobs=len({a[0] for a in group}),
                model=model,
                models=[
                    {"model": m, "value": v}
                    for m, v in sorted(model_values.items(), key=lambda kv: -kv[1])[:TOP_N]
                    if m is not None
                ],
                job_drivers=job_drivers,
            )
        )
    return out


# ---- failures per job -------------------------------------------------------------------------


def _failures_per_job(db_session: Session, slo: SloSpec, t0: float, t1: float) -> list[Evaluation]:
    """Failures (of one kind, or any) that happened in the window, per job active in it."""
    stmt = select(
        JobResult.job_id, JobResult.model, JobResult.nof, JobResult.submitted_at, JobResult.ended_at
    ).where(
        JobResult.submitted_at < t1,
        or_(JobResult.ended_at.is_(None), JobResult.ended_at > t0),
    )
    clause = _model_clause(slo)
    if clause is not None:
        stmt = stmt.where(clause)
    jobs = [row for row in db_session.execute(stmt) if _model_ok(slo, row[1])]
    keep = _label_filter(db_session, slo, (j[0] for j in jobs))
    if keep is not None:
        jobs = [j for j in jobs if j[0] in keep]
    with_failures = [j[0] for j in jobs if (j[2] or 0) > 0]
    counts: dict[str, int] = defaultdict(int)
    # One row per failure, kept current by every recompute (backend/fleet).
    for i in range(0, len(with_failures), 500):
        stmt = select(FleetFailure.job_id, func.count()).where(
            FleetFailure.job_id.in_(with_failures[i : i + 500]),
            FleetFailure.ts >= t0,
            FleetFailure.ts < t1,
        )
        if slo.failure_kind not in (None, "any"):
            stmt = stmt.where(FleetFailure.kind == slo.failure_kind)
        for job_id, n in db_session.execute(stmt.group_by(FleetFailure.job_id)):
            counts[job_id] = n
    out = []
    for model, group in sorted(_group(slo, jobs, lambda j: j[1]).items(), key=_key):
        if not group:
            continue
        total = sum(counts.get(j[0], 0) for j in group)
        by_model_jobs: dict[str | None, int] = defaultdict(int)
        by_model_fail: dict[str | None, int] = defaultdict(int)
        for j in group:
            by_model_jobs[j[1]] += 1
            by_model_fail[j[1]] += counts.get(j[0], 0)
        model_rates = sorted(
            ((m, by_model_fail[m] / n) for m, n in by_model_jobs.items() if m is not None),
            key=lambda kv: -kv[1],
        )
        worst = sorted((j for j in group if counts.get(j[0])), key=lambda j: -counts[j[0]])
        out.append(
            Evaluation(
                value=total / len(group),
                jobs=len(group),
                model=model,
                models=[{"model": m, "value": v} for m, v in model_rates[:TOP_N] if v > 0],
                job_drivers=[
                    {"job_id": j[0], "model": j[1], "value": float(counts[j[0]])}
                    for j in worst[:TOP_N]
                ],
            )
        )
    return out


# ---- no progress while alive ---------------------------------------------------------------------


def _no_progress(db_session: Session, slo: SloSpec, t0: float, t1: float) -> list[Evaluation]:
    """Seconds each live open job has gone without effective training; the worst job's value.

    Live: the job is open and its last event (heartbeats included) lies inside the window. The
    clock runs from its last effective instant, or from its latest attempt's start when that
    attempt has not trained yet, so a loop that stopped (stalled windows) and a hang inside a
    phase (an open span) both count.
    """
    stmt = (
        select(Job.job_id, JobResult.model, JobResult.submitted_at)
        .join(JobResult, JobResult.job_id == Job.job_id)
        .where(JobResult.provisional.is_(True), Job.last_event_at >= t0)
    )
    if (clause := _model_clause(slo)) is not None:
        stmt = stmt.where(clause)
    jobs = [row for row in db_session.execute(stmt) if _model_ok(slo, row[1])]
    keep = _label_filter(db_session, slo, (j[0] for j in jobs))
    if keep is not None:
        jobs = [j for j in jobs if j[0] in keep]
    since: dict[str, float] = {j[0]: float(j[2] if j[2] is not None else t1) for j in jobs}
    ids = list(since)
    for i in range(0, len(ids), 500):
        chunk = ids[i : i + 500]
        for job_id, end in db_session.execute(
            select(JobInterval.job_id, func.max(JobInterval.end))
            .where(JobInterval.job_id.in_(chunk), JobInterval.component == "effective_training")
            .group_by(JobInterval.job_id)
        ):
            since[job_id] = max(since[job_id], float(end))
        for job_id, started in db_session.execute(
            select(Attempt.job_id, func.max(Attempt.started_at))
            .where(Attempt.job_id.in_(chunk))
            .group_by(Attempt.job_id)
        ):
            if started is not None:
                since[job_id] = max(since[job_id], float(started))
    out = []
    for model, group in sorted(_group(slo, jobs, lambda j: j[1]).items(), key=_key):
        quiet = sorted(
            ((j[0], j[1], max(0.0, t1 - since[j[0]])) for j in group), key=lambda q: -q[2]
        )
        if not quiet:
            continue
        worst_by_model: dict[str | None, float] = {}
        for _, m, seconds in quiet:
            worst_by_model[m] = max(worst_by_model.get(m, 0.0), seconds)
        out.append(
            Evaluation(
                value=quiet[0][2],
                jobs=len(quiet),
                model=model,
                models=[
                    {"model": m, "value": v}
                    for m, v in sorted(worst_by_model.items(), key=lambda kv: -kv[1])[:TOP_N]
                    if m is not None
                ],
                job_drivers=[
                    {"job_id": j, "model": m, "value": v} for j, m, v in quiet[:TOP_N] if v > 0
                ],
            )
        )
    return out
