"""Alert tables: SLOs, owners' channels, alert states, silences, acks, the outbox and its log."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator
from sqlalchemy import (
    Boolean,
    Float,
    ForeignKey,
    Index,
    Integer,
    String,
    Text,
    UniqueConstraint,
)
from sqlalchemy.orm import Mapped, mapped_column

from backend.db import Base, JSONType
from backend.text import CleanStr
from backend.types import BigIntPK


class Slo(Base):
    """One SLO, loaded from the SLO file or written through the admin API."""

    __tablename__ = "slos"

    name: Mapped[str] = mapped_column(String(128), primary_key=True)
    owner: Mapped[str] = mapped_column(String(128))
    component: Mapped[str] = mapped_column(String(64))
    indicator: Mapped[str] = mapped_column(String(32))
    objective: Mapped[float] = mapped_column(Float)
    # The whole validated spec (SloSpec.to_doc()); the columns above are for filtering.
    spec: Mapped[dict[str, Any]] = mapped_column(JSONType)
    enabled: Mapped[bool] = mapped_column(Boolean, default=True)
    source: Mapped[str] = mapped_column(String(16), default="api")
    created_at: Mapped[float] = mapped_column(Float)
    updated_at: Mapped[float] = mapped_column(Float)

    __table_args__ = (Index("ix_slos_owner", "owner"),)


class AlertChannel(Base):
    """One of an owner's notification channels."""

    __tablename__ = "alert_channels"

    id: Mapped[int] = mapped_column(BigIntPK, primary_key=True, autoincrement=True)
    owner: Mapped[str] = mapped_column(String(128))
    name: Mapped[str] = mapped_column(String(64))
    kind: Mapped[str] = mapped_column(String(16))
    target: Mapped[str] = mapped_column(String(2048))
    options: Mapped[dict[str, Any]] = mapped_column(JSONType, default=dict)
    enabled: Mapped[bool] = mapped_column(Boolean, default=True)
    source: Mapped[str] = mapped_column(String(16), default="api")
    created_at: Mapped[float] = mapped_column(Float)

    __table_args__ = (UniqueConstraint("owner", "name", name="uq_alert_channels_owner_name"),)


class AlertState(Base):
    """The state of one alert instance (an SLO, for its whole scope or one model)."""

    __tablename__ = "alert_states"

    fingerprint: Mapped[str] = mapped_column(String(64), primary_key=True)
    slo_name: Mapped[str] = mapped_column(String(128))
    owner: Mapped[str] = mapped_column(String(128))
    component: Mapped[str] = mapped_column(String(64))
    model: Mapped[str | None] = mapped_column(String(256))
    severity: Mapped[str] = mapped_column(String(16))
    labels: Mapped[dict[str, Any]] = mapped_column(JSONType, default=dict)
    # inactive | pending | firing | resolved
    state: Mapped[str] = mapped_column(String(16))
    value: Mapped[float | None] = mapped_column(Float)
    objective: Mapped[float] = mapped_column(Float)
    breach_started_at: Mapped[float | None] = mapped_column(Float)
    fired_at: Mapped[float | None] = mapped_column(Float)
    resolved_at: Mapped[float | None] = mapped_column(Float)
    last_evaluated_at: Mapped[float] = mapped_column(Float)
    # One firing-to-resolved cycle is an episode; notices are unique per (fingerprint, episode, kind).
    episode: Mapped[int] = mapped_column(Integer, default=0)
    # True once this episode's firing notice was queued: only then does a resolved notice follow.
    notified_firing: Mapped[bool] = mapped_column(Boolean, default=False)
    # Optimistic concurrency: every write is UPDATE ... WHERE version = :seen.
    version: Mapped[int] = mapped_column(Integer, default=0)
    details: Mapped[dict[str, Any]] = mapped_column(JSONType, default=dict)

    __table_args__ = (
        Index("ix_alert_states_owner_state", "owner", "state"),
        Index("ix_alert_states_slo_name", "slo_name"),
    )


