"""list_alerts orders before it limits: a firing alert is never cut off by resolved ones."""

from __future__ import annotations

from backend.alerts import read
from backend.alerts.models import AlertState
from backend.db import Database

NOW = 1_800_000_000.0


def _state(fp: str, state: str, fired_at: float | None) -> AlertState:
    return AlertState(
        fingerprint=fp,
        slo_name="s",
        owner="scheduler",
        component="scheduling",
        model=None,
        severity="warning",
        labels={},
        state=state,
        value=1.0,
        objective=0.5,
        breach_started_at=None,
        fired_at=fired_at,
        resolved_at=None,
        last_evaluated_at=NOW,
        episode=1,
        notified_firing=False,
        version=0,
        details={},
    )


def test_limit_keeps_firing_first_then_newest(database: Database) -> None:
    with database.session() as s:
        # Inserted first, so an unordered LIMIT would return resolved rows.
        for i in range(6):
            s.add(_state(f"a-resolved-{i}", "resolved", NOW - 1000 + i))
        s.add(_state("z-pending", "pending", None))
        s.add(_state("z-firing-old", "firing", NOW - 500))
        s.add(_state("z-firing-new", "firing", NOW - 10))
        s.commit()
        got = [a.fingerprint for a in read.list_alerts(db_session=s, limit=4)]
    assert got == ["z-firing-new", "z-firing-old", "z-pending", "a-resolved-5"]
