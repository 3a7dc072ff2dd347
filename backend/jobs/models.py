"""Models (workloads), jobs and attempts."""

from __future__ import annotations

from typing import Any

from sqlalchemy import Boolean, Float, ForeignKey, Index, Integer, String, Text
from sqlalchemy.orm import Mapped, mapped_column

from backend.db import Base, JSONType


class Model(Base):
    """A named workload with an owning team."""

    __tablename__ = "models"

    name: Mapped[str] = mapped_column(String(256), primary_key=True)
    owner: Mapped[str | None] = mapped_column(String(128))
    tier: Mapped[str | None] = mapped_column(String(64))
    labels: Mapped[dict[str, Any]] = mapped_column(JSONType, default=dict)
    created_at: Mapped[float] = mapped_column(Float)


class Job(Base):
    """One training run of a model; identity from ingest, the rest derived from raw events."""

    __tablename__ = "jobs"

    job_id: Mapped[str] = mapped_column(String(128), primary_key=True)
    model: Mapped[str | None] = mapped_column(String(256), ForeignKey("models.name"))
    gpus: Mapped[int | None] = mapped_column(Integer)
    labels: Mapped[dict[str, Any]] = mapped_column(JSONType, default=dict)
    config: Mapped[dict[str, Any]] = mapped_column(JSONType, default=dict)
    submitted_at: Mapped[float | None] = mapped_column(Float)
    ended_at: Mapped[float | None] = mapped_column(Float)
    status: Mapped[str | None] = mapped_column(String(16))
    # Set by ingest, cleared by the ETT engine's materialization.
    dirty: Mapped[bool] = mapped_column(Boolean, default=True)
    last_event_at: Mapped[float | None] = mapped_column(Float)
    created_at: Mapped[float] = mapped_column(Float)
    updated_at: Mapped[float] = mapped_column(Float)
    # Set by `ett db prune` when the job's raw events were dropped: its stored result is kept.
    raw_pruned_at: Mapped[float | None] = mapped_column(Float)

    __table_args__ = (
        Index("ix_jobs_model_submitted", "model", "submitted_at"),
        Index("ix_jobs_submitted_at", "submitted_at"),
        Index("ix_jobs_dirty", "dirty"),
    )


class Attempt(Base):
    """One allocation of a job, derived from its raw events."""

    __tablename__ = "attempts"

    job_id: Mapped[str] = mapped_column(
        String(128), ForeignKey("jobs.job_id", ondelete="CASCADE"), primary_key=True
    )
    attempt: Mapped[int] = mapped_column(Integer, primary_key=True)
    started_at: Mapped[float | None] = mapped_column(Float)
    ended_at: Mapped[float | None] = mapped_column(Float)
    reason: Mapped[str | None] = mapped_column(String(16))
    host: Mapped[str | None] = mapped_column(String(256))
    gpus: Mapped[int | None] = mapped_column(Integer)


class JobQuarantine(Base):
    """A job whose computation failed: the error, and when it is tried again (with backoff)."""

    __tablename__ = "job_quarantine"

    job_id: Mapped[str] = mapped_column(
        String(128), ForeignKey("jobs.job_id", ondelete="CASCADE"), primary_key=True
    )
    error: Mapped[str] = mapped_column(Text)
    failures: Mapped[int] = mapped_column(Integer)
    first_failed_at: Mapped[float] = mapped_column(Float)
    last_failed_at: Mapped[float] = mapped_column(Float)
    retry_at: Mapped[float] = mapped_column(Float)

    __table_args__ = (Index("ix_job_quarantine_retry_at", "retry_at"),)