class Silence(Base):
    """Mutes notices of alerts whose labels match, until it expires."""

    __tablename__ = "alert_silences"

    id: Mapped[int] = mapped_column(BigIntPK, primary_key=True, autoincrement=True)
    owner: Mapped[str | None] = mapped_column(String(128))
    component: Mapped[str | None] = mapped_column(String(64))
    model: Mapped[str | None] = mapped_column(String(256))
    starts_at: Mapped[float] = mapped_column(Float)
    ends_at: Mapped[float] = mapped_column(Float)
    comment: Mapped[str] = mapped_column(Text)
    created_by: Mapped[str] = mapped_column(String(128))
    created_at: Mapped[float] = mapped_column(Float)

    __table_args__ = (Index("ix_alert_silences_ends_at", "ends_at"),)


class Acknowledgement(Base):
    """Someone took an alert's current episode in hand."""

    __tablename__ = "alert_acks"

    id: Mapped[int] = mapped_column(BigIntPK, primary_key=True, autoincrement=True)
    fingerprint: Mapped[str] = mapped_column(
        String(64), ForeignKey("alert_states.fingerprint", ondelete="CASCADE")
    )
    episode: Mapped[int] = mapped_column(Integer)
    acknowledged_by: Mapped[str] = mapped_column(String(128))
    comment: Mapped[str] = mapped_column(Text, default="")
    created_at: Mapped[float] = mapped_column(Float)

    __table_args__ = (Index("ix_alert_acks_fingerprint", "fingerprint"),)


class AlertEpisode(Base):
    """One firing-to-resolved cycle of an alert instance: when it fired and ended, its peak."""

    __tablename__ = "alert_episodes"

    id: Mapped[int] = mapped_column(BigIntPK, primary_key=True, autoincrement=True)
    fingerprint: Mapped[str] = mapped_column(
        String(64), ForeignKey("alert_states.fingerprint", ondelete="CASCADE")
    )
    episode: Mapped[int] = mapped_column(Integer)
    slo_name: Mapped[str] = mapped_column(String(128))
    owner: Mapped[str] = mapped_column(String(128))
    component: Mapped[str] = mapped_column(String(64))
    model: Mapped[str | None] = mapped_column(String(256))
    breach_started_at: Mapped[float | None] = mapped_column(Float)
    fired_at: Mapped[float] = mapped_column(Float)
    resolved_at: Mapped[float | None] = mapped_column(Float)
    # The worst value measured while firing (highest for a ceiling, lowest for a floor).
    peak: Mapped[float | None] = mapped_column(Float)
    objective: Mapped[float] = mapped_column(Float)
    # The silence in force when it fired (its firing notice was then held back), if any.
    silenced_by: Mapped[int | None] = mapped_column(Integer)

    __table_args__ = (
        UniqueConstraint("fingerprint", "episode", name="uq_alert_episodes_episode"),
        Index("ix_alert_episodes_owner_fired_at", "owner", "fired_at"),
    )


class Notification(Base):
    """The outbox: one notice to send, written in the same transaction as the state change."""

    __tablename__ = "alert_notifications"

    id: Mapped[int] = mapped_column(BigIntPK, primary_key=True, autoincrement=True)
    fingerprint: Mapped[str] = mapped_column(String(64))
    episode: Mapped[int] = mapped_column(Integer)
    kind: Mapped[str] = mapped_column(String(16))  # firing | resolved
    owner: Mapped[str] = mapped_column(String(128))
    message: Mapped[dict[str, Any]] = mapped_column(JSONType)
    # pending | sending | retry (a later pass owes some channels) | sent | partial | failed |
    # undeliverable | silenced
    status: Mapped[str] = mapped_column(String(16))
    created_at: Mapped[float] = mapped_column(Float)
    claimed_by: Mapped[str | None] = mapped_column(String(128))
    claimed_at: Mapped[float | None] = mapped_column(Float)
    finished_at: Mapped[float | None] = mapped_column(Float)
    # Passes that re-offered the notice after every in-pass retry of a channel ran out.
    redeliveries: Mapped[int] = mapped_column(Integer, default=0)
    retry_at: Mapped[float | None] = mapped_column(Float)
    # Names of the channels still owed the notice (None: all of the owner's channels), and
    # of those that have it.
    pending_channels: Mapped[list[str] | None] = mapped_column(JSONType)
    delivered_channels: Mapped[list[str] | None] = mapped_column(JSONType)

    __table_args__ = (
        UniqueConstraint("fingerprint", "episode", "kind", name="uq_alert_notifications_notice"),
        Index("ix_alert_notifications_status", "status"),
    )


