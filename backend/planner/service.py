"""The planner over stored job results: fit every model of a window, predict, what-ifs, ranking.

SQL lives here; the model (backend/planner/model.py), the fit (fit.py) and the what-ifs
(whatif.py) are pure.
"""

from __future__ import annotations

import time
from collections import defaultdict
from dataclasses import asdict
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from backend.config import Settings
from backend.ett.models import JobInterval, JobResult
from backend.fleet.days import DAY_S
from backend.jobs.models import Job, Model
from backend.metrics import core as metrics
from backend.owners.service import resolver
from backend.params import MODEL_WINDOW_DAYS
from backend.planner.fit import Fit, JobObservation, fit_inputs, observe_job
from backend.planner.model import (
    DEFAULT_STAGING_FRACTION,
    Change,
    ModelInputs,
    Prediction,
    optimal_interval_s,
    predict,
    replay_per_failure_s,
)
from backend.planner.whatif import (
    WhatIf,
    WhatIfOutcome,
    evaluate,
    fleet_p25,
    owner_of_lever,
    rank,
    standard_what_ifs,
    to_p25_change,
)

# The window a plan fits by default: the one model window (backend.params).
DEFAULT_PLAN_DAYS = float(MODEL_WINDOW_DAYS)
CHUNK = 500
EFFECTIVE = "effective_training"


def load_observations(
    *, db_session: Session, start: float, end: float, model: str | None = None
) -> dict[str, list[JobObservation]]:
    """Model -> its finished jobs submitted in [start, end), read from the stored results."""
    stmt = (
        select(JobResult.job_id, JobResult.result, Job.config)
        .join(Job, Job.job_id == JobResult.job_id)
        .where(
            JobResult.submitted_at >= start,
            JobResult.submitted_at < end,
            JobResult.provisional.is_(False),
            JobResult.model.is_not(None),
        )
        .order_by(JobResult.submitted_at)
    )
    if model is not None:
        stmt = stmt.where(JobResult.model == model)
    rows = db_session.execute(stmt).all()
    intervals: dict[str, list[tuple[float, float, int | None, str, str | None]]] = defaultdict(list)
    last_effective: dict[str, float] = {}
    ids = [r.job_id for r in rows]
    for i in range(0, len(ids), CHUNK):
        chunk = ids[i : i + CHUNK]
        # Effective training is most of the rows and the fit needs only where it ends.
        for job_id, s, e, attempt, comp, phase in db_session.execute(
            select(
                JobInterval.job_id,
                JobInterval.start,
                JobInterval.end,
                JobInterval.attempt,
                JobInterval.component,
                JobInterval.phase,
            ).where(JobInterval.job_id.in_(chunk), JobInterval.component != EFFECTIVE)
        ):
            intervals[job_id].append((s, e, attempt, comp, phase))
        last_effective.update(
            db_session.execute(
                select(JobInterval.job_id, func.max(JobInterval.end))
                .where(JobInterval.job_id.in_(chunk), JobInterval.component == EFFECTIVE)
                .group_by(JobInterval.job_id)
            ).all()
        )
    out: dict[str, list[JobObservation]] = defaultdict(list)
    for r in rows:
        obs = observe_job(
            r.result,
            intervals.get(r.job_id, []),
            r.config,
            last_effective=last_effective.get(r.job_id, float(r.result["submitted_at"])),
        )
        if obs.model:
            out[obs.model].append(obs)
    return dict(out)


def _window(start: float | None, end: float | None) -> tuple[float, float]:
    hi = time.time() if end is None else end
    lo = hi - DEFAULT_PLAN_DAYS * DAY_S if start is None else start
    if lo >= hi:
        raise ValueError("start must be before end")
    return lo, hi


def _fits(
    observations: dict[str, list[JobObservation]],
    start: float,
    end: float,
    half_life_days: float | None,
) -> dict[str, Fit]:
    days = (end - start) / DAY_S
    return {
        m: fit_inputs(
            jobs,
            end=end,
            window_days=days,
            half_life_days=half_life_days,
            estimator="level" if half_life_days is None else "recency",
        )
        for m, jobs in sorted(observations.items())
    }


