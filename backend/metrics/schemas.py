"""Response models shared by the REST views (units in field names: _s, _gpu_h, _pct, _pp).

Times are RFC 3339 UTC strings; `start`/`end` echo the range actually used, [start, end).
Numbers are rounded by unit (backend.params.round_for): _pct and _pp 2 decimals, _gpu_h and
_s 3, shares 4, other floats 6 significant digits.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

COMPONENTS_HELP = "per ETT component (scheduling, hardware_setup, trainer_init, ...)"


class Range(BaseModel):
    """A half-open range [start, end), RFC 3339 UTC."""

    start: str = Field(description="first instant in the range (inclusive)")
    end: str = Field(description="first instant after the range (exclusive)")


class Totals(BaseModel):
    """GPU-time weighted ETT% and GPU-hours of a scope over a range or bucket."""

    ett_pct: float | None = Field(description="effective / wall GPU-time x 100; null: no GPU-time")
    wall_gpu_h: float = Field(description="wall GPU-hours (GPUs x hours)")
    effective_gpu_h: float = Field(description="GPU-hours of effective training")
    lost_gpu_h: float = Field(description="wall minus effective GPU-hours")
    components_gpu_h: dict[str, float] = Field(description=f"GPU-hours {COMPONENTS_HELP}")


class SeriesPoint(Totals):
    """One day or ISO week of a series."""

    bucket: str = Field(description="the bucket's first instant (00:00 UTC; weeks start Monday)")
    partial: bool = Field(
        False, description="the bucket is cut by the range's start or end, or is still going"
    )


class FleetEtt(BaseModel):
    """GET /fleet/ett."""

    bucket: str = Field(description="day or week")
    start: str
    end: str
    series: list[SeriesPoint]
    total: Totals


class LostRow(BaseModel):
    """One group of lost GPU-hours."""

    component: str | None = None
    phase: str | None = None
    owner: str | None = Field(None, description="the team that owns the component or phase")
    system: str | None = None
    gpu_h: float = Field(description="lost GPU-hours")
    share: float | None = Field(description="fraction (0..1) of all lost GPU-hours in the answer")
    components: dict[str, float] = Field(description=f"lost GPU-hours {COMPONENTS_HELP}")


class OwnerLost(BaseModel):
    """Lost GPU-hours of one component owner."""

    owner: str = Field(description="the team that owns the component or phase")
    gpu_h: float
    share: float | None
    components: dict[str, float] = Field(description=f"lost GPU-hours {COMPONENTS_HELP}")


class LostAnswer(BaseModel):
    """GET /fleet/lost."""

    by: str = Field(description="component, phase, owner or system")
    start: str
    end: str
    total_gpu_h: float
    rows: list[LostRow]


class RegressionRow(BaseModel):
    """A model whose ETT% fell between the two ranges."""

    model: str | None
    team: str | None = Field(None, description="the team that owns the model")
    owner: str | None = Field(None, description="deprecated: the same as team", deprecated=True)
    ett_pct_before: float | None
    ett_pct_after: float | None
    delta_pp: float | None = Field(description="after minus before, percentage points")
    driver: str | None = Field(description="the component whose share of wall GPU-time grew most")
    driver_share_pp: float | None
    lost_gpu_h_after: float
    wall_gpu_h_after: float


class Regressions(BaseModel):
    """GET /fleet/regressions."""

    before: Range
    after: Range
    models: list[RegressionRow]


class FailureCounts(BaseModel):
    """Failures, attempts and rates of a scope over a bucket or range."""

    failures: int = Field(description="number of failures (NoF)")
    nof_by_kind: dict[str, int] = Field(description="NoF per failure kind")
    jobs: int
    attempts: int
    attempts_per_job: float | None
    attempts_per_job_excl_preemption: float | None
    nof_per_job_by_kind: dict[str, float] | None
    wall_gpu_h: float
    failures_per_1000_gpu_h: float | None
    failures_per_1000_gpu_h_by_kind: dict[str, float] | None


class FailurePoint(FailureCounts):
    """One day or ISO week of the failure series."""

    bucket: str
    partial: bool = Field(False, description="the bucket is cut by the range or still going")


class FailureSeries(BaseModel):
    """GET /fleet/failures."""

    bucket: str
    start: str
    end: str
    series: list[FailurePoint]
    total: FailureCounts


class ModelFailures(FailureCounts):
    """One model's failures over the range."""

    model: str


