"""Response models of the alert routes: alerts, acknowledgements, silences, channels, status."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field


class AlertRead(BaseModel):
    """One alert instance (an SLO, optionally per model) and its state."""

    fingerprint: str
    slo: str
    owner: str = Field(description="the team that owns the SLO's component")
    component: str | None
    model: str | None
    severity: str
    state: str = Field(description="inactive, pending, firing or resolved")
    value: float | None = Field(
        description="the indicator's last value, in the SLO's unit, at the unit's decimals"
    )
    objective: float
    unit: str | None = Field(description="the SLO's unit (null once the SLO is deleted)")
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


class EpisodeRead(BaseModel):
    """One firing-to-resolved cycle of an alert instance."""

    fingerprint: str
    episode: int
    slo: str
    owner: str
    component: str
    model: str | None
    host: str | None = Field(description="the host, for a per-host SLO (lemon_nodes)")
    breach_started_at: str | None = Field(description="when the breach began (pending)")
    fired_at: str
    resolved_at: str | None = Field(description="null while it still fires")
    peak: float | None = Field(description="the worst value while firing, in the SLO's unit")
    objective: float
    silenced: bool = Field(description="a silence was in force when it fired")
    acknowledged_by: list[str]
    notice: str | None = Field(description="the firing notice's delivery status, if one was queued")
    channels: list[str] = Field(description="the channels the firing notice reached")
    notified: str = Field(description="the channels notified, in words")


class EpisodeList(BaseModel):
    """Alert episodes, newest first."""

    items: list[EpisodeRead]
    total: int


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
