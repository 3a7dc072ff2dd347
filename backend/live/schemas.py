"""Response models of the live REST answers (GET /api/v1/live, /live/jobs/{id}, /live/bounds)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field


class DetectionOut(BaseModel):
    """One bad condition of a job that holds now."""

    kind: str = Field(description="hung, silent, crash_looping or restart_storm")
    state: str = Field(description="e.g. hung:trainer_init.process_group, hung:loop")
    since: str | None = Field(description="when it began: the instant its bound was crossed")
    overrun_s: float = Field(description="seconds since then")
    owner: str | None = Field(description="the team it pages")
    phase: str | None = None
    component: str | None = None
    attempt: int | None = None
    bound_s: float | None = None
    bound_source: str | None = Field(
        None, description="model, fleet, override, default or heartbeat_timeout"
    )
    bound_samples: int = Field(0, description="samples the learned bound came from")
    started_at: str | None = Field(
        None, description="when what is judged began: the span's start, the last cursor advance"
    )
    lost_gpu_h: float = Field(description="GPU-hours lost to it so far")
    lost_gpu_h_per_h: float = Field(description="GPU-hours it loses per hour now")
    detail: dict[str, Any] = Field(default_factory=dict)


class LiveJobOut(BaseModel):
    """One open job's live state now."""

    job_id: str | None
    model: str | None
    team: str | None = Field(description="the job's team: its owner label, else its model's team")
    owner: str | None = Field(description="the team its bad state pages (null when it is fine)")
    gpus: int
    state: str = Field(
        description="queued, starting:<component>, training, checkpointing, "
        "hung:<phase>, hung:loop, crash_looping, restart_storm, silent"
    )
    kind: str = Field(description="the state without its detail (hung, starting, ...)")
    bad: bool
    since: str | None
    attempt: int | None
    component: str | None
    phase: str | None
    bound_s: float | None = None
    overrun_s: float | None = None
    gpu_hours_burned: float | None = Field(
        None, description="a bad state's GPU-hours, counted from the last effective instant"
    )
    job_url: str = Field(description="the job page (path)")
    detections: list[DetectionOut]


class RollingOut(BaseModel):
    """GPU-time over one trailing window, open jobs' provisional time included."""

    ett_pct: float | None
    wall_gpu_h: float
    effective_gpu_h: float


class ModelRollingOut(BaseModel):
    """One model's rolling ETT%."""

    model: str
    team: str | None
    windows: dict[str, RollingOut] = Field(description="1h, 6h, 24h")


class LiveFleet(BaseModel):
    """What the fleet is doing now."""

    now: str
    gpus_by_state: dict[str, int]
    jobs_by_state: dict[str, int]
    open_jobs: int
    jobs: list[LiveJobOut] = Field(description="bad ones first, most GPU-hours burned first")
    fleet: dict[str, RollingOut] = Field(description="the fleet's rolling ETT%: 1h, 6h, 24h")
    models: list[ModelRollingOut] = Field(description="most wall GPU-hours over 24h first")


class SampleOut(BaseModel):
    """One sample a learned bound came from."""

    job_id: str
    model: str | None
    attempt: int
    value_s: float
    at: str | None


class BoundOut(BaseModel):
    """The bound in force for one key of a model."""

    phase: str = Field(description="a phase, hardware_setup or loop")
    variant: str = Field(description="cold or warm for pt2_compile, else empty")
    bound_s: float
    source: str = Field(description="model, fleet, override or default")
    samples: int = Field(description="samples the bound was learned from (0 unless learned)")
    quantile_s: float | None = Field(description="the percentile of those samples")
    scope: str = Field(
        description="the model it was learned from ('' for the fleet), or the "
        "phase pattern of the override"
    )
    from_phase: str = Field(
        description="the key whose samples it came from: the phase, an "
        "ancestor phase, or for a warm compile the cold one"
    )
    from_variant: str
    sample_values: list[SampleOut] | None = None


class BoundsAnswer(BaseModel):
    """A model's bounds and the statistic behind them."""

    model: str
    statistic: dict[str, float] = Field(
        description="bound = max(floor_s, factor x percentile) once min_samples samples exist"
    )
    bounds: list[BoundOut]
