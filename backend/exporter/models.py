"""The metrics ledger: what each finished job contributed to the exported counters.

A job is booked once, at the first recompute that stores it as final (not provisional):
`booked` holds its GPU-seconds (or failures) per key. A later recompute that changes a finished
job's past never lowers a counter; the difference goes to `added` or `removed`, exported as
the separate correction counters. Rows are never deleted, so no exported counter goes back.
"""

from __future__ import annotations

from sqlalchemy import Float, Index, String
from sqlalchemy.orm import Mapped, mapped_column

from backend.db import Base

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
