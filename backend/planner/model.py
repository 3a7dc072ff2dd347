"""The expected-ETT% model of one model's jobs (docs/PLANNER.md derives it); pure, no DB, no web.

A job trains W seconds of new data on G GPUs. Failures arrive at a rate per GPU-hour of
effective training, so a job expects F = sum_k lambda_k x G x W / 3600 of them. Its wall time is

    E2E = W + cold start + F (1 - q) x (recovery beyond replay + tau / 2) + F q x give-up
          + (W / tau) x CSBT + W x (stall and other in-loop rates) + final shutdown

where q is the share of failures after which the job gives up (it ends failed: that failure's
TTR is censored, runs to the job's end and holds no restart and no replay, only its teardown
and release, the give-up cost), the cold start and each recovery are split into the components
that own them, the replay
after a failure is the unsaved training time UTT = tau / 2 (Eq. 2), and NoS = W / tau saves each
block CSBT. ETT% = W / E2E x 100. A change to a start-up component acts on the cold start and on
every recovery that repeats it, so a TTS saving counts (1 + F) times (Eq. 3).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from backend.ett.catalogue import LOST_COMPONENTS, STARTUP_COMPONENTS, WASTE_KINDS, resolve_phase

HOUR_S = 3600.0
# Start-up components a cold start is made of (SPEC section 4, Level 2): the catalogue's.
COLD_PARTS: tuple[str, ...] = STARTUP_COMPONENTS
# What a recovery repeats, plus what only a recovery pays: the failed attempt's teardown and the
# checkpoint restore. Replay is modelled separately (UTT).
RECOVERY_PARTS: tuple[str, ...] = ("teardown", *COLD_PARTS, "checkpoint_restore")
# Levers a what-if can cut: each start-up component (cold and recovery together), the recovery-only
# parts, the in-loop stalls and the final shutdown.
LEVERS: tuple[str, ...] = (*COLD_PARTS, "teardown", "checkpoint_restore", "stalled", "shutdown")
# Where each term of lost time lands among the Level-2 components: a component is its own term;
# the recovery-only parts and the waste kinds land where the catalogue puts them.
PART_COMPONENT: dict[str, str] = {
    **{c: c for c in LOST_COMPONENTS},
    "teardown": "scheduling",
    "checkpoint_restore": resolve_phase("checkpoint_restore").component,
    **dict.fromkeys(WASTE_KINDS, "wasted_training"),
}
# Async checkpointing with a bulk staging copy cut blocking by 77% in the paper (Fig. 4).
DEFAULT_STAGING_FRACTION = 0.23


@dataclass(frozen=True)
class ModelInputs:
    """Everything the model needs about one model's typical job (means per job or per failure)."""

    gpus: int
    effective_s: float
    # Failures per GPU-hour of effective training, by kind.
    failure_rate_per_gpu_h: Mapping[str, float]
    cold_start_s: Mapping[str, float]
    # Per failure: teardown, the repeated start-up components and the restore (no replay).
    recovery_s: Mapping[str, float]
    csbt_s: float
    interval_s: float
    final_shutdown_s: float
    stall_s_per_h: float = 0.0
    # In-loop waste that is neither checkpoint blocking nor a stall, by component, per hour.
    other_in_loop_s_per_h: Mapping[str, float] = field(default_factory=dict)
    jobs_per_day: float = 1.0
    # Measured replay per failure; None predicts it as UTT = tau / 2 (failures at random times).
    replay_per_failure_s: float | None = None
    # Share of failures the job gives up at (ends failed, no restart), and per give-up the
    # censored TTR by part (teardown, release): what such a failure costs instead of a recovery.
    give_up_share: float = 0.0
    give_up_s: Mapping[str, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        checks = {
            "gpus": self.gpus,
            "effective_s": self.effective_s,
            "csbt_s": self.csbt_s,
            "interval_s": self.interval_s,
            "final_shutdown_s": self.final_shutdown_s,
            "stall_s_per_h": self.stall_s_per_h,
            "jobs_per_day": self.jobs_per_day,
            **{f"failure_rate_per_gpu_h[{k}]": v for k, v in self.failure_rate_per_gpu_h.items()},
            **{f"cold_start_s[{k}]": v for k, v in self.cold_start_s.items()},
            **{f"recovery_s[{k}]": v for k, v in self.recovery_s.items()},
            **{f"other_in_loop_s_per_h[{k}]": v for k, v in self.other_in_loop_s_per_h.items()},
            "give_up_share": self.give_up_share,
            **{f"give_up_s[{k}]": v for k, v in self.give_up_s.items()},
        }
        for name, value in checks.items():
            if not math.isfinite(value) or value < 0:
                raise ValueError(f"{name} must be a finite number >= 0, got {value!r}")
        if self.gpus < 1:
            raise ValueError(f"gpus must be at least 1, got {self.gpus}")
        if self.interval_s <= 0:
            raise ValueError(f"interval_s must be > 0, got {self.interval_s}")
        if self.give_up_share > 1.0:
            raise ValueError(f"give_up_share must be at most 1, got {self.give_up_share}")

    @property
    def failures_per_job(self) -> float:
        """F = sum_k lambda_k x G x W / 3600: expected failures of one job."""
        return sum(self.failure_rate_per_gpu_h.values()) * self.gpus * self.effective_s / HOUR_S

    @property
    def recoveries_per_job(self) -> float:
        """F x (1 - q): expected failures of one job that are followed by a restart."""
        return self.failures_per_job * (1.0 - self.give_up_share)

    @property
    def give_ups_per_job(self) -> float:
        """F x q: expected failures of one job that end it (no restart)."""
        return self.failures_per_job * self.give_up_share

    @property
    def failure_rate_per_training_s(self) -> float:
        """The job's failure rate per second of effective training (lambda x G)."""
        return sum(self.failure_rate_per_gpu_h.values()) * self.gpus / HOUR_S


@dataclass(frozen=True)
class Prediction:
    """The model's answer: expected wall time, ETT%, lost time by term and component."""

    effective_s: float
    e2e_s: float
    ett_pct: float
    failures_per_job: float
    # Seconds per job by term (cold.<part>, recovery.<part>, replay, checkpoint_blocking, ...).
    lost_s: dict[str, float]
    lost_by_component_s: dict[str, float]
    gpus: int
    jobs_per_day: float

    @property
    def lost_gpu_h_per_day(self) -> float:
        """Expected GPU-hours a day lost: jobs a day x G x (E2E - W) / 3600."""
        return self.jobs_per_day * self.gpus * (self.e2e_s - self.effective_s) / HOUR_S

    @property
    def allocated_gpu_h_per_day(self) -> float:
        """Expected GPU-hours a day the model's jobs hold: jobs a day x G x E2E / 3600."""
        return self.jobs_per_day * self.gpus * self.e2e_s / HOUR_S

    def lost_gpu_h_per_day_by_component(self) -> dict[str, float]:
        """Expected GPU-hours a day lost in each Level-2 component."""
        k = self.jobs_per_day * self.gpus / HOUR_S
        return {c: s * k for c, s in self.lost_by_component_s.items()}


def predict(inputs: ModelInputs) -> Prediction:
    """Expected ETT% and lost time of one job of the model (the formula in the module docstring)."""
    w = inputs.effective_s
    f = inputs.failures_per_job
    r = inputs.recoveries_per_job
    hours = w / HOUR_S
    lost: dict[str, float] = {}
    for part, s in inputs.cold_start_s.items():
        lost[f"cold.{part}"] = s
    for part, s in inputs.recovery_s.items():
        lost[f"recovery.{part}"] = r * s
    lost["replay"] = r * replay_per_failure_s(inputs)
    for part, s in inputs.give_up_s.items():
        lost[f"give_up.{part}"] = inputs.give_ups_per_job * s
    lost["checkpoint_blocking"] = w / inputs.interval_s * inputs.csbt_s
    lost["stalled"] = hours * inputs.stall_s_per_h
    for comp, rate in inputs.other_in_loop_s_per_h.items():
        lost[f"in_loop.{comp}"] = hours * rate
    lost["shutdown"] = inputs.final_shutdown_s
    by_component = dict.fromkeys(LOST_COMPONENTS, 0.0)
    for term, s in lost.items():
        by_component[_component_of(term)] += s
    e2e = w + sum(lost.values())
    return Prediction(
        effective_s=w,
        e2e_s=e2e,
        ett_pct=w / e2e * 100.0 if e2e > 0 else 0.0,
        failures_per_job=f,
        lost_s=lost,
        lost_by_component_s=by_component,
        gpus=inputs.gpus,
        jobs_per_day=inputs.jobs_per_day,
    )


def replay_per_failure_s(inputs: ModelInputs) -> float:
    """Replay per failure: the measured one when given, else UTT = tau / 2 (Eq. 2)."""
    if inputs.replay_per_failure_s is not None:
        return inputs.replay_per_failure_s
    return inputs.interval_s / 2.0


def _component_of(term: str) -> str:
    head, _, part = term.partition(".")
    if head in ("cold", "recovery", "give_up"):
        return PART_COMPONENT.get(part, "unattributed")
    if head == "in_loop":
        return part if part in LOST_COMPONENTS else "unattributed"
    return PART_COMPONENT.get(term, "unattributed")


def optimal_interval_s(inputs: ModelInputs) -> float | None:
    """tau* = sqrt(2 x CSBT / lambda), lambda per second of training of the failures that
    restart (a give-up replays nothing); None without them."""
    rate = inputs.failure_rate_per_training_s * (1.0 - inputs.give_up_share)
    if rate <= 0 or inputs.csbt_s <= 0:
        return None
    return math.sqrt(2.0 * inputs.csbt_s / rate)


def wtt_s(inputs: ModelInputs, interval_s: float | None = None) -> float:
    """Eq. 2 for one job: WTT = UTT + NoS x CSBT = F (1 - q) x tau / 2 + (W / tau) x CSBT."""
    tau = inputs.interval_s if interval_s is None else interval_s
    return inputs.recoveries_per_job * tau / 2.0 + inputs.effective_s / tau * inputs.csbt_s


# --- Changes (what-ifs) ---------------------------------------------------------------------


@dataclass(frozen=True)
class Change:
    """One what-if: every field left at its default leaves that input as measured."""

    # Lever -> factor on its cost (0.2 = cut by 80%); a start-up component's factor acts on the
    # cold start and on every recovery (Eq. 3).
    scale: Mapping[str, float] = field(default_factory=dict)
    # Absolute values instead of factors: a lever's cold-start and per-recovery seconds.
    set_cold_s: Mapping[str, float] = field(default_factory=dict)
    set_recovery_s: Mapping[str, float] = field(default_factory=dict)
    interval_s: float | None = None
    # Checkpoint blocking per save, as a value or as a factor (async: the staging copy's share).
    csbt_s: float | None = None
    csbt_scale: float | None = None
    final_shutdown_s: float | None = None
    # Failure kind (or "*" for every kind) -> factor on its rate.
    failure_scale: Mapping[str, float] = field(default_factory=dict)
    # Run the same GPU-hours of training on this many GPUs (the failure rate is per GPU).
    gpus: int | None = None


def _scaled(values: Mapping[str, float], factors: Mapping[str, float]) -> dict[str, float]:
    return {k: v * factors.get(k, 1.0) for k, v in values.items()}


def apply_change(inputs: ModelInputs, change: Change) -> ModelInputs:
    """The inputs after a change (pure: `inputs` is left as it is)."""
    factors = [*change.scale.items(), *change.failure_scale.items()]
    if change.csbt_scale is not None:
        factors.append(("csbt_scale", change.csbt_scale))
    for name, factor in factors:
        if not math.isfinite(factor) or factor < 0:
            raise ValueError(f"factor for {name!r} must be a finite number >= 0, got {factor!r}")
    unknown = sorted(set(change.scale) - set(LEVERS))
    if unknown:
        raise ValueError(f"unknown lever(s) {unknown}; levers are {list(LEVERS)}")
    cold = _scaled(inputs.cold_start_s, change.scale)
    cold.update({k: v for k, v in change.set_cold_s.items() if k in COLD_PARTS})
    recovery = _scaled(inputs.recovery_s, change.scale)
    give_up = _scaled(inputs.give_up_s, change.scale)
    recovery.update({k: v for k, v in change.set_recovery_s.items() if k in RECOVERY_PARTS})
    every = change.failure_scale.get("*", 1.0)
    rates = {
        k: v * every * change.failure_scale.get(k, 1.0)
        for k, v in inputs.failure_rate_per_gpu_h.items()
    }
    csbt = inputs.csbt_s if change.csbt_s is None else change.csbt_s
    if change.csbt_scale is not None:
        csbt *= change.csbt_scale
    shutdown = (
        inputs.final_shutdown_s if change.final_shutdown_s is None else change.final_shutdown_s
    )
    shutdown *= change.scale.get("shutdown", 1.0)
    gpus, effective = inputs.gpus, inputs.effective_s
    if change.gpus is not None:
        if change.gpus < 1:
            raise ValueError(f"gpus must be at least 1, got {change.gpus}")
        # The same work in GPU-hours (ideal scaling); each GPU keeps its failure rate.
        gpus, effective = change.gpus, inputs.effective_s * inputs.gpus / change.gpus
    interval = inputs.interval_s if change.interval_s is None else change.interval_s
    replay = inputs.replay_per_failure_s
    if replay is not None:
        # A measured replay moves with the interval in proportion (the same share of it is lost).
        replay *= interval / inputs.interval_s
    return replace(
        inputs,
        replay_per_failure_s=replay,
        gpus=gpus,
        effective_s=effective,
        failure_rate_per_gpu_h=rates,
        cold_start_s=cold,
        recovery_s=recovery,
        give_up_s=give_up,
        csbt_s=csbt,
        interval_s=interval,
        final_shutdown_s=shutdown,
        stall_s_per_h=inputs.stall_s_per_h * change.scale.get("stalled", 1.0),
    )


@dataclass(frozen=True)
class WhatIfResult:
    """A change's effect: before and after, and the GPU-hours a day it frees."""

    before: Prediction
    after: Prediction
    # Seconds per job saved on start-up components once (TTS) and with every recovery (cascade).
    tts_saving_s: float
    cascade_saving_s: float

    @property
    def ett_pct_delta(self) -> float:
        """Predicted ETT% after minus before (points)."""
        return self.after.ett_pct - self.before.ett_pct

    @property
    def gpu_h_per_day_freed(self) -> float:
        """GPU-hours a day the same work no longer holds: before minus after allocation."""
        return self.before.allocated_gpu_h_per_day - self.after.allocated_gpu_h_per_day


def what_if(inputs: ModelInputs, change: Change) -> WhatIfResult:
    """Predict the model before and after a change."""
    before = predict(inputs)
    after = predict(apply_change(inputs, change))
    tts = sum(
        before.lost_s.get(f"cold.{p}", 0.0) - after.lost_s.get(f"cold.{p}", 0.0) for p in COLD_PARTS
    )
    repeated = sum(
        before.lost_s.get(f"recovery.{p}", 0.0) - after.lost_s.get(f"recovery.{p}", 0.0)
        for p in COLD_PARTS
    )
    return WhatIfResult(
        before=before, after=after, tts_saving_s=tts, cascade_saving_s=tts + repeated
    )


def training_rate_from_wall_rate(
    wall_rate_per_s: float, restart_s: float, interval_s: float, csbt_s: float
) -> float:
    """A job's failure rate per second of wall time to the planner's per second of training.

    Reliability studies quote rates per wall-clock time (Kokolis et al.: per node-day). With
    ETT = 1 / (1 + lambda_t (R + tau/2) + CSBT/tau) and lambda_wall = lambda_t x ETT:
    lambda_t = lambda_wall (1 + CSBT/tau) / (1 - lambda_wall (R + tau/2)).
    """
    lost = wall_rate_per_s * (restart_s + interval_s / 2.0)
    if lost >= 1.0:
        raise ValueError("failures every (restart + tau/2) or more often: the job never trains")
    return wall_rate_per_s * (1.0 + csbt_s / interval_s) / (1.0 - lost)


def restart_bound_min_per_day(cold_start_min: float, restarts_per_day: float) -> float:
    """Section II-A's upper bound: a job spends at most (1 + F) x C minutes a day restarting."""
    return (1.0 + restarts_per_day) * cold_start_min
