"""The owners page in headless Chromium lists the demo's replayed alert episodes for the range:
when each fired and resolved, its peak, who acknowledged it, silenced or not, channels notified."""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from types import SimpleNamespace

import httpx
import pytest

from backend.config import Settings
from backend.db import Database
from backend.demo import fleet, loader
from dashboard.data import slo_unit
from tests.dashboard.browser import Browser, browser_available, sqlite_site

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(not browser_available(), reason="needs chromium and chromedriver"),
]
DAYS = 60.0


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The app over SQLite with a 60-day demo fleet, its SLO history and alerts replayed."""

    def seed(database: Database, settings: Settings) -> None:
        now = time.time()
        spec = fleet.FleetSpec(seed=7, models=4, days=DAYS, now=now)
        loader.load_in_process(
            database, settings, fleet.fleet_events(spec), now=now, progress=False
        )
        loader.backfill_slo_history(database, settings, spec.start, now)

    with sqlite_site(tmp_path_factory.mktemp("owner-episodes"), seed) as base:
        yield base


def _range() -> tuple[str, str]:
    end = datetime.now(UTC).date()
    return (end - timedelta(days=DAYS + 1)).isoformat(), end.isoformat()


def _shown(ts: str | None) -> str:
    return ts[:16].replace("T", " ") if ts else "still firing"


def test_owner_page_lists_episodes_with_ack_and_silence(site: str, browser: Browser) -> None:
    start, end = _range()
    answer = httpx.get(
        site + "/api/v1/alerts/episodes",
        params={"start": f"{start}T00:00:00Z", "end": f"{end}T23:59:59Z"},
        timeout=30,
    ).json()
    items = answer["items"]
    acked = next(e for e in items if e["acknowledged_by"])
    silenced = next(e for e in items if e["silenced"])
    assert any(e["resolved_at"] for e in items)
    for episode, mark in ((acked, loader.DEMO_ONCALL), (silenced, "yes")):
        owner = episode["owner"]
        browser.get(f"{site}/owners?owner={owner}&start={start}&end={end}")
        table = browser.wait_for("#owners-episodes-table", timeout=60)
        browser.wait_for_text("#owners-episodes-table", episode["slo"])
        rows = table.text.splitlines()
        ours = [e for e in items if e["owner"] == owner]
        line = next(r for r in rows if _shown(episode["fired_at"]) in r and episode["slo"] in r)
        assert _shown(episode["resolved_at"]) in line
        assert mark in line
        slo = SimpleNamespace(**httpx.get(f"{site}/api/v1/slos/{episode['slo']}").json())
        assert slo_unit(slo, episode["peak"]) in line
        assert episode["notified"] in line
        # Every episode of this owner in the range has its row (the table pages at 15).
        assert sum(1 for r in rows if r.startswith(tuple(e["slo"] for e in ours))) == min(
            15, len(ours)
        )
    assert browser.severe() == []