def inputs_dict(inputs: ModelInputs, fit: Fit) -> dict[str, Any]:
    """The fitted inputs as the REST answer shows them (units in the names)."""
    tau = optimal_interval_s(inputs)
    return {
        "gpus": inputs.gpus,
        "effective_s": inputs.effective_s,
        "failures_per_job": inputs.failures_per_job,
        "failure_rate_per_gpu_h": dict(inputs.failure_rate_per_gpu_h),
        "failure_rate_per_training_h": inputs.failure_rate_per_training_s * 3600.0,
        "cold_start_s": dict(inputs.cold_start_s),
        "cold_start_total_s": sum(inputs.cold_start_s.values()),
        "recovery_s": dict(inputs.recovery_s),
        "recovery_total_s": sum(inputs.recovery_s.values()),
        "recoveries_per_job": inputs.recoveries_per_job,
        "give_up_share": inputs.give_up_share,
        "give_up_s": dict(inputs.give_up_s),
        "csbt_s": inputs.csbt_s,
        "interval_s": inputs.interval_s,
        "interval_source": fit.interval_source,
        "optimal_interval_s": tau,
        "replay_per_failure_predicted_s": replay_per_failure_s(inputs),
        "replay_per_failure_measured_s": fit.measured_replay_per_failure_s,
        "stall_s_per_h": inputs.stall_s_per_h,
        "other_in_loop_s_per_h": dict(inputs.other_in_loop_s_per_h),
        "final_shutdown_s": inputs.final_shutdown_s,
        "jobs_per_day": inputs.jobs_per_day,
    }


def inputs_from_dict(d: dict[str, Any]) -> ModelInputs:
    """ModelInputs back from `inputs_dict` (the dashboard's what-if sliders recompute from it)."""
    return ModelInputs(
        gpus=int(d["gpus"]),
        effective_s=float(d["effective_s"]),
        failure_rate_per_gpu_h=dict(d["failure_rate_per_gpu_h"]),
        cold_start_s=dict(d["cold_start_s"]),
        recovery_s=dict(d["recovery_s"]),
        csbt_s=float(d["csbt_s"]),
        interval_s=float(d["interval_s"]),
        final_shutdown_s=float(d["final_shutdown_s"]),
        stall_s_per_h=float(d["stall_s_per_h"]),
        other_in_loop_s_per_h=dict(d["other_in_loop_s_per_h"]),
        jobs_per_day=float(d["jobs_per_day"]),
        give_up_share=float(d.get("give_up_share", 0.0)),
        give_up_s=dict(d.get("give_up_s") or {}),
    )


def prediction_dict(p: Prediction, measured_ett_pct: float | None) -> dict[str, Any]:
    """A prediction as the REST answer shows it."""
    return {
        "ett_pct": p.ett_pct,
        "measured_ett_pct": measured_ett_pct,
        "e2e_s": p.e2e_s,
        "effective_s": p.effective_s,
        "failures_per_job": p.failures_per_job,
        "lost_s": p.lost_s,
        "lost_by_component_s": p.lost_by_component_s,
        "lost_gpu_h_per_day": p.lost_gpu_h_per_day,
        "lost_gpu_h_per_day_by_component": p.lost_gpu_h_per_day_by_component(),
        "allocated_gpu_h_per_day": p.allocated_gpu_h_per_day,
    }


def fit_dict(fit: Fit, start: float, end: float) -> dict[str, Any]:
    """What a fit rests on, with its warnings."""
    return {
        "start": start,
        "end": end,
        "jobs": fit.jobs,
        "failures": fit.failures,
        "failures_by_kind": fit.failures_by_kind,
        "checkpoint_saves": fit.saves,
        "effective_jobs": fit.effective_jobs,
        "half_life_days": fit.half_life_days,
        "estimator": fit.estimator,
        "warnings": list(fit.warnings),
    }


def change_dict(change: Change) -> dict[str, Any]:
    """A change as plain JSON, without the fields it leaves alone."""
    return {k: v for k, v in asdict(change).items() if v not in (None, {}, ())}


def outcome_dict(o: WhatIfOutcome) -> dict[str, Any]:
    """A what-if's outcome as the REST answer shows it."""
    return {
        "id": o.id,
        "title": o.title,
        "lever": o.lever,
        "owner": o.owner,
        "ranked": o.ranked,
        "ett_pct_before": o.ett_pct_before,
        "ett_pct_after": o.ett_pct_after,
        "ett_pct_delta": o.ett_pct_after - o.ett_pct_before,
        "gpu_h_per_day_freed": o.gpu_h_per_day_freed,
        "tts_saving_s": o.tts_saving_s,
        "cascade_saving_s": o.cascade_saving_s,
        "change": change_dict(o.change),
    }


