"""Advice from stored results: per-model checkpoint interval (Eq. 2), per-job critical path (Eq. 4)."""

from __future__ import annotations

import statistics
import time
from collections import defaultdict
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from backend.advice.checkpoint import (
    curve_intervals,
    median_gap,
    minutes_per_day_saved,
    optimal_interval_s,
    utt_fraction,
    wtt_curve,
    wtt_fraction,
)
from backend.advice.critical_path import attempt_critical_path
from backend.config import Settings
from backend.ett.models import JobInterval, JobResult
from backend.fleet.days import DAY_S
from backend.fleet.ledger import job_contributions
from backend.jobs.models import Job, Model
from backend.metrics import core as metrics
from backend.params import MODEL_WINDOW_DAYS

TRAINING = ("effective_training", "wasted_training")

# The advice's default window: the one model window (backend.params).
DEFAULT_ADVICE_DAYS = float(MODEL_WINDOW_DAYS)
BLOCKING = "checkpoint_blocking"


def checkpoint_advice(
    *,
    db_session: Session,
    model: str,
    start: float | None = None,
    end: float | None = None,
    points: int = 60,
) -> dict[str, Any]:
    """One model's checkpoint-interval advice from its jobs submitted in [start, end).

    Measured: CSBT (median blocking per save), failure rate (failures per training hour, where
    training is effective plus wasted training time), the current interval (the jobs' configured
    `checkpoint_interval_s`, else the median gap between saves). Derived: tau*, the WTT curve
    (`curve`: interval_s, wtt_pct, utt_pct, blocking_pct of training time), the minutes a day of
    training a move to tau* saves, and the predicted UTT (NoF x tau / 2) against the replay the
    jobs measured. Defaults to the last MODEL_WINDOW_DAYS (30) days; LookupError for an unknown model.
    """
    if db_session.get(Model, model) is None:
        raise LookupError(f"unknown model {model!r}")
    end = time.time() if end is None else end
    start = end - DEFAULT_ADVICE_DAYS * DAY_S if start is None else start
    jobs = db_session.execute(
        select(
            JobResult.job_id,
            JobResult.gpus,
            JobResult.nof,
            JobResult.result["components"].label("components"),
            JobResult.result["wasted"].label("wasted"),
            Job.config,
        )
        .join(Job, Job.job_id == JobResult.job_id)
        .where(
            JobResult.model == model,
            JobResult.submitted_at >= start,
            JobResult.submitted_at < end,
        )
    ).all()
    ids = [j.job_id for j in jobs]
    # Training GPU-seconds at each attempt's GPUs, as the fleet tables booked them.
    booked, _failures = job_contributions(db_session=db_session, job_ids=ids)
    training_s = training_gpu_s = replay_s = 0.0
    failures = 0
    configured: list[float] = []
    for j in jobs:
        comps = j.components or {}
        t = float(comps.get("effective_training", 0.0)) + float(comps.get("wasted_training", 0.0))
        training_s += t
        parts = booked.get(j.job_id)
        training_gpu_s += (
            sum(v for (comp, _p), v in parts.items() if comp in TRAINING)
            if parts
            else metrics.gpu_s(t, j.gpus)
        )
        replay_s += float((j.wasted or {}).get("replay", 0.0))
        failures += int(j.nof or 0)
        interval = (j.config or {}).get("checkpoint_interval_s")
        if isinstance(interval, int | float) and interval > 0:
            configured.append(float(interval))

    blocking: list[float] = []
    starts: dict[tuple[str, int | None], list[float]] = defaultdict(list)
    for i in range(0, len(ids), 500):
        for job_id, attempt, s, e in db_session.execute(
            select(
                JobInterval.job_id, JobInterval.attempt, JobInterval.start, JobInterval.end
            ).where(JobInterval.job_id.in_(ids[i : i + 500]), JobInterval.phase == BLOCKING)
        ):
            blocking.append(e - s)
            starts[(job_id, attempt)].append(s)
    gaps = [g for group in starts.values() if (g := median_gap(group)) is not None]

    csbt = statistics.median(blocking) if blocking else None
    rate_per_s = failures / training_s if training_s > 0 else None
    configured_s = statistics.median(configured) if configured else None
    measured_s = statistics.median(gaps) if gaps else None
    current = configured_s if configured_s is not None else measured_s
    source = "config" if configured_s is not None else ("measured" if measured_s else None)
    tau_star = optimal_interval_s(csbt, rate_per_s) if csbt and rate_per_s else None

    notes: list[str] = []
    if not jobs:
        notes.append("no jobs of this model in the range")
    if csbt is None:
        notes.append("no checkpoint saves measured: CSBT unknown")
    if rate_per_s == 0:
        notes.append("no failures measured: WTT falls with every longer interval, no optimum")
    curve: list[dict[str, float]] = []
    wtt_now = wtt_best = saved = gpu_h_day = None
    if csbt is not None and rate_per_s is not None:
        curve = wtt_curve(curve_intervals([current, tau_star], points), csbt, rate_per_s)
        if current is not None:
            wtt_now = wtt_fraction(current, csbt, rate_per_s) * 100.0
        if tau_star is not None:
            wtt_best = wtt_fraction(tau_star, csbt, rate_per_s) * 100.0
        if current is not None and tau_star is not None:
            saved = minutes_per_day_saved(current, tau_star, csbt, rate_per_s)
            days = (end - start) / DAY_S
            gpu_h_day = metrics.gpu_h(training_gpu_s) / days * saved / 1440.0

    predicted_utt = failures * current / 2.0 if current is not None else None
    return {
        "model": model,
        "start": start,
        "end": end,
        "jobs": len(jobs),
        "checkpoints": len(blocking),
        "csbt_s": csbt,
        "failures": failures,
        "training_h": training_s / 3600.0,
        "failure_rate_per_h": rate_per_s * 3600.0 if rate_per_s is not None else None,
        "current_interval_s": current,
        "current_interval_source": source,
        "configured_interval_s": configured_s,
        "measured_interval_s": measured_s,
        "optimal_interval_s": tau_star,
        "wtt_pct_current": wtt_now,
        "wtt_pct_optimal": wtt_best,
        "minutes_per_day_saved": saved,
        "gpu_h_per_day_saved": gpu_h_day,
        "utt": {
            "predicted_s": predicted_utt,
            "measured_s": replay_s,
            "predicted_per_failure_s": current / 2.0 if current is not None else None,
            "measured_per_failure_s": replay_s / failures if failures else None,
            "predicted_pct": (
                utt_fraction(current, rate_per_s) * 100.0
                if current is not None and rate_per_s is not None
                else None
            ),
            "measured_pct": replay_s / training_s * 100.0 if training_s > 0 else None,
        },
        "curve": curve,
        "notes": notes,
    }


