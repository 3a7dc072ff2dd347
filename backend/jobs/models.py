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
    # How many hosts it ran on (its first MAX_HOSTS are in attempt_hosts); NULL before 0017.
    hosts_total: Mapped[int | None] = mapped_column(Integer)


class AttemptHost(Base):
    """One host of one attempt, with what the attempt cost there: the Nodes page's facts.

    Written with the attempt by every recompute (backend.ett.store): the attempt's span on the
    host (its exposure), its GPUs, and the failures that ended it with their TTRs' GPU-seconds.
    """

    __tablename__ = "attempt_hosts"

    job_id: Mapped[str] = mapped_column(
        String(128), ForeignKey("jobs.job_id", ondelete="CASCADE"), primary_key=True
    )
    attempt: Mapped[int] = mapped_column(Integer, primary_key=True)
    host: Mapped[str] = mapped_column(String(256), primary_key=True)
    model: Mapped[str | None] = mapped_column(String(256))
    started_at: Mapped[float] = mapped_column(Float)
    ended_at: Mapped[float] = mapped_column(Float)
    gpus: Mapped[int] = mapped_column(Integer)
    # The attempt's failures (Level 1): how many, the first one's time, kind and cause, and
    # the GPU-seconds of their TTR windows at the attempt's GPUs.
    failures: Mapped[int] = mapped_column(Integer, default=0)
    failure_ts: Mapped[float | None] = mapped_column(Float)
    failure_kind: Mapped[str | None] = mapped_column(String(16))
    failure_cause: Mapped[str | None] = mapped_column(String(64))
    ttr_gpu_s: Mapped[float] = mapped_column(Float, default=0.0)

    __table_args__ = (
        Index("ix_attempt_hosts_host_started", "host", "started_at"),
        Index("ix_attempt_hosts_started_at", "started_at"),
    )


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
