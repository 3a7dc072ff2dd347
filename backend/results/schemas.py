"""Response models of the job routes: GET /jobs/{job_id}/ett (docs/API.md)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

from backend.ett.catalogue import COMPONENTS_HELP


class JobEtt(BaseModel):
    """GET /jobs/{job_id}/ett: one job's accounting (seconds, GPU-hours, percentages)."""

    job_id: str
    model: str | None
    gpus: int | None
    labels: dict[str, Any]
    status: str | None
    provisional: bool
    abandoned: bool
    events: int | None = Field(
        None,
        description="distinct raw events this result was computed from (absent in results "
        "stored before it was recorded)",
    )
    live_tail_start: str | None
    submitted_at: str | None
    ended_at: str | None
    e2e_s: float
    effective_s: float
    ett_pct: float | None
    gpu_hours_lost: float | None = Field(description="GPU-hours lost")
    components: dict[str, float] = Field(description=f"seconds {COMPONENTS_HELP}")
    wasted: dict[str, float] = Field(description="seconds of wasted training: replay, ...")
    l1: dict[str, Any] = Field(description="Level-1 metrics: tts_s, ttr_s, failures, nof, ...")
    phases: dict[str, dict[str, float]] = Field(description="per phase: total_s, exposed_s")
    attempts: list[dict[str, Any]]
    warnings: list[Any]
    intervals: list[dict[str, Any]] = Field(
        description="attributed intervals: start, end, attempt, component, phase"
    )
    quarantine: dict[str, Any] | None