class _Plan:
    """Fits of every model of a window, the fleet's p25 and the owners, computed once."""

    def __init__(
        self,
        db_session: Session,
        settings: Settings | None,
        start: float | None,
        end: float | None,
        half_life_days: float | None,
    ) -> None:
        self.start, self.end = _window(start, end)
        self.half_life_days = half_life_days
        obs = load_observations(db_session=db_session, start=self.start, end=self.end)
        self.fits = _fits(obs, self.start, self.end, half_life_days)
        self.inputs = {m: f.inputs for m, f in self.fits.items() if f.inputs is not None}
        self.p25 = fleet_p25(self.inputs)
        res = resolver(db_session=db_session, settings=settings)
        self.owner_of = res.owner
        self.owners = dict(db_session.execute(select(Model.name, Model.owner)).all())

    def outcomes(self, model: str, staging_fraction: float) -> list[WhatIfOutcome]:
        inputs = self.inputs[model]
        items = standard_what_ifs(inputs, self.p25, staging_fraction=staging_fraction)
        return [evaluate(inputs, item, self.owner_of) for item in items]


def model_plan(
    *,
    db_session: Session,
    settings: Settings | None,
    model: str,
    start: float | None = None,
    end: float | None = None,
    half_life_days: float | None = None,
    staging_fraction: float = DEFAULT_STAGING_FRACTION,
) -> dict[str, Any]:
    """One model's fit, prediction and standard what-ifs (LookupError for an unknown model)."""
    if db_session.get(Model, model) is None:
        raise LookupError(f"unknown model {model!r}")
    plan = _Plan(db_session, settings, start, end, half_life_days)
    fit = plan.fits.get(model)
    out: dict[str, Any] = {
        "model": model,
        "owner": plan.owners.get(model),
        "fit": fit_dict(fit, plan.start, plan.end)
        if fit
        else fit_dict(fit_inputs([], end=plan.end, window_days=1.0), plan.start, plan.end),
        "inputs": None,
        "prediction": None,
        "what_ifs": [],
    }
    if fit is None or fit.inputs is None:
        return out
    out["inputs"] = inputs_dict(fit.inputs, fit)
    out["prediction"] = prediction_dict(predict(fit.inputs), fit.measured_ett_pct)
    out["what_ifs"] = [outcome_dict(o) for o in plan.outcomes(model, staging_fraction)]
    return out


def fleet_plan(
    *,
    db_session: Session,
    settings: Settings | None,
    start: float | None = None,
    end: float | None = None,
    half_life_days: float | None = None,
    top: int = 20,
    staging_fraction: float = DEFAULT_STAGING_FRACTION,
) -> dict[str, Any]:
    """The fleet's opportunities ranked by GPU-hours a day freed, with owners and models."""
    plan = _Plan(db_session, settings, start, end, half_life_days)
    outcomes = {m: plan.outcomes(m, staging_fraction) for m in plan.inputs}
    ranked = rank(outcomes)
    predictions = {m: predict(i) for m, i in plan.inputs.items()}
    alloc = sum(p.allocated_gpu_h_per_day for p in predictions.values())
    eff = sum(
        metrics.gpu_h(p.jobs_per_day * metrics.gpu_s(p.effective_s, p.gpus))
        for p in predictions.values()
    )
    models = []
    for m, fit in plan.fits.items():
        p = predictions.get(m)
        models.append(
            {
                "model": m,
                "owner": plan.owners.get(m),
                "jobs": fit.jobs,
                "failures": fit.failures,
                "predicted_ett_pct": p.ett_pct if p else None,
                "measured_ett_pct": fit.measured_ett_pct,
                "lost_gpu_h_per_day": p.lost_gpu_h_per_day if p else None,
                "warnings": list(fit.warnings),
            }
        )
    models.sort(key=lambda r: -(r["lost_gpu_h_per_day"] or 0.0))
    return {
        "start": plan.start,
        "end": plan.end,
        "half_life_days": half_life_days,
        "models": models,
        "predicted_ett_pct": metrics.pct(eff, alloc),
        "lost_gpu_h_per_day": alloc - eff,
        "opportunities": [
            {
                "rank": i + 1,
                "id": o.id,
                "title": o.title,
                "lever": o.lever,
                "owner": o.owner,
                "gpu_h_per_day_freed": o.gpu_h_per_day_freed,
                "models": [{"model": m, "gpu_h_per_day_freed": g} for m, g in o.models],
            }
            for i, o in enumerate(ranked[:top])
        ],
    }


