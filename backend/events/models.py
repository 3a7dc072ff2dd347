"""Raw events (the truth, append-only), rejected events (kept with their reason) and held events.

The tables ingest writes and the engine reads; backend.events.store is the code that touches them.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import Float, Index, Integer, String, Text, UniqueConstraint
from sqlalchemy.orm import Mapped, mapped_column

from backend.db import Base, JSONType
from backend.types import BigIntPK


class RawEvent(Base):
    """One accepted wire event, normalised (times as epoch seconds).

    The idempotency key is (job_id, event_id); the unique constraint adds job_month, the UTC
    month (YYYYMM) the job was first seen, a per-job constant and on Postgres the partition key
    (docs/SCALING.md). A row changes only when a conflicting copy with a smaller canonical JSON
    arrives (the displaced copy moves to rejected_events).
    """

    __tablename__ = "raw_events"

    id: Mapped[int] = mapped_column(BigIntPK, primary_key=True, autoincrement=True)
    event_id: Mapped[str] = mapped_column(String(64))
    job_id: Mapped[str] = mapped_column(String(128))
    type: Mapped[str] = mapped_column(String(32))
    attempt: Mapped[int | None] = mapped_column(Integer)
    ts: Mapped[float] = mapped_column(Float)
    received_at: Mapped[float] = mapped_column(Float)
    payload: Mapped[dict[str, Any]] = mapped_column(JSONType)
    job_month: Mapped[int] = mapped_column(Integer)

    __table_args__ = (
        Index("ix_raw_events_job_id_id", "job_id", "id"),
        UniqueConstraint(
            "job_id", "event_id", "job_month", name="uq_raw_events_job_id_event_id_job_month"
        ),
    )


class RejectedEvent(Base):
    """An event ingest refused, with the reason, for an operator to read."""

    __tablename__ = "rejected_events"

    id: Mapped[int] = mapped_column(BigIntPK, primary_key=True, autoincrement=True)
    received_at: Mapped[float] = mapped_column(Float)
    job_id: Mapped[str | None] = mapped_column(String(128))
    event_id: Mapped[str | None] = mapped_column(String(64))
    batch_index: Mapped[int] = mapped_column(Integer)
    error: Mapped[str] = mapped_column(Text)
    raw: Mapped[str] = mapped_column(Text)
    token_name: Mapped[str | None] = mapped_column(String(128))

    __table_args__ = (Index("ix_rejected_events_received_at", "received_at"),)


class HeldEvent(Base):
    """An event a model-scoped token sent for a job whose model no job_submitted has named yet.

    Kept aside, never read by the engine, until the job's job_submitted arrives: then it joins
    the job's raw events if the token may write that model, else it moves to rejected_events
    with the reason (docs/PROTOCOL.md "A job's model").
    """

    __tablename__ = "held_events"

    id: Mapped[int] = mapped_column(BigIntPK, primary_key=True, autoincrement=True)
    job_id: Mapped[str] = mapped_column(String(128))
    event_id: Mapped[str] = mapped_column(String(64))
    received_at: Mapped[float] = mapped_column(Float)
    token_name: Mapped[str | None] = mapped_column(String(128))
    # The models the sending token could write when the event arrived.
    token_models: Mapped[list[str]] = mapped_column(JSONType)
    payload: Mapped[dict[str, Any]] = mapped_column(JSONType)

    __table_args__ = (Index("ix_held_events_job_id", "job_id", "id"),)
