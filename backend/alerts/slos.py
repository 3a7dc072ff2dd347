"""SLOs as data: the spec of one SLO and of an owner's channels, read from YAML or the API."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal, get_args

import yaml
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from backend.alerts.delivery import ChannelKind
from backend.ett import catalogue
from backend.live.overrides import BoundOverride
from backend.text import clean_tree
from backend.timefmt import parse_duration

DEFAULT_SLOS_FILE = Path(__file__).with_name("default_slos.yaml")

Indicator = Literal[
    "gpu_time_share",
    "duration_percentile",
    "failures_per_job",
    "ett_floor",
    "no_progress_s",
    "live_hung",
    "live_crash_loop",
    "live_restart_storm",
    "live_silent",
    "lemon_nodes",
]
# Each indicator's unit: what its objective and its measured values are counted in. Beside the
# indicator list so a new indicator names its unit here (the import below fails otherwise).
Unit = Literal["% of GPU-time", "% ETT", "s", "s past bound", "failures/job", "lemon score"]
INDICATOR_UNITS: dict[str, Unit] = {
    "gpu_time_share": "% of GPU-time",
    "duration_percentile": "s",
    "failures_per_job": "failures/job",
    "ett_floor": "% ETT",
    "no_progress_s": "s",
    "live_hung": "s past bound",
    "live_crash_loop": "s past bound",
    "live_restart_storm": "s past bound",
    "live_silent": "s past bound",
    "lemon_nodes": "lemon score",
}
# The decimals a value in each unit is written with (REST, docs/API.md "Units and rounding").
UNIT_DECIMALS: dict[str, int] = {
    "% of GPU-time": 2,
    "% ETT": 2,
    "s": 3,
    "s past bound": 3,
    "failures/job": 4,
    "lemon score": 3,
}
if set(UNIT_DECIMALS) != set(get_args(Unit)):
    raise ImportError("every unit needs its decimals (UNIT_DECIMALS)")
if set(INDICATOR_UNITS) != set(get_args(Indicator)):
    raise ImportError(
        f"every indicator needs a unit: {sorted(set(get_args(Indicator)) ^ set(INDICATOR_UNITS))}"
    )
# Indicators over the live states of open jobs (backend/live): one alert per job, evaluated by
# the fast live pass (backend/alerts/live.py), not the periodic evaluator.
LIVE_INDICATORS: dict[str, str] = {
    "live_hung": "hung",
    "live_crash_loop": "crash_looping",
    "live_restart_storm": "restart_storm",
    "live_silent": "silent",
}
# Fleet and model indicators: guarded by a minimum volume of jobs and GPU-hours in the window.
VOLUME_INDICATORS = frozenset(
    {"gpu_time_share", "duration_percentile", "failures_per_job", "ett_floor"}
)
# Indicators with one alert instance per host (Evaluation.key, label `host`), measured by the
# periodic evaluator: a host pages once when it becomes a lemon (docs/ALERTS.md).
HOST_INDICATORS = frozenset({"lemon_nodes"})
# The live detectors' own component, for the labels of their alerts when the SLO names none.
ANY_COMPONENT = "any"
Severity = Literal["info", "warning", "critical"]
FAILURE_KINDS = ("any", *catalogue.FAILURE_KINDS)


class SloSpec(BaseModel):
    """One service level: who owns it, what it measures, the objective and how to alert."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    name: str = Field(pattern=r"^[A-Za-z0-9_.:-]{1,128}$")
    owner: str = Field(min_length=1, max_length=128)
    component: str = Field(min_length=1, max_length=64)
    phase: str | None = Field(default=None, max_length=128)
    indicator: Indicator
    percentile: float | None = None
    failure_kind: str | None = None
    objective: float
    window_s: float = Field(default=7 * 86400.0, alias="window", gt=0)
    for_s: float = Field(default=0.0, alias="for", ge=0)
    hysteresis: float = Field(default=0.05, ge=0, lt=1)
    severity: Severity = "warning"
    model: str | None = Field(default=None, max_length=256)
    labels: dict[str, str] = Field(default_factory=dict)
    per_model: bool = False
    runbook_url: str | None = None
    description: str | None = None
    enabled: bool = True
    # Volume guards (fleet and model indicators): below either, the indicator measures nothing,
    # so a one-second smoke job never pages a team.
    min_jobs: int = Field(default=3, ge=0)
    min_gpu_hours: float = Field(default=10.0, ge=0)

    @model_validator(mode="before")
    @classmethod
    def _storable_text(cls, data: Any) -> Any:
        return clean_tree(data, "SLO")

    @model_validator(mode="before")
    @classmethod
    def _derived_unit(cls, data: Any) -> Any:
        # A GET answer PUT back carries `unit`: accepted when it is the indicator's own.
        if isinstance(data, dict) and "unit" in data:
            data = dict(data)
            unit, indicator = data.pop("unit"), data.get("indicator")
            if indicator in INDICATOR_UNITS and unit != INDICATOR_UNITS[indicator]:
                raise ValueError(
                    f"unit follows the indicator: {indicator} is in {INDICATOR_UNITS[indicator]!r}"
                )
        return data

    @field_validator("window_s", "for_s", mode="before")
    @classmethod
    def _duration(cls, v: Any) -> float:
        return parse_duration(v)

    @model_validator(mode="after")
    def _indicator_params(self) -> SloSpec:
        if self.indicator == "duration_percentile":
            if self.percentile is None:
                raise ValueError("duration_percentile needs percentile (50, 90 or 99)")
            if not 0 < self.percentile <= 100:
                raise ValueError("percentile must be in (0, 100]")
        elif self.percentile is not None:
            raise ValueError("percentile only applies to duration_percentile")
        if self.indicator == "failures_per_job":
            self.failure_kind = self.failure_kind or "any"
            if self.failure_kind not in FAILURE_KINDS:
                raise ValueError(f"failure_kind must be one of {', '.join(FAILURE_KINDS)}")
        elif self.failure_kind is not None:
            raise ValueError("failure_kind only applies to failures_per_job")
        if self.indicator == "ett_floor":
            # A floor is a per-model promise: one alert per model that sinks below it.
            self.per_model = True
            if not 0 <= self.objective <= 100:
                raise ValueError("an ETT% floor is a percentage between 0 and 100")
        if self.indicator == "no_progress_s" and self.objective <= 0:
            raise ValueError("no_progress_s is a duration in seconds above 0")
        if self.is_live:
            if self.objective < 0:
                raise ValueError(
                    f"{self.indicator}: the objective is a grace in seconds past the bound, >= 0"
                )
            if self.per_model:
                raise ValueError(f"{self.indicator} alerts are per job; per_model does not apply")
        elif self.component == ANY_COMPONENT:
            raise ValueError("component 'any' is only for the live_* indicators")
        if self.indicator == "gpu_time_share" and not 0 <= self.objective <= 100:
            raise ValueError("a share of wall GPU-time is a percentage between 0 and 100")
        return self

    @property
    def per_host(self) -> bool:
        """True for the per-host indicators (one alert per host: lemon_nodes)."""
        return self.indicator in HOST_INDICATORS

    @property
    def is_live(self) -> bool:
        """True for the live_* indicators (one alert per open job in a bad state)."""
        return self.indicator in LIVE_INDICATORS

    @property
    def unit(self) -> Unit:
        """The unit of the objective and of every measured value (INDICATOR_UNITS)."""
        return INDICATOR_UNITS[self.indicator]

    @property
    def is_floor(self) -> bool:
        """True when breaching means falling below the objective (ETT% floor)."""
        return self.indicator == "ett_floor"

    def breached(self, value: float) -> bool:
        """Whether a measured value breaks the objective."""
        return value < self.objective if self.is_floor else value > self.objective

    def recovered(self, value: float) -> bool:
        """Whether a value is back inside the objective by the hysteresis margin."""
        margin = abs(self.objective) * self.hysteresis
        if self.is_floor:
            return value >= min(100.0, self.objective + margin)
        return value <= self.objective - margin

    def to_doc(self) -> dict[str, Any]:
        """The spec as the file and the API write it (durations in seconds)."""
        return self.model_dump(by_alias=False)


