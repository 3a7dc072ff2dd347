"""Pydantic shapes of the planner's REST answers and of the what-if request (units in the names)."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from backend.ett.catalogue import FAILURE_KINDS
from backend.planner.model import LEVERS
from backend.planner.whatif import P25_LEVERS

Lever = Literal[LEVERS]  # type: ignore[valid-type]
P25Lever = Literal[P25_LEVERS]  # type: ignore[valid-type]
FailureKind = Literal[(*FAILURE_KINDS, "*")]  # type: ignore[valid-type]
MAX_DAYS_S = 7 * 86400.0


class FitOut(BaseModel):
    """What a fit rests on: its window, jobs, failures and saves, and its warnings."""

    start: datetime
    end: datetime
    jobs: int
    failures: int
    failures_by_kind: dict[str, int]
    checkpoint_saves: int
    effective_jobs: float = Field(description="(sum of weights)^2 / sum of squared weights")
    half_life_days: float | None
    estimator: str = Field(
        description="level: each cost at its current level, a recent rise excluded; "
        "recency: weighted 2^(-age / half_life_days)"
    )
    warnings: list[str]


class InputsOut(BaseModel):
    """The model's fitted inputs (means per job or per failure)."""

    gpus: int
    effective_s: float
    failures_per_job: float
    failure_rate_per_gpu_h: dict[str, float]
    failure_rate_per_training_h: float
    cold_start_s: dict[str, float]
    cold_start_total_s: float
    recovery_s: dict[str, float]
    recovery_total_s: float
    # Failures a job recovers from, F x (1 - q); q, the share it gives up at (ends failed);
    # per give-up, the censored TTR by part.
    recoveries_per_job: float
    give_up_share: float
    give_up_s: dict[str, float]
    csbt_s: float
    interval_s: float
    interval_source: str | None
    optimal_interval_s: float | None
    replay_per_failure_predicted_s: float
    replay_per_failure_measured_s: float | None
    stall_s_per_h: float
    other_in_loop_s_per_h: dict[str, float]
    final_shutdown_s: float
    jobs_per_day: float


class PredictionOut(BaseModel):
    """Expected ETT% and lost time of one job, and GPU-hours a day over the model's jobs."""

    ett_pct: float
    measured_ett_pct: float | None
    e2e_s: float
    effective_s: float
    failures_per_job: float
    lost_s: dict[str, float]
    lost_by_component_s: dict[str, float]
    lost_gpu_h_per_day: float
    lost_gpu_h_per_day_by_component: dict[str, float]
    allocated_gpu_h_per_day: float


class WhatIfOut(BaseModel):
    """One what-if's predicted effect on a model."""

    id: str
    title: str
    lever: str
    owner: str
    ranked: bool
    ett_pct_before: float
    ett_pct_after: float
    ett_pct_delta: float
    gpu_h_per_day_freed: float
    tts_saving_s: float = Field(description="start-up seconds saved once per job (TTS)")
    cascade_saving_s: float = Field(
        description="start-up seconds saved per job with every recovery: (1 + NoF) x TTS (Eq. 3)"
    )
    change: dict[str, object]


class ModelPlanOut(BaseModel):
    """GET /plan/models/{model}: the fit, the prediction and the standard what-ifs."""

    model: str
    owner: str | None
    fit: FitOut
    inputs: InputsOut | None
    prediction: PredictionOut | None
    what_ifs: list[WhatIfOut]


class ContributionOut(BaseModel):
    """A model's share of an opportunity."""

    model: str
    gpu_h_per_day_freed: float


class OpportunityOut(BaseModel):
    """One fleet opportunity: a what-if summed over the models it helps."""

    rank: int
    id: str
    title: str
    lever: str
    owner: str
    gpu_h_per_day_freed: float
    models: list[ContributionOut]


class FleetModelOut(BaseModel):
    """One model's line in the fleet plan."""

    model: str
    owner: str | None
    jobs: int
    failures: int
    predicted_ett_pct: float | None
    measured_ett_pct: float | None
    lost_gpu_h_per_day: float | None
    warnings: list[str]


