"""Response models of the advice routes: the critical path and the checkpoint advice."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field


class CriticalPath(BaseModel):
    """GET /jobs/{job_id}/critical-path."""

    job_id: str
    attempts: list[dict[str, Any]] = Field(
        description="per attempt: start, training_start, init_s, path, phases, fast_batch"
    )
    fast_batch: dict[str, Any] = Field(description="saving_s, attempts_with_saving")


class CheckpointAdvice(BaseModel):
    """GET /models/{model}/checkpoint-advice (Eq. 2)."""

    model: str
    submitted_after: str
    submitted_before: str
    start: str = Field(description="deprecated: the same as submitted_after", deprecated=True)
    end: str = Field(description="deprecated: the same as submitted_before", deprecated=True)
    jobs: int
    checkpoints: int
    csbt_s: float | None
    failures: int
    training_h: float | None
    failure_rate_per_h: float | None
    current_interval_s: float | None
    current_interval_source: str | None
    configured_interval_s: float | None
    measured_interval_s: float | None
    optimal_interval_s: float | None
    wtt_pct_current: float | None
    wtt_pct_optimal: float | None
    minutes_per_day_saved: float | None
    gpu_h_per_day_saved: float | None
    utt: dict[str, float | None] | None
    curve: list[dict[str, float | None]] = Field(
        description="interval_s, wtt_pct, utt_pct, blocking_pct"
    )
    notes: list[Any]