class FailuresByModel(BaseModel):
    """GET /fleet/failures/by-model."""

    start: str
    end: str
    models: list[ModelFailures]


class ModelRow(BaseModel):
    """One model in the list, over the range."""

    model: str
    team: str | None = Field(None, description="the team that owns the model")
    owner: str | None = Field(None, description="deprecated: the same as team", deprecated=True)
    tier: str | None
    jobs: int = Field(description="jobs of the model submitted in the range")
    ett_pct: float | None
    previous_ett_pct: float | None = Field(description="ETT% over the same length just before")
    trend_pp: float | None = Field(description="ett_pct - previous_ett_pct, percentage points")
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
    trend_pp: float | None
    wall_gpu_h: float
    lost_gpu_h: float
    top_lost_component: str | None
    components_gpu_h: dict[str, float]
    lost_by_owner: list[OwnerLost] = Field(description="lost GPU-hours by component owner")
    nof_by_kind: dict[str, int]
    series: list[SeriesPoint]
    job_count: int
    jobs: list[ModelJob]


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


class OwnersAnswer(BaseModel):
    """GET/PUT/DELETE /owners: the mapping in force."""

    source: str = Field(description="api, file or default")
    version: int | None
    updated_at: str | None
    updated_by: str | None = None
    file: str | None = None
    components: dict[str, dict[str, Any]] = Field(description="component -> system, owner")
    phases: dict[str, dict[str, Any]] = Field(description="phase -> component, system, owner")
    rows: list[dict[str, Any]] = Field(description="phase, component, system, owner")
    jobs_marked: int | None = Field(
        None, description="jobs marked for recompute because a phase moved between components"
    )


class AlertRead(BaseModel):
    """One alert instance (an SLO, optionally per model) and its state."""

    fingerprint: str
    slo: str
    owner: str = Field(description="the team that owns the SLO's component")
    component: str | None
    model: str | None
    severity: str
    state: str = Field(description="inactive, pending, firing or resolved")
    value: float | None = Field(description="the indicator's last value, in the SLO's unit")
    objective: float
    labels: dict[str, Any] | None
    breach_started_at: str | None
    fired_at: str | None
    resolved_at: str | None
    last_evaluated_at: str | None
    episode: int
    notified: bool | None
    silenced: bool
    jobs: int
    models: list[Any]
    job_drivers: list[Any]
    acknowledged: bool
    acknowledgements: list[dict[str, Any]]


class AckRead(BaseModel):
    """An acknowledgement of an alert's current episode."""

    fingerprint: str
    episode: int
    by: str | None
    comment: str | None
    at: str | None


class SilenceRead(BaseModel):
    """A silence: matchers, when it holds and why."""

    id: int
    matchers: dict[str, str] = Field(description="owner, component, model")
    starts_at: str | None
    ends_at: str | None
    active: bool
    comment: str | None
    created_by: str | None
    created_at: str | None


class ChannelRef(BaseModel):
    """A notification channel as stored."""

    owner: str
    name: str
    kind: str
    enabled: bool


class ChannelRead(BaseModel):
    """A notification channel with its target (admin only: targets can hold secrets)."""

    name: str
    kind: str
    target: str | None
    options: dict[str, Any] | None
    enabled: bool
    source: str | None


class OwnerStatus(BaseModel):
    """GET /owners/{owner}/status: an owner's SLOs, alerts, silences, channels, deliveries."""

    owner: str = Field(description="the team that owns components (SLO owner)")
    status: str
    evaluated_at: str | None
    slos: list[dict[str, Any]]
    alerts: list[dict[str, Any]]
    silences: list[dict[str, Any]]
    channels: list[dict[str, Any]]
    deliveries: list[dict[str, Any]]
    dashboard: str


class TokenRead(BaseModel):
    """A token as listed (never its secret)."""

    id: int
    name: str
    scope: str
    models: list[str] | None
    prefix: str | None
    created_at: str | None
    expires_at: str | None
    last_used_at: str | None
    revoked_at: str | None
    status: str


class TokenCreated(TokenRead):
    """A new token: `token` is the secret, shown this once."""

    token: str
