"""Learned bounds: the samples finished jobs gave, which jobs were read, and the bounds in force."""

from __future__ import annotations

from sqlalchemy import Float, ForeignKey, Index, Integer, String
from sqlalchemy.orm import Mapped, mapped_column

from backend.db import Base
from backend.types import BigIntPK


class BoundSample(Base):
    """One duration a finished job observed for a key: a span, a hardware set-up, a loop gap."""

    __tablename__ = "live_bound_samples"

    id: Mapped[int] = mapped_column(BigIntPK, primary_key=True, autoincrement=True)
    job_id: Mapped[str] = mapped_column(String(128), ForeignKey("jobs.job_id", ondelete="CASCADE"))
    model: Mapped[str] = mapped_column(String(256))  # "" when the job names no model
    phase: Mapped[str] = mapped_column(String(128))
    variant: Mapped[str] = mapped_column(String(8))  # "", "cold" or "warm"
    attempt: Mapped[int] = mapped_column(Integer)
    value_s: Mapped[float] = mapped_column(Float)
    at: Mapped[float] = mapped_column(Float)

    __table_args__ = (
        Index("ix_live_bound_samples_job_id", "job_id"),
        Index("ix_live_bound_samples_model_key_at", "model", "phase", "variant", "at"),
        Index("ix_live_bound_samples_key_at", "phase", "variant", "at"),
    )


class SampledJob(Base):
    """A finished job whose stored result (as of `computed_at`) has given its samples."""

    __tablename__ = "live_sampled_jobs"

    job_id: Mapped[str] = mapped_column(
        String(128), ForeignKey("jobs.job_id", ondelete="CASCADE"), primary_key=True
    )
    computed_at: Mapped[float] = mapped_column(Float)


class LearnedBound(Base):
    """A bound learned for a (model, phase, variant), or for the fleet (scope "")."""

    __tablename__ = "live_bounds"

    scope: Mapped[str] = mapped_column(String(256), primary_key=True)
    phase: Mapped[str] = mapped_column(String(128), primary_key=True)
    variant: Mapped[str] = mapped_column(String(8), primary_key=True)
    bound_s: Mapped[float] = mapped_column(Float)
    quantile_s: Mapped[float] = mapped_column(Float)
    samples: Mapped[int] = mapped_column(Integer)
    computed_at: Mapped[float] = mapped_column(Float)
