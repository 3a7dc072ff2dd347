"""The Nodes page in headless Chromium on a demo fleet with its two lemon nodes: the cards, the
lemon list and the host table equal GET /api/v1/fleet/nodes; the fleet page draws MTTF by size."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest

from backend.config import Settings
from backend.db import Database
from backend.demo import fleet, loader
from backend.demo.simulator import LEMON_HOSTS
from dashboard import numbers
from tests.dashboard.browser import Browser, browser_available, sqlite_site

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(not browser_available(), reason="needs chromium and chromedriver"),
]
SCREENSHOT = Path(__file__).resolve().parents[2] / "docs" / "screenshots" / "nodes.png"
DAYS = 30


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The app over SQLite seeded with the demo's 40 models over the last 30 days."""

    def seed(database: Database, settings: Settings) -> None:
        now = time.time()
        spec = fleet.FleetSpec(seed=7, models=40, days=DAYS, now=now, benchmarks=False)
        report = loader.load_in_process(
            database, settings, fleet.fleet_events(spec), now=now, progress=False
        )
        assert report.accepted > 0 and not report.rejected

    with sqlite_site(tmp_path_factory.mktemp("nodes-browser"), seed) as base:
        yield base


def _range() -> tuple[dict[str, str], dict[str, str]]:
    end = datetime.now(UTC).date()
    start = end - timedelta(days=DAYS)
    page = {"start": start.isoformat(), "end": end.isoformat()}
    rest = {"start": f"{start}T00:00:00Z", "end": f"{end + timedelta(days=1)}T00:00:00Z"}
    return page, rest


def _rest(site: str, path: str, **params: Any) -> Any:
    answer = httpx.get(site + path, params=params, timeout=60)
    answer.raise_for_status()
    return answer.json()


def test_nodes_page_shows_the_lemons_and_equals_rest(
    site: str, browser: Browser, tmp_path: Path
) -> None:
    page, rest = _range()
    doc = _rest(site, "/api/v1/fleet/nodes", **rest)
    assert sorted(n["host"] for n in doc["nodes"] if n["lemon"]) == sorted(LEMON_HOSTS)
    browser.console()
    browser.get(f"{site}/nodes?start={page['start']}&end={page['end']}")
    browser.wait_for(".ett-main h1")
    browser.wait_for_graphs(1)
    assert browser.text("#nodes-hosts") == f"{doc['fleet']['hosts']:,}"
    assert browser.text("#nodes-lemons") == "2"
    lost = sum(n["ttr_lost_gpu_h"] for n in doc["nodes"] if n["lemon"])
    assert browser.text("#nodes-ttr") == numbers.gpu_hours(lost)
    lemon_text = browser.text("#nodes-lemon-list")
    for n in doc["nodes"][:2]:
        assert f"{n['host']}: {n['unplanned_failures']} unplanned failures" in lemon_text
    table = browser.text("#nodes-table")
    assert doc["nodes"][0]["host"] in table and doc["nodes"][1]["host"] in table
    assert browser.severe() == []
    # ETT_SCREENSHOTS=1 refreshes docs/screenshots; otherwise it goes to a temporary folder.
    shot = SCREENSHOT if os.environ.get("ETT_SCREENSHOTS") == "1" else tmp_path / "nodes.png"
    browser.screenshot(shot)
    assert shot.stat().st_size > 10_000


def test_fleet_page_draws_mttf_by_job_size(site: str, browser: Browser) -> None:
    page, rest = _range()
    buckets = _rest(site, "/api/v1/fleet/mttf", **rest)["buckets"]
    assert any(b["mttf_h"] for b in buckets)
    browser.get(f"{site}/?start={page['start']}&end={page['end']}")
    browser.wait_for("#fleet-mttf-graph .main-svg")
    bars = browser.find_all("#fleet-mttf-graph .bars .point path")
    assert len(bars) == sum(1 for b in buckets if b["mttf_h"])