def custom_what_if(
    *,
    db_session: Session,
    settings: Settings | None,
    model: str | None,
    change: dict[str, Any],
    start: float | None = None,
    end: float | None = None,
    half_life_days: float | None = None,
) -> dict[str, Any]:
    """A custom change on one model (or, without a model, on every model of the fleet).

    `change` is the validated request body's change: scale, cut_pct, to_fleet_p25, interval_s,
    optimal_interval, csbt_s, async_checkpointing + staging_fraction, final_shutdown_s,
    failure_scale, gpus.
    """
    if model is not None and db_session.get(Model, model) is None:
        raise LookupError(f"unknown model {model!r}")
    plan = _Plan(db_session, settings, start, end, half_life_days)
    targets = [model] if model is not None else sorted(plan.inputs)
    if model is not None and model not in plan.inputs:
        raise LookupError(
            f"model {model!r} has no finished job in the window: widen start/end to fit it"
        )
    per_model = []
    total = 0.0
    for m in targets:
        inputs = plan.inputs[m]
        ch = build_change(inputs, change, plan.p25)
        item = WhatIf("custom", "custom change", _main_lever(change), ch)
        o = evaluate(inputs, item, plan.owner_of)
        fit = plan.fits[m]
        per_model.append(
            {
                "model": m,
                "fit": fit_dict(fit, plan.start, plan.end),
                "inputs": inputs_dict(inputs, fit),
                "measured_ett_pct": fit.measured_ett_pct,
                **outcome_dict(o),
            }
        )
        total += o.gpu_h_per_day_freed
    return {
        "start": plan.start,
        "end": plan.end,
        "change": change,
        "owner": owner_of_lever(_main_lever(change), plan.owner_of),
        "gpu_h_per_day_freed": total,
        "models": per_model,
    }


def _main_lever(change: dict[str, Any]) -> str:
    for key in ("scale", "cut_pct"):
        if change.get(key):
            return next(iter(change[key]))
    if change.get("to_fleet_p25"):
        return change["to_fleet_p25"][0]
    if change.get("interval_s") or change.get("optimal_interval") or change.get("csbt_s"):
        return "checkpoint"
    if change.get("async_checkpointing"):
        return "checkpoint"
    if change.get("failure_scale"):
        kind = next(iter(change["failure_scale"]))
        return "failures" if kind == "*" else kind
    if change.get("gpus"):
        return "gpus"
    return "custom"


def build_change(
    inputs: ModelInputs, body: dict[str, Any], p25: dict[str, tuple[float, float]]
) -> Change:
    """A Change for one model from a what-if request (cut percentages, p25, tau*, async ...)."""
    scale = dict(body.get("scale") or {})
    for lever, pct in (body.get("cut_pct") or {}).items():
        scale[lever] = scale.get(lever, 1.0) * (1.0 - pct / 100.0)
    set_cold: dict[str, float] = {}
    set_rec: dict[str, float] = {}
    shutdown = body.get("final_shutdown_s")
    for lever in body.get("to_fleet_p25") or []:
        c = to_p25_change(inputs, lever, p25[lever])
        if c is None:
            continue
        set_cold.update(c.set_cold_s)
        set_rec.update(c.set_recovery_s)
        if c.final_shutdown_s is not None:
            shutdown = c.final_shutdown_s if shutdown is None else min(shutdown, c.final_shutdown_s)
    interval = body.get("interval_s")
    if body.get("optimal_interval"):
        interval = optimal_interval_s(inputs) or interval
    csbt_scale = None
    if body.get("async_checkpointing"):
        csbt_scale = body.get("staging_fraction") or DEFAULT_STAGING_FRACTION
    return Change(
        scale=scale,
        set_cold_s=set_cold,
        set_recovery_s=set_rec,
        interval_s=interval,
        csbt_s=body.get("csbt_s"),
        csbt_scale=csbt_scale,
        final_shutdown_s=shutdown,
        failure_scale=dict(body.get("failure_scale") or {}),
        gpus=body.get("gpus"),
    )