def critical_path(
    *, db_session: Session, job_id: str, settings: Settings | None = None
) -> dict[str, Any]:
    """Each attempt's init critical path, hidden work and fast-batch what-if (Eq. 4).

    Read from the engine's stored result: the path from the attributed intervals, the spans'
    full extent (to see the work overlap hid) from the spans kept with the result. LookupError
    for an unknown or not yet computed job.
    """
    stored = db_session.execute(
        select(JobResult.result["spans"]).where(JobResult.job_id == job_id)
    ).one_or_none()
    if stored is None:
        raise LookupError(f"unknown job {job_id!r} (or not computed yet)")
    if stored[0] is None:
        # Stored before results kept their spans (read sessions cannot mark it dirty).
        raise LookupError(
            f"job {job_id!r} was computed before results kept their spans; "
            "recompute it (`ett recompute --all`) to see its critical path"
        )
    rows = db_session.execute(
        select(
            JobInterval.attempt,
            JobInterval.start,
            JobInterval.end,
            JobInterval.component,
            JobInterval.phase,
        )
        .where(JobInterval.job_id == job_id)
        .order_by(JobInterval.start)
    ).all()
    spans: dict[int | None, list[tuple[str, float, float]]] = defaultdict(list)
    for attempt, phase, start, end in stored[0]:
        spans[attempt].append((phase, start, end))
    by_attempt: dict[int | None, list[tuple[float, float, str, str | None]]] = defaultdict(list)
    for attempt, s, e, comp, phase in rows:
        by_attempt[attempt].append((s, e, comp, phase))
    attempts = []
    for attempt in sorted(a for a in by_attempt if a is not None):
        cp = attempt_critical_path(by_attempt[attempt], spans.get(attempt, []))
        attempts.append({"attempt": attempt, **cp})
    saving = sum(a["fast_batch"]["saving_s"] for a in attempts)
    return {
        "job_id": job_id,
        "attempts": attempts,
        "fast_batch": {
            "saving_s": saving,
            "attempts_with_saving": sum(1 for a in attempts if a["fast_batch"]["saving_s"] > 0),
        },
    }
