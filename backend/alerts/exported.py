"""What the Prometheus exporter shows of the alerts: open alerts and the ETT% objectives.

The exporter reads these through the `AlertFacts` the composition root hands it
(`backend.exporter.collector`), so the two consumers do not import each other.
"""

from __future__ import annotations

from collections.abc import Iterable
from functools import lru_cache
from pathlib import Path
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from backend.alerts.models import AlertState, Slo
from backend.alerts.slos import DEFAULT_SLOS_FILE, load_slo_file
from backend.config import Settings

OPEN_ALERT_STATES = ("pending", "firing")


def open_alert_counts(db_session: Session) -> Iterable[tuple[str, str, str, int]]:
    """(owner, severity, state, count) of the pending and firing alerts."""
    return [
        (owner, severity, state, int(n))
        for owner, severity, state, n in db_session.execute(
            select(AlertState.owner, AlertState.severity, AlertState.state, func.count())
            .where(AlertState.state.in_(OPEN_ALERT_STATES))
            .group_by(AlertState.owner, AlertState.severity, AlertState.state)
        )
    ]


@lru_cache(maxsize=4)
def _file_ett_slos(path: str, _mtime_ns: int) -> tuple[dict[str, Any], ...]:
    """The ett_floor SLOs of an SLO file, parsed once per version of the file."""
    return tuple(
        {"name": x.name, "owner": x.owner, "objective": x.objective, "model": x.model}
        for x in load_slo_file(Path(path)).slos
        if x.indicator == "ett_floor" and x.enabled
    )


def ett_floor_slos(db_session: Session, settings: Settings) -> list[dict[str, Any]]:
    """The enabled ett_floor SLOs as {name, owner, objective, model}: synced ones, else the file's."""
    rows = list(
        db_session.execute(
            select(Slo.name, Slo.owner, Slo.indicator, Slo.objective, Slo.spec, Slo.enabled)
        )
    )
    if rows:
        return [
            {
                "name": n,
                "owner": o,
                "objective": obj,
                "model": (spec or {}).get("model"),
            }
            for n, o, ind, obj, spec, enabled in rows
            if ind == "ett_floor" and enabled
        ]
    # The evaluator has not synced the SLO file yet: read it as it would.
    path = Path(settings.slos_file or DEFAULT_SLOS_FILE)
    try:
        mtime = path.stat().st_mtime_ns
    except OSError:
        return []
    return list(_file_ett_slos(str(path), mtime))
