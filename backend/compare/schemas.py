"""Response models of the comparison routes: GET /compare and /compare/pairs (docs/API.md)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

from backend.ett.catalogue import COMPONENTS_HELP


class CompareJob(BaseModel):
    """One job of a comparison: its times, ETT% and the Eq. 3 terms in seconds."""

    job_id: str
    model: str | None
    gpus: int | None
    status: str | None
    provisional: bool
    submitted_at: str | None
    ended_at: str | None
    e2e_s: float
    effective_s: float
    ett_pct: float | None
    nof: int
    labels: dict[str, Any]
    checkpoint_interval_s: float | None
    components: dict[str, float] = Field(description=f"seconds {COMPONENTS_HELP}")
    tts_s: float
    recovery_s: float
    checkpoint_s: float
    shutdown_s: float
    lost_s: float
    lost_gpu_h: float = Field(description="GPU-hours lost, each second at its attempt's GPUs")
    attempt_gpus: list[int] = Field(
        description="the GPU counts its attempts ran on (the job's for one that named none)"
    )


class CompareAnswer(BaseModel):
    """GET /compare: baseline minus optimized, per Eq. 3 term (seconds) and its share."""

    model_config = {"protected_namespaces": ()}

    baseline: CompareJob
    optimized: CompareJob
    delta: dict[str, float] = Field(description="baseline - optimized: tts_s, recovery_s, ...")
    attribution: dict[str, float | None] = Field(description="share (0..1) of lost_s per term")
    restart_multiplier: float | None
    cascade: dict[str, float | None] = Field(description="tts_bound_s, recovery_residual_s, shares")
    nof: dict[str, int | None]
    ett_pct: dict[str, float | None] = Field(description="baseline, optimized, delta_pp")
    lost_gpu_h: dict[str, float] = Field(
        description="GPU-hours lost (per-attempt GPUs): baseline, optimized, delta (baseline - "
        "optimized)"
    )
    warnings: list[Any]


class Pair(CompareAnswer):
    """One baseline/optimized pair of a model."""

    model: str | None


class PairsAnswer(BaseModel):
    """GET /compare/pairs."""

    submitted_after: str | None = None
    submitted_before: str | None = None
    pairs: list[Pair]
    total: dict[str, Any] = Field(
        description="summed over the pairs: delta (s), delta_min (minutes), attribution, ..."
    )
    unpaired: list[Any]
    warnings: list[Any]
