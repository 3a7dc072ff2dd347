"""SLO compliance history: each SLO's indicator at past instants, stored so pages read it fast.

The values come from the alert evaluator's own measure (backend.alerts.indicators), taken at
the end of each day or week; `backfill` fills a range (the demo runs it after its load), and
the evaluator appends each day's point as time passes (`record_day_ends`, once per SLO and day).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from typing import Any

from sqlalchemy import Boolean, Float, String, delete, func, select
from sqlalchemy.orm import Mapped, Session, mapped_column

from backend.alerts import indicators, store
from backend.alerts.slos import SloSpec
from backend.db import Base
from backend.fleet.days import DAY_S, day_start

log = logging.getLogger(__name__)
# After an outage the evaluator fills at most this many missed day ends.
CATCH_UP_DAYS = 7


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
    """Measure every enabled SLO at each instant and store the points; answers how many.

    The live indicators have no past to measure (a live state is of "now"): they are skipped.
    """
    specs = [s for s in store.list_slos(db_session=db_session) if s.enabled and not s.is_live]
    n = 0
    for at in instants:
        cache: dict[Any, Any] = {}
        for spec in specs:
            store_point(
                db_session=db_session,
                spec=spec,
                at=at,
                evaluations=indicators.measure(db_session, spec, at, cache, drivers=False),
            )
            n += 1
    db_session.flush()
    return n


def store_point(
    *, db_session: Session, spec: SloSpec, at: float, evaluations: Iterable[Any]
) -> None:
    """Store (or replace) an SLO's point at `at` from the evaluations measured there."""
    value = worst(spec, evaluations)
    db_session.execute(
        delete(SloHistoryPoint).where(SloHistoryPoint.slo == spec.name, SloHistoryPoint.ts == at)
    )
    db_session.add(
        SloHistoryPoint(
            slo=spec.name, ts=at, value=value, breached=value is not None and spec.breached(value)
        )
    )


def _store(db_session: Session, spec: SloSpec, at: float, cache: dict[Any, Any]) -> None:
    value = worst(spec, indicators.measure(db_session, spec, at, cache, drivers=False))
    db_session.add(
        SloHistoryPoint(
            slo=spec.name, ts=at, value=value, breached=value is not None and spec.breached(value)
        )
    )


def record_day_ends(*, db_session: Session, specs: Sequence[SloSpec], now: float) -> int:
    """Append each SLO's point at the day ends up to `now` that it lacks; answers how many.

    Called by every evaluation pass: a day end already stored is skipped, so a pass costs one
    query except the first after midnight UTC (and at most CATCH_UP_DAYS day ends after an
    outage). Each point is measured at its day end, as `backfill` measures it.
    """
    names = [s.name for s in specs if s.enabled]
    if not names:
        return 0
    latest = day_start(now)
    instants = [latest - i * DAY_S for i in range(CATCH_UP_DAYS)][::-1]
    have = {
        (slo, ts)
        for slo, ts in db_session.execute(
            select(SloHistoryPoint.slo, SloHistoryPoint.ts).where(
                SloHistoryPoint.slo.in_(names),
                SloHistoryPoint.ts >= instants[0],
                SloHistoryPoint.ts <= latest,
            )
        )
    }
    # Only the day ends after the SLO's newest point: a gap older than that stays a gap.
    newest = dict(
        db_session.execute(
            select(SloHistoryPoint.slo, func.max(SloHistoryPoint.ts))
            .where(SloHistoryPoint.slo.in_(names))
            .group_by(SloHistoryPoint.slo)
        ).all()
    )
    n = 0
    for at in instants:
        cache: dict[Any, Any] = {}
        for spec in specs:
            if not spec.enabled or (spec.name, at) in have:
                continue
            last = newest.get(spec.name)
            if last is not None and at < last:
                continue
            try:
                with db_session.begin_nested():
                    _store(db_session, spec, at, cache)
            except Exception:  # one broken SLO must not stop the others, nor the evaluation
                log.exception("could not record SLO history for %s at %s", spec.name, at)
                continue
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