class Delivery(Base):
    """The delivery log: one row per attempt at one channel."""

    __tablename__ = "alert_deliveries"

    id: Mapped[int] = mapped_column(BigIntPK, primary_key=True, autoincrement=True)
    notification_id: Mapped[int | None] = mapped_column(
        BigIntPK, ForeignKey("alert_notifications.id", ondelete="SET NULL")
    )
    fingerprint: Mapped[str | None] = mapped_column(String(64))
    owner: Mapped[str] = mapped_column(String(128))
    channel: Mapped[str] = mapped_column(String(64))
    kind: Mapped[str] = mapped_column(String(16))
    attempt: Mapped[int] = mapped_column(Integer)
    at: Mapped[float] = mapped_column(Float)
    duration_s: Mapped[float] = mapped_column(Float)
    outcome: Mapped[str] = mapped_column(String(16))
    status_code: Mapped[int | None] = mapped_column(Integer)
    error: Mapped[str | None] = mapped_column(Text)

    __table_args__ = (
        Index("ix_alert_deliveries_at", "at"),
        Index("ix_alert_deliveries_notification_id", "notification_id"),
    )


class EvaluatorLease(Base):
    """Who may evaluate now: one row per lease name, taken by a conditional UPDATE."""

    __tablename__ = "alert_evaluator_lease"

    name: Mapped[str] = mapped_column(String(64), primary_key=True)
    holder: Mapped[str | None] = mapped_column(String(128))
    expires_at: Mapped[float] = mapped_column(Float)
    acquired_at: Mapped[float | None] = mapped_column(Float)


# ---- API shapes --------------------------------------------------------------------------------


# The actor is the admin token's name; a body that names one is refused, not silently ignored.
_ACTOR_FIELDS = {"created_by": "silence", "acknowledged_by": "acknowledgement"}


def _refuse_actor(data: Any) -> Any:
    if isinstance(data, dict):
        for key, what in _ACTOR_FIELDS.items():
            if key in data:
                raise ValueError(
                    f"{key} is not accepted: the {what} is recorded under the name of the admin "
                    "token that sends the request; drop the field"
                )
    return data


class SilenceCreate(BaseModel):
    """POST /api/v1/silences: at least one matcher, an expiry (or a duration), a comment."""

    model_config = ConfigDict(extra="forbid")

    owner: CleanStr | None = Field(default=None, max_length=128)
    component: CleanStr | None = Field(default=None, max_length=64)
    model: CleanStr | None = Field(default=None, max_length=256)
    starts_at: str | float | None = Field(default=None, description="RFC 3339 or epoch seconds")
    ends_at: str | float | None = Field(default=None, description="RFC 3339 or epoch seconds")
    duration: str | float | None = Field(default=None, description="e.g. 2h, instead of ends_at")
    comment: CleanStr = Field(min_length=1, max_length=4096, description="why; required")

    _no_actor = model_validator(mode="before")(_refuse_actor)


class AckCreate(BaseModel):
    """POST /api/v1/alerts/{fingerprint}/ack: an optional comment (the actor is the token)."""

    model_config = ConfigDict(extra="forbid")

    comment: CleanStr = Field(default="", max_length=4096)

    _no_actor = model_validator(mode="before")(_refuse_actor)
