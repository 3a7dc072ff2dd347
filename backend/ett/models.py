"""Per-job derived results: one row per job plus its attributed intervals."""

from __future__ import annotations

from typing import Any

from sqlalchemy import BigInteger, Boolean, Float, ForeignKey, Index, Integer, String, Text
from sqlalchemy.orm import Mapped, mapped_column

from backend.db import Base, JSONType
from backend.types import BigIntPK


class JobResult(Base):
    """The ETT engine's answer for one job, rebuilt from raw events on every recompute."""

    __tablename__ = "job_results"

    job_id: Mapped[str] = mapped_column(
        String(128), ForeignKey("jobs.job_id", ondelete="CASCADE"), primary_key=True
    )
    computed_at: Mapped[float] = mapped_column(Float)
    model: Mapped[str | None] = mapped_column(String(256))
    gpus: Mapped[int] = mapped_column(Integer, default=1)
    status: Mapped[str] = mapped_column(String(16))
    provisional: Mapped[bool] = mapped_column(Boolean, default=False)
    submitted_at: Mapped[float | None] = mapped_column(Float)
    ended_at: Mapped[float | None] = mapped_column(Float)
    e2e_s: Mapped[float] = mapped_column(Float, default=0.0)
    effective_s: Mapped[float] = mapped_column(Float, default=0.0)
    ett_pct: Mapped[float] = mapped_column(Float, default=0.0)
    gpu_hours_lost: Mapped[float] = mapped_column(Float, default=0.0)
    # Wall and effective GPU-seconds, each second at its attempt's GPUs (NULL: stored before).
    e2e_gpu_s: Mapped[float | None] = mapped_column(Float)
    effective_gpu_s: Mapped[float | None] = mapped_column(Float)
    nof: Mapped[int] = mapped_column(Integer, default=0)
    tts_s: Mapped[float] = mapped_column(Float, default=0.0)
    recovery_s: Mapped[float] = mapped_column(Float, default=0.0)
    result: Mapped[dict[str, Any]] = mapped_column(JSONType)

    __table_args__ = (
        Index("ix_job_results_model_submitted", "model", "submitted_at"),
        Index("ix_job_results_submitted_at", "submitted_at"),
        # The job list's prefix search (LIKE 'x%'): Postgres needs the pattern operator class.
        Index(
            "ix_job_results_job_id_prefix",
            "job_id",
            postgresql_ops={"job_id": "varchar_pattern_ops"},
        ),
        Index(
            "ix_job_results_model_prefix", "model", postgresql_ops={"model": "varchar_pattern_ops"}
        ),
        Index("ix_job_results_ett_pct", "ett_pct"),
        Index("ix_job_results_gpu_hours_lost", "gpu_hours_lost"),
    )


class JobInterval(Base):
    """One attributed interval of a job's wall time (component, phase, attempt)."""

    __tablename__ = "job_intervals"

    id: Mapped[int] = mapped_column(BigIntPK, primary_key=True, autoincrement=True)
    job_id: Mapped[str] = mapped_column(String(128), ForeignKey("jobs.job_id", ondelete="CASCADE"))
    attempt: Mapped[int | None] = mapped_column(Integer)
    start: Mapped[float] = mapped_column(Float)
    end: Mapped[float] = mapped_column(Float)
    component: Mapped[str] = mapped_column(String(32))
    phase: Mapped[str | None] = mapped_column(String(128))
    # GPUs its seconds are charged at (its attempt's); NULL in rows from before: the job's.
    gpus: Mapped[int | None] = mapped_column(Integer)

    __table_args__ = (
        Index("ix_job_intervals_job_id", "job_id"),
        Index("ix_job_intervals_start", "start"),
    )


class JobAccountingState(Base):
    """An open job's settled accounting prefix (backend.ett.incremental), extended per batch.

    Only a cache of the full recompute: a job without a row, or whose row does not match its
    raw events (`last_event_row`, `event_rows`) or the rules (`rules`), is recomputed in full.
    """

    __tablename__ = "job_accounting_states"

    job_id: Mapped[str] = mapped_column(
        String(128), ForeignKey("jobs.job_id", ondelete="CASCADE"), primary_key=True
    )
    # The largest raw_events.id read, and how many of the job's raw rows were read.
    last_event_row: Mapped[int] = mapped_column(BigInteger)
    event_rows: Mapped[int] = mapped_column(Integer)
    # What else the answer depends on: engine state version, timeouts, custom phase mapping.
    rules: Mapped[str] = mapped_column(String(64))
    # The settled point (epoch seconds): no event after it can change the accounting before it.
    settled_at: Mapped[float] = mapped_column(Float)
    computed_at: Mapped[float] = mapped_column(Float)
    # backend.ett.incremental's state as JSON text (exact floats, no JSONB numeric round trip).
    state: Mapped[str] = mapped_column(Text)
