"""Service queries that measure an SLO's indicator over its window, from the per-job tables.

Shares of wall GPU-time and the ETT% floor come from the metrics layer (backend.metrics.window):
an interval's overlap with the window times the job's GPUs, NULL GPUs as 1, one implementation
for every scope (model, glob, labels).
"""

from __future__ import annotations

import fnmatch
from collections import defaultdict
from collections.abc import Iterable
from typing import Any

import numpy as np
from sqlalchemy import and_, func, or_, select
from sqlalchemy.orm import Session

from backend.alerts.content import Evaluation
from backend.alerts.slos import LIVE_INDICATORS, VOLUME_INDICATORS, SloSpec
from backend.ett.models import JobInterval, JobResult
from backend.ett.partition import EFFECTIVE
from backend.fleet.models import FleetFailure
from backend.jobs.models import Attempt, Job
from backend.metrics import nodes, window
from backend.metrics.core import gpu_h

TOP_N = 5


def measure(
    db_session: Session,
    slo: SloSpec,
    now: float,
    cache: dict[Any, Any] | None = None,
    *,
    drivers: bool = True,
) -> list[Evaluation]:
    """The SLO's indicator over [now - window, now]: one Evaluation, or one per model.

    `cache` (one dict per evaluation pass) shares the window totals between SLOs that have the
    same window and model filter, which is most of them. `drivers=False` leaves out the share
    indicators' top jobs (a query per SLO) where only the values are kept (SLO history).
    """
    t0, t1 = now - slo.window_s, now
    cache = {} if cache is None else cache
    if slo.indicator in ("gpu_time_share", "ett_floor"):
        out = _share(db_session, slo, t0, t1, cache, drivers=drivers)
    elif slo.indicator == "duration_percentile":
        out = _duration_percentile(db_session, slo, t0, t1)
    elif slo.indicator == "failures_per_job":
        out = _failures_per_job(db_session, slo, t0, t1)
    elif slo.indicator == "no_progress_s":
        return _no_progress(db_session, slo, t0, t1)
    elif slo.indicator == "lemon_nodes":
        return _lemon_nodes(db_session, slo, t0, t1)
    elif slo.indicator in LIVE_INDICATORS:
        raise ValueError(f"{slo.indicator} is measured by the live pass (backend/alerts/live.py)")
    else:
        raise ValueError(f"unknown indicator {slo.indicator!r}")
    return volume_guarded(db_session, slo, t0, t1, cache, out)


# ---- volume guards -------------------------------------------------------------------------------


def _totals(
    db_session: Session, slo: SloSpec, t0: float, t1: float, cache: dict[Any, Any]
) -> tuple[window.Totals, dict[str | None, int]]:
    """The window's GPU-seconds per (model, component, phase) and jobs per model, in scope."""
    exact = slo.model if slo.model and not _is_glob(slo.model) else None
    labels = dict(slo.labels) if slo.labels else None
    key = ("totals", t0, t1, slo.model, tuple(sorted((labels or {}).items())))
    if key not in cache:
        cache[key] = window.window_totals(
            db_session=db_session,
            start=t0,
            end=t1,
            model=exact,
            labels=labels,
            model_ok=lambda m: _model_ok(slo, m),
        )
    return cache[key]


def volume_guarded(
    db_session: Session,
    slo: SloSpec,
    t0: float,
    t1: float,
    cache: dict[Any, Any],
    evaluations: list[Evaluation],
) -> list[Evaluation]:
    """The evaluations whose scope (the model, or all the SLO's jobs) had at least `min_jobs`
    jobs and `min_gpu_hours` GPU-hours in the window; the others measure nothing."""
    if slo.indicator not in VOLUME_INDICATORS or (slo.min_jobs <= 0 and slo.min_gpu_hours <= 0):
        return evaluations
    totals, jobs = _totals(db_session, slo, t0, t1, cache)
    gpu_s: dict[str | None, float] = defaultdict(float)
    for m, _component, _phase, seconds in totals:
        gpu_s[m] += seconds
    kept = []
    for ev in evaluations:
        if slo.per_model:
            n, g = jobs.get(ev.model, 0), gpu_s.get(ev.model, 0.0)
        else:
            n, g = sum(jobs.values()), sum(gpu_s.values())
        if n >= slo.min_jobs and gpu_h(g) >= slo.min_gpu_hours:
            kept.append(ev)
    return kept


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


