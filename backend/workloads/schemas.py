"""Response models of the model routes: GET /models and /models/{model} (docs/API.md)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

from backend.metrics.schemas import OwnerLost, SeriesPoint


class ModelRow(BaseModel):
    """One model in the list, over the range."""

    model: str
    team: str | None = Field(None, description="the team that owns the model")
    owner: str | None = Field(None, description="deprecated: the same as team", deprecated=True)
    tier: str | None
    jobs: int = Field(description="jobs of the model submitted in the range")
    ett_pct: float | None
    previous_ett_pct: float | None = Field(description="ETT% over the same length just before")
    trend_pp: float | None = Field(
        description="ett_pct - previous_ett_pct, percentage points; null when the range before "
        "is too small a base (trend_reason)"
    )
    trend_reason: str | None = Field(
        None, description="why trend_pp is null (too few jobs or GPU-hours before); null if given"
    )
    previous_jobs: int | None = Field(
        None, description="jobs with GPU-time in the range before (the trend's base)"
    )
    wall_gpu_h: float
    lost_gpu_h: float
    top_lost_component: str | None


class ModelList(BaseModel):
    """GET /models."""

    start: str
    end: str
    total: int = Field(description="models that matched, over every page")
    models: list[ModelRow]


class ModelJob(BaseModel):
    """One of a model's latest jobs."""

    job_id: str
    status: str
    provisional: bool
    gpus: int | None
    submitted_at: str | None
    ended_at: str | None
    e2e_s: float
    ett_pct: float | None
    tts_s: float | None
    nof: int
    recovery_s: float | None
    gpu_hours_lost: float | None = Field(description="GPU-hours lost (deprecated name)")


class ModelPage(BaseModel):
    """GET /models/{model}."""

    model: str
    team: str | None = Field(None, description="the team that owns the model")
    owner: str | None = Field(None, description="deprecated: the same as team", deprecated=True)
    tier: str | None
    labels: dict[str, Any]
    start: str
    end: str
    ett_pct: float | None
    previous_ett_pct: float | None
    trend_pp: float | None = Field(description="null on too small a base (trend_reason)")
    trend_reason: str | None = Field(None, description="why trend_pp is null")
    previous_jobs: int | None = Field(None, description="jobs with GPU-time in the range before")
    wall_gpu_h: float
    lost_gpu_h: float
    top_lost_component: str | None
    components_gpu_h: dict[str, float]
    lost_by_owner: list[OwnerLost] = Field(description="lost GPU-hours by component owner")
    nof_by_kind: dict[str, int]
    series: list[SeriesPoint]
    job_count: int
    jobs: list[ModelJob]