class FleetPlanOut(BaseModel):
    """GET /plan/fleet: the ranked opportunities and every model's prediction."""

    start: datetime
    end: datetime
    half_life_days: float | None
    predicted_ett_pct: float | None
    lost_gpu_h_per_day: float
    opportunities: list[OpportunityOut]
    models: list[FleetModelOut]


class ChangeIn(BaseModel):
    """A custom change; every field left out keeps the input as measured."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    scale: dict[Lever, float] = Field(
        default_factory=dict,
        description="lever -> factor on its cost (0.2 = cut by 80%), 0 to 10",
    )
    cut_pct: dict[Lever, float] = Field(
        default_factory=dict, description="lever -> percent cut, 0 to 100"
    )
    to_fleet_p25: list[P25Lever] = Field(
        default_factory=list, description="levers brought down to the fleet's 25th percentile"
    )
    # At least a second: a denormal interval made the blocking cost infinite and the answer NaN.
    interval_s: float | None = Field(
        None, ge=1, le=MAX_DAYS_S, description="checkpoint interval, seconds of training (>= 1)"
    )
    optimal_interval: bool = Field(False, description="move the interval to tau*")
    csbt_s: float | None = Field(None, ge=0, le=86400.0)
    async_checkpointing: bool = False
    staging_fraction: float | None = Field(
        None, ge=0, le=1, description="blocking left by async saves (default 0.23, Fig. 4)"
    )
    final_shutdown_s: float | None = Field(None, ge=0, le=MAX_DAYS_S)
    failure_scale: dict[FailureKind, float] = Field(
        default_factory=dict, description="failure kind (or '*') -> factor on its rate, 0 to 100"
    )
    gpus: int | None = Field(None, ge=1, le=1_000_000)

    @model_validator(mode="after")
    def _check(self) -> ChangeIn:
        for name, factor in self.scale.items():
            if not 0 <= factor <= 10:
                raise ValueError(f"scale[{name}] must be between 0 and 10, got {factor}")
        for name, pct in self.cut_pct.items():
            if not 0 <= pct <= 100:
                raise ValueError(f"cut_pct[{name}] must be between 0 and 100, got {pct}")
        for name, factor in self.failure_scale.items():
            if not 0 <= factor <= 100:
                raise ValueError(f"failure_scale[{name}] must be between 0 and 100, got {factor}")
        if self.interval_s is not None and self.optimal_interval:
            raise ValueError("give interval_s or optimal_interval, not both")
        if self.staging_fraction is not None and not self.async_checkpointing:
            raise ValueError("staging_fraction needs async_checkpointing: true")
        if not self.model_dump(exclude_defaults=True):
            raise ValueError(
                "the change is empty: set at least one of scale, cut_pct, to_fleet_p25, "
                "interval_s, optimal_interval, csbt_s, async_checkpointing, final_shutdown_s, "
                "failure_scale, gpus"
            )
        return self


class WhatIfIn(BaseModel):
    """POST /plan/what-if: a change on one model, or on every model when `model` is left out."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    model: str | None = Field(None, min_length=1, max_length=256)
    submitted_after: datetime | None = Field(
        None, description="fit on jobs submitted at or after (default submitted_before - 30 d)"
    )
    submitted_before: datetime | None = Field(
        None, description="fit on jobs submitted before (default the end of today)"
    )
    start: datetime | None = Field(
        None, deprecated=True, description="deprecated alias of submitted_after"
    )
    end: datetime | None = Field(
        None, deprecated=True, description="deprecated alias of submitted_before"
    )
    half_life_days: float | None = Field(
        None, gt=0, le=3650, description="fit recency-weighted with this half-life (default: level)"
    )
    change: ChangeIn


class CustomModelOut(WhatIfOut):
    """A custom what-if on one model, with the inputs it was computed from."""

    model: str
    fit: FitOut
    inputs: InputsOut
    measured_ett_pct: float | None


class CustomWhatIfOut(BaseModel):
    """POST /plan/what-if: per model and summed over the models."""

    start: datetime
    end: datetime
    change: dict[str, object]
    owner: str
    gpu_h_per_day_freed: float
    models: list[CustomModelOut]
