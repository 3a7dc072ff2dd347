"""Fleet tables: each job's GPU-time split by UTC day, the day rollups, failures and job facts.

The per-job tables (`fleet_job_days`, `fleet_failures`, `fleet_jobs`) are what a job contributed
at its last recompute; the rollup (`fleet_day_rollups`) is their sum per day x model x component
x phase, kept current by applying the difference whenever a job is recomputed; `fleet_day_totals`
is the same sum over all models, for the unfiltered fleet views. `metrics_ledger` is what each
finished job contributed to the exported counters (booked by `backend.fleet.ledger`).
"""

from __future__ import annotations

from sqlalchemy import Boolean, Float, ForeignKey, Index, Integer, String
from sqlalchemy.orm import Mapped, mapped_column

from backend.db import Base

NO_PHASE = ""
NO_MODEL = ""


class FleetJobDay(Base):
    """One job's wall and GPU seconds on one UTC day in one (component, phase)."""

    __tablename__ = "fleet_job_days"

    job_id: Mapped[str] = mapped_column(
        String(128), ForeignKey("jobs.job_id", ondelete="CASCADE"), primary_key=True
    )
    day: Mapped[float] = mapped_column(Float, primary_key=True)
    component: Mapped[str] = mapped_column(String(32), primary_key=True)
    phase: Mapped[str] = mapped_column(String(128), primary_key=True)
    model: Mapped[str] = mapped_column(String(256))
    wall_s: Mapped[float] = mapped_column(Float)
    gpu_s: Mapped[float] = mapped_column(Float)

    __table_args__ = (Index("ix_fleet_job_days_day", "day"),)


class FleetDayRollup(Base):
    """Sum over jobs of wall and GPU seconds per UTC day x model x component x phase."""

    __tablename__ = "fleet_day_rollups"

    day: Mapped[float] = mapped_column(Float, primary_key=True)
    model: Mapped[str] = mapped_column(String(256), primary_key=True)
    component: Mapped[str] = mapped_column(String(32), primary_key=True)
    phase: Mapped[str] = mapped_column(String(128), primary_key=True)
    wall_s: Mapped[float] = mapped_column(Float)
    gpu_s: Mapped[float] = mapped_column(Float)

    __table_args__ = (Index("ix_fleet_day_rollups_model_day", "model", "day"),)


class FleetDayTotal(Base):
    """The rollup summed over models: what the unfiltered fleet views read (a few rows a day)."""

    __tablename__ = "fleet_day_totals"

    day: Mapped[float] = mapped_column(Float, primary_key=True)
    component: Mapped[str] = mapped_column(String(32), primary_key=True)
    phase: Mapped[str] = mapped_column(String(128), primary_key=True)
    wall_s: Mapped[float] = mapped_column(Float)
    gpu_s: Mapped[float] = mapped_column(Float)


class FleetFailure(Base):
    """One failure of a job (from its Level-1 result), dated by the failure's UTC day."""

    __tablename__ = "fleet_failures"

    job_id: Mapped[str] = mapped_column(
        String(128), ForeignKey("jobs.job_id", ondelete="CASCADE"), primary_key=True
    )
    idx: Mapped[int] = mapped_column(Integer, primary_key=True)
    model: Mapped[str] = mapped_column(String(256))
    ts: Mapped[float] = mapped_column(Float)
    day: Mapped[float] = mapped_column(Float)
    kind: Mapped[str] = mapped_column(String(16))
    inferred: Mapped[bool] = mapped_column(Boolean)
    attempt: Mapped[int | None] = mapped_column(Integer)

    __table_args__ = (Index("ix_fleet_failures_day_model", "day", "model"),)


class FleetJob(Base):
    """A job's facts for the failure analysis, dated by its submission's UTC day."""

    __tablename__ = "fleet_jobs"

    job_id: Mapped[str] = mapped_column(
        String(128), ForeignKey("jobs.job_id", ondelete="CASCADE"), primary_key=True
    )
    model: Mapped[str] = mapped_column(String(256))
    day: Mapped[float] = mapped_column(Float)
    gpus: Mapped[int] = mapped_column(Integer)
    attempts: Mapped[int] = mapped_column(Integer)
    # Attempts that did not start because the previous one was preempted.
    attempts_excl_preemption: Mapped[int] = mapped_column(Integer)
    nof: Mapped[int] = mapped_column(Integer)

    __table_args__ = (Index("ix_fleet_jobs_day_model", "day", "model"),)


# The metrics ledger: what each finished job contributed to the exported counters.
#
# A job is booked once, at the first recompute that stores it as final (not provisional):
# `booked` holds its GPU-seconds (or failures) per key. A later recompute that changes a finished
# job's past never lowers a counter; the difference goes to `added` or `removed`, exported as
# the separate correction counters. Rows are never deleted, so no exported counter goes back.
GPU_SECONDS = "gpu_seconds"
FAILURES = "failures"


class LedgerEntry(Base):
    """One job's booked amount of one exported series (GPU-seconds or failures) and its corrections."""

    __tablename__ = "metrics_ledger"

    job_id: Mapped[str] = mapped_column(String(128), primary_key=True)
    # gpu_seconds: key1 = component, key2 = phase ("" for none); failures: key1 = kind, key2 = "".
    series: Mapped[str] = mapped_column(String(16), primary_key=True)
    model: Mapped[str] = mapped_column(String(256), primary_key=True)
    team: Mapped[str] = mapped_column(String(128), primary_key=True)
    key1: Mapped[str] = mapped_column(String(32), primary_key=True)
    key2: Mapped[str] = mapped_column(String(128), primary_key=True)
    booked: Mapped[float] = mapped_column(Float)
    added: Mapped[float] = mapped_column(Float)
    removed: Mapped[float] = mapped_column(Float)
    booked_at: Mapped[float] = mapped_column(Float)
    updated_at: Mapped[float] = mapped_column(Float)

    __table_args__ = (Index("ix_metrics_ledger_series_model", "series", "model"),)
