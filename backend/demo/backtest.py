"""Back-tests of the planner on simulated fleets: fit a window, predict the next; what-ifs; pure."""

from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

from backend.demo.fleet import FleetSpec, plans
from backend.demo.simulator import cut_at, job_events
from backend.ett.engine import compute_job
from backend.planner.fit import (
    DAY_S,
    DEFAULT_HALF_LIFE_DAYS,
    JobObservation,
    fit_inputs,
    observe_job,
)
from backend.planner.fit import measured_ett_pct as measured_pct
from backend.planner.model import COLD_PARTS, RECOVERY_PARTS, Change, predict, what_if


@dataclass(frozen=True)
class ModelError:
    """One model's predicted against measured ETT% in the test window."""

    model: str
    fit_jobs: int
    test_jobs: int
    predicted_pct: float
    measured_pct: float

    @property
    def abs_error_pp(self) -> float:
        """|predicted - measured| in ETT% points."""
        return abs(self.predicted_pct - self.measured_pct)


@dataclass(frozen=True)
class BacktestReport:
    """Per-model errors and their mean and worst."""

    models: list[ModelError]

    @property
    def mae_pp(self) -> float:
        """Mean absolute error over models (points)."""
        return statistics.fmean(m.abs_error_pp for m in self.models) if self.models else 0.0

    @property
    def worst(self) -> ModelError | None:
        """The model with the largest absolute error."""
        return max(self.models, key=lambda m: m.abs_error_pp, default=None)


def split_backtest(
    jobs: Sequence[JobObservation],
    *,
    start: float,
    split: float,
    end: float,
    half_life_days: float | None = DEFAULT_HALF_LIFE_DAYS,
    min_fit_jobs: int = 3,
    min_test_jobs: int = 3,
    exclude: Sequence[tuple[float, float]] = (),
    estimator: str = "level",
) -> BacktestReport:
    """Fit each model on jobs submitted in [start, split), predict ETT% of those in [split, end).

    Jobs submitted inside an `exclude` range (a known incident) are left out of the fit.
    """
    by_model: dict[str, list[JobObservation]] = defaultdict(list)
    for j in jobs:
        if j.model:
            by_model[j.model].append(j)
    out = []
    for model, items in sorted(by_model.items()):
        fit_jobs = [
            j
            for j in items
            if start <= j.submitted_at < split
            and not any(lo <= j.submitted_at < hi for lo, hi in exclude)
        ]
        test_jobs = [j for j in items if split <= j.submitted_at < end]
        if len(fit_jobs) < min_fit_jobs or len(test_jobs) < min_test_jobs:
            continue
        fit = fit_inputs(
            fit_jobs,
            end=split,
            window_days=(split - start) / DAY_S,
            half_life_days=half_life_days,
            estimator=estimator,
        )
        measured = measured_pct(test_jobs)
        if fit.inputs is None or measured is None:
            continue
        out.append(
            ModelError(
                model=model,
                fit_jobs=len(fit_jobs),
                test_jobs=len(test_jobs),
                predicted_pct=predict(fit.inputs).ett_pct,
                measured_pct=measured,
            )
        )
    return BacktestReport(out)


@dataclass(frozen=True)
class PairResult:
    """A baseline job's fit changed by what its optimized twin measured, against the twin."""

    pair: str
    baseline_pct: float
    predicted_pct: float
    optimized_pct: float

    @property
    def abs_error_pp(self) -> float:
        """|predicted - measured optimized| in points."""
        return abs(self.predicted_pct - self.optimized_pct)


def pair_change(baseline: JobObservation, optimized: JobObservation) -> Change:
    """The optimized job's changes as a what-if on the baseline: its measured start-up, recovery,
    checkpoint blocking, stalls and shutdown (failure count and interval stay: the pair holds them)."""
    opt = fit_inputs(
        [optimized],
        end=optimized.submitted_at,
        window_days=1.0,
        half_life_days=None,
        estimator="mean",
    )
    assert opt.inputs is not None
    o = opt.inputs
    return Change(
        set_cold_s={p: o.cold_start_s.get(p, 0.0) for p in COLD_PARTS},
        set_recovery_s={p: o.recovery_s.get(p, 0.0) for p in RECOVERY_PARTS},
        csbt_s=o.csbt_s,
        final_shutdown_s=o.final_shutdown_s,
    )


def pair_backtest(
    pairs: Sequence[tuple[str, JobObservation, JobObservation]], *, replay: str = "measured"
) -> list[PairResult]:
    """For each (name, baseline, optimized): the what-if from the baseline's fit and the twin's
    changes. The pair's failures are induced at chosen positions, so the replay defaults to the
    baseline's measured one (`replay="utt"` predicts it as tau / 2 instead)."""
    out = []
    for name, base, opt in pairs:
        fit = fit_inputs(
            [base],
            end=base.submitted_at,
            window_days=1.0,
            half_life_days=None,
            replay=replay,
            estimator="mean",
        )
        assert fit.inputs is not None
        result = what_if(fit.inputs, pair_change(base, opt))
        out.append(
            PairResult(
                pair=name,
                baseline_pct=base.ett_pct,
                predicted_pct=result.after.ett_pct,
                optimized_pct=opt.ett_pct,
            )
        )
    return out


def demo_observations(spec: FleetSpec) -> list[JobObservation]:
    """Every finished job of a demo fleet through the ETT engine, as planner observations."""
    out = []
    for plan in plans(spec):
        if plan.submitted_at > spec.now:
            continue
        result = compute_job(cut_at(job_events(plan), spec.now), now=spec.now)
        if result.provisional:
            continue
        d = result.to_dict(with_intervals=True)
        rows = [
            (i["start"], i["end"], i["attempt"], i["component"], i["phase"]) for i in d["intervals"]
        ]
        out.append(observe_job(d, rows, {"checkpoint_interval_s": plan.ckpt_interval_s}))
    return out


def demo_pairs(jobs: Sequence[JobObservation]) -> list[tuple[str, JobObservation, JobObservation]]:
    """The demo's benchmark pairs: (model, baseline, optimized) for every model with both."""
    by_id = {j.job_id: j for j in jobs}
    out = []
    for j in jobs:
        if j.job_id.endswith("-baseline") and j.model:
            twin = by_id.get(j.job_id.removesuffix("-baseline") + "-optimized")
            if twin is not None:
                out.append((j.model, j, twin))
    return sorted(out, key=lambda p: p[0])
