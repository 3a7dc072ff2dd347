"""Response models of the fleet routes (units in field names: _s, _gpu_h, _pct, _pp).

Times are RFC 3339 UTC strings; `start`/`end` echo the range actually used, [start, end).
Numbers are rounded by unit (backend.params.round_for): _pct and _pp 2 decimals, _gpu_h and
_s 3, shares 4, other floats 6 significant digits. The model routes (backend.workloads) reuse
Range, Totals, SeriesPoint and OwnerLost.
"""

from __future__ import annotations

from pydantic import BaseModel, Field

from backend.ett.catalogue import COMPONENTS_HELP


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
    model: str | None = Field(None, description="by=model or job: the model")
    job_id: str | None = Field(None, description="by=job: the job")
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

    by: str = Field(description="component, phase, owner, system, model or job")
    start: str
    end: str
    total_gpu_h: float = Field(description="lost GPU-hours of every row, past the limit too")
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


class NodeRow(BaseModel):
    """One host over the range: its attempts, failures, exposure, TTR loss and lemon verdict."""

    host: str
    attempts: int = Field(description="attempts that ran on it in the range")
    jobs: int
    exposure_node_days: float = Field(description="its attempts' time on it in the range, days")
    failures: int = Field(description="failures of its attempts in the range, planned included")
    unplanned_failures: int
    failures_by_cause: dict[str, int] = Field(description="failures by cause (else kind)")
    failures_per_node_day: float | None = Field(description="unplanned failures / exposure")
    ttr_lost_gpu_h: float = Field(description="GPU-hours in the TTRs of those failures")
    expected_failures: float | None = Field(
        description="unplanned failures expected at the rest of the fleet's rate (null: untested)"
    )
    p_value: float | None = Field(description="Poisson upper tail P(X >= failures)")
    q_value: float | None = Field(description="Benjamini-Hochberg adjusted over hosts tested")
    lemon_score: float | None = Field(description="-log10(q_value)")
    lemon: bool = Field(description="q_value <= alpha: a lemon node")


class NodesAnswer(BaseModel):
    """GET /fleet/nodes: every host over [start, end), lemons first."""

    start: str
    end: str
    fleet: dict[str, float | int | None]
    test: dict[str, float | int | str]
    nodes: list[NodeRow]


class MttfBucket(BaseModel):
    """One GPU-count bucket: effective training hours per unplanned failure."""

    gpus: str = Field(description="the bucket, e.g. '9-32'")
    jobs: int
    effective_h: float
    unplanned_failures: int
    mttf_h: float | None = Field(description="null: no unplanned failure in the range")


class MttfAnswer(BaseModel):
    """GET /fleet/mttf: MTTF by job size over [start, end)."""

    start: str
    end: str
    buckets: list[MttfBucket]
