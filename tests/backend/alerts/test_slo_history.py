"""The evaluator appends SLO history as time passes: one point per SLO and UTC day end."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import yaml
from dash import html
from sqlalchemy import select

from backend.alerts import cycle
from backend.alerts.delivery import RetryPolicy
from backend.alerts.history import SloHistoryPoint
from backend.config import Settings
from backend.db import Database
from dashboard.pages import owners
from tests.backend.alerts.fleet import seed_job, slow_scheduling
from tests.dashboard.conftest import dashboard_request, find

DAY = 86400.0
# Noon UTC, so "two days later" crosses exactly two day ends.
T = 1_800_000_000.0 - 1_800_000_000.0 % DAY + DAY / 2
FAST = RetryPolicy(max_attempts=1, base_delay_s=0.01, max_delay_s=0.05, send_timeout_s=2)


def _settings(database: Database, tmp_path: Path) -> Settings:
    doc = {
        "slos": [
            {
                "name": "sched_share",
                "owner": "scheduler",
                "component": "scheduling",
                "indicator": "gpu_time_share",
                "objective": 10.0,
                "window": "1d",
            },
            {
                "name": "compile_p90",
                "owner": "compiler",
                "component": "pt2_compile",
                "indicator": "duration_percentile",
                "percentile": 90,
                "objective": 600,
                "window": "1d",
            },
        ]
    }
    path = tmp_path / "slos.yaml"
    path.write_text(yaml.safe_dump(doc))
    return Settings(home=tmp_path, database_url=database.url, slos_file=path)


def _points(database: Database) -> list[tuple[str, float, bool]]:
    with database.session() as s:
        rows = s.execute(
            select(SloHistoryPoint.slo, SloHistoryPoint.ts, SloHistoryPoint.breached).order_by(
                SloHistoryPoint.ts, SloHistoryPoint.slo
            )
        )
        return [(slo, ts, bool(b)) for slo, ts, b in rows]


def _evaluate(database: Database, settings: Settings, now: float) -> None:
    cycle.evaluate_once(db=database, settings=settings, now=now, policy=FAST, release=True)


def test_evaluating_at_two_times_appends_one_point_per_slo_and_day(
    database: Database, tmp_path: Path
) -> None:
    settings = _settings(database, tmp_path)
    with database.session() as s:
        # A healthy day, then a day whose jobs queue for an hour (scheduling share breached).
        for i in range(4):
            seed_job(s, f"ok-{i}", "model-a", T - DAY / 4 + i * 600)
        for i in range(4):
            seed_job(s, f"slow-{i}", "model-a", T + DAY - DAY / 4 + i * 600, slow_scheduling(3600))
        s.commit()

    _evaluate(database, settings, T)
    first = _points(database)
    # The first pass (no history yet) records the day ends of the last week, once per SLO.
    assert len(first) == 2 * 7
    assert {ts for _slo, ts, _b in first} == {T - DAY / 2 - i * DAY for i in range(7)}

    _evaluate(database, settings, T + 60)  # same day: nothing new
    assert _points(database) == first

    _evaluate(database, settings, T + 2 * DAY)
    later = _points(database)
    added = [p for p in later if p not in first]
    assert sorted({ts for _s, ts, _b in added}) == [T + DAY / 2, T + 3 * DAY / 2]
    assert len(added) == 2 * 2  # two day ends, two SLOs
    # The day end after the slow jobs (T + 1.5 days, window 1 day) breached; the one before not.
    assert ("sched_share", T + 3 * DAY / 2, True) in later
    assert ("sched_share", T + DAY / 2, False) in later

    # The owners page shows the appended days.
    day = datetime.fromtimestamp(T + 2 * DAY, UTC).date()
    start = datetime.fromtimestamp(T - 6 * DAY, UTC).date()
    with dashboard_request(settings, database):
        below = html.Div(owners.below({"start": start.isoformat(), "end": day.isoformat()}))
    heatmap = find(below, "owners-slo-history-graph").figure.data[0]
    row = list(heatmap.y).index("sched_share")
    shown = dict(zip(list(heatmap.x), list(heatmap.z[row]), strict=True))
    assert shown[datetime.fromtimestamp(T + 3 * DAY / 2, UTC).replace(tzinfo=None)] == 1
    assert shown[datetime.fromtimestamp(T + DAY / 2, UTC).replace(tzinfo=None)] == 0
