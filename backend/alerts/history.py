"""SLO compliance history: each SLO's indicator at past instants, stored so pages read it fast.

The values come from the alert evaluator's own measure (backend.alerts.indicators), taken at
the end of each day or week; `backfill` fills a range (the demo runs it after its load).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from sqlalchemy import Boolean, Float, String, delete, select
from sqlalchemy.orm import Mapped, Session, mapped_column

from backend.alerts import indicators, store
from backend.alerts.slos import SloSpec
from backend.db import Base


class SloHistoryPoint(Base):
    """One SLO's worst value over its window ending at `ts`, and whether it breached."""

    __tablename__ = "slo_history"

    slo: Mapped[str] = mapped_column(String(128), primary_key=True)
    ts: Mapped[float] = mapped_column(Float, primary_key=True)
    value: Mapped[float | None] = mapped_column(Float)
    breached: Mapped[bool] = mapped_column(Boolean, default=False)


def worst(spec: SloSpec, evaluations: Iterable[Any]) -> float | None:
    """The worst value of an SLO's evaluations (lowest for a floor, highest otherwise)."""
    values = [e.value for e in evaluations if e.value is not None]
    if not values:
        return None
    return min(values) if spec.is_floor else max(values)


def backfill(*, db_session: Session, instants: Iterable[float]) -> int:
    """Measure every enabled SLO at each instant and store the points; answers how many."""
    specs = [s for s in store.list_slos(db_session=db_session) if s.enabled]
    n = 0
    for at in instants:
        cache: dict[Any, Any] = {}
        for spec in specs:
            value = worst(spec, indicators.measure(db_session, spec, at, cache))
            db_session.execute(
                delete(SloHistoryPoint).where(
                    SloHistoryPoint.slo == spec.name, SloHistoryPoint.ts == at
                )
            )
            db_session.add(
                SloHistoryPoint(
                    slo=spec.name,
                    ts=at,
                    value=value,
                    breached=value is not None and spec.breached(value),
                )
            )
            n += 1
    db_session.flush()
    return n


def points(
    *, db_session: Session, names: list[str], start: float, end: float
) -> dict[str, list[tuple[float, float | None, bool]]]:
    """The stored points of these SLOs with start < ts <= end, oldest first."""
    out: dict[str, list[tuple[float, float | None, bool]]] = {n: [] for n in names}
    if not names:
        return out
    rows = db_session.execute(
        select(
            SloHistoryPoint.slo, SloHistoryPoint.ts, SloHistoryPoint.value, SloHistoryPoint.breached
        )
        .where(
            SloHistoryPoint.slo.in_(names),
            SloHistoryPoint.ts > start,
            SloHistoryPoint.ts <= end,
        )
        .order_by(SloHistoryPoint.ts)
    )
    for name, ts, value, breached in rows:
        out[name].append((ts, value, bool(breached)))
    return out