class ChannelSpec(BaseModel):
    """One of an owner's channels in the SLO file or the API."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(pattern=r"^[A-Za-z0-9_.:-]{1,64}$")
    kind: ChannelKind = Field(description="how notices are sent (docs/ALERTS.md, Delivery)")
    target: str = Field(min_length=1, max_length=2048)
    options: dict[str, Any] = Field(default_factory=dict)
    enabled: bool = True

    @model_validator(mode="before")
    @classmethod
    def _storable_text(cls, data: Any) -> Any:
        return clean_tree(data, "channel")


class SloFile(BaseModel):
    """The whole file: SLOs plus, per owner, where to send notices, and bound overrides."""

    model_config = ConfigDict(extra="forbid")

    slos: list[SloSpec] = Field(default_factory=list)
    channels: dict[str, list[ChannelSpec]] = Field(default_factory=dict)
    # Learned bounds overridden by hand (docs/ALERTS.md, "Learned bounds").
    bounds: list[BoundOverride] = Field(default_factory=list)

    @model_validator(mode="after")
    def _unique_names(self) -> SloFile:
        seen: set[str] = set()
        for slo in self.slos:
            if slo.name in seen:
                raise ValueError(f"SLO name {slo.name!r} appears twice")
            seen.add(slo.name)
        return self


def load_slo_file(path: Path | None = None) -> SloFile:
    """Read and validate an SLO file (the shipped defaults when path is None)."""
    path = path or DEFAULT_SLOS_FILE
    doc = yaml.safe_load(Path(path).read_text()) or {}
    return SloFile.model_validate(doc)