def _group(slo: SloSpec, items: Iterable[Any], model_of: Any) -> dict[str | None, list[Any]]:
    groups: dict[str | None, list[Any]] = defaultdict(list)
    for item in items:
        groups[model_of(item) if slo.per_model else None].append(item)
    return groups


# ---- share of wall GPU-time and the ETT% floor -----------------------------------------------------


def _phase_clause(slo: SloSpec) -> Any:
    clause: Any = JobInterval.component == slo.component
    if slo.phase:
        clause = and_(
            clause, or_(JobInterval.phase == slo.phase, JobInterval.phase.like(slo.phase + ".%"))
        )
    return clause


def _share(
    db_session: Session,
    slo: SloSpec,
    t0: float,
    t1: float,
    cache: dict[Any, Any],
    *,
    drivers: bool = True,
) -> list[Evaluation]:
    """Share of wall GPU-time in the SLO's component (or the ETT% floor), from the metrics layer."""
    floor = slo.indicator == "ett_floor"
    exact = slo.model if slo.model and not _is_glob(slo.model) else None
    labels = dict(slo.labels) if slo.labels else None
    scope = {"model": exact, "labels": labels, "model_ok": lambda m: _model_ok(slo, m)}
    totals, jobs = _totals(db_session, slo, t0, t1, cache)

    def is_hit(component: str, phase: str | None) -> bool:
        if floor:
            return component == EFFECTIVE
        return _matches_phase(slo, component, phase)

    hit_sql = JobInterval.component == EFFECTIVE if floor else _phase_clause(slo)
    # Who drives it: for a ceiling, the most GPU-seconds in the component; for a floor, the
    # most GPU-seconds lost outside effective training.
    ranked_sql = JobInterval.component != EFFECTIVE if floor else hit_sql
    top = (
        window.top_jobs(
            db_session=db_session,
            start=t0,
            end=t1,
            ranked=ranked_sql,
            hit=hit_sql,
            per_model=slo.per_model,
            limit_in_sql=not (slo.model and _is_glob(slo.model)),
            **scope,
        )
        if drivers
        else {}
    )
    return [
        Evaluation(
            value=share.value,
            jobs=share.jobs,
            model=share.model,
            models=share.models,
            job_drivers=top.get(share.model, []),
        )
        for share in window.shares(
            totals, jobs, is_hit=is_hit, per_model=slo.per_model, rank_lost=floor
        )
    ]


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


# ---- lemon nodes ---------------------------------------------------------------------------------


def _lemon_nodes(db_session: Session, slo: SloSpec, t0: float, t1: float) -> list[Evaluation]:
    """One evaluation per host whose lemon score is at least half the objective (so a lemon's
    alert resolves only once its score is back under the objective by the hysteresis, and a
    host near the threshold does not page again and again); the value is the score."""
    answer = nodes.nodes(db_session=db_session, start=t0, end=t1)
    out = []
    for row in answer["nodes"]:
        score = row["lemon_score"]
        if score is None or score < slo.objective / 2:
            continue
        out.append(
            Evaluation(
                value=score,
                jobs=row["jobs"],
                key=row["host"],
                extra={
                    k: row[k]
                    for k in (
                        "unplanned_failures",
                        "exposure_node_days",
                        "expected_failures",
                        "q_value",
                        "ttr_lost_gpu_h",
                    )
                },
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
            .where(JobInterval.job_id.in_(chunk), JobInterval.component == EFFECTIVE)
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
