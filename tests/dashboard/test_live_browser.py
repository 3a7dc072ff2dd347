"""The Live page in headless Chromium, on SQLite and Postgres: first in the navigation, GPUs by
live state, the hung job first with its owner, bound, overrun and GPU-hours (a link to its job
page), rolling ETT%, and it redraws itself when the fleet changes."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from backend.app import create_app
from backend.config import Settings
from backend.db import Database
from backend.live import learn
from dashboard.pages import live as live_page
from tests.backend.live import fleet
from tests.dashboard.browser import Browser, browser_available, serve

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(not browser_available(), reason="needs chromium and chromedriver"),
]

SCREENSHOT = Path(__file__).resolve().parents[2] / "docs" / "screenshots" / "live.png"


@pytest.fixture
def site(post: Any, database: Database, settings: Settings) -> Iterator[str]:
    """Model m's history (bounds learned), a job hung in its process group, one training."""
    now = time.time()
    post(fleet.history("m", now - 10 * 3600))
    with database.session() as s:
        learn.refresh(s, settings)
        s.commit()
    post(fleet.hung_in_phase("hung-pg", "m", now - 300, "trainer_init.process_group", now).events)
    post(fleet.hung_loop("training-1", "m", now - 105, 3, now).events)
    app = create_app(settings, database=database, start_workers=False)
    with serve(app) as base:
        yield base


def test_the_live_page_shows_the_fleet_now_and_refreshes(
    site: str, browser: Browser, post: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    browser.console()
    browser.get(site + "/live")
    browser.wait_for("#live-bad-table")
    browser.wait_for_graphs(1)
    nav = browser.find_all(".ett-nav a")
    assert nav[0].text == "Live" and nav[0].get_attribute("href").endswith("/live")
    assert browser.text("#live-open-jobs") == "2"
    assert browser.text("#live-bad-gpus") == "8"
    assert browser.text("#live-training-gpus") == "8"
    bad = browser.text("#live-bad-table")
    assert "hung-pg" in bad and "hung:trainer_init.process_group" in bad and "trainer" in bad
    # bound 85.65 s = 1.4 min; open since now - 290: overrun 3.4 min and more; 8 GPUs for 300 s
    # and more (the page is read a little later on a loaded machine)
    row = bad.splitlines()[-1].split()
    bound, overrun, gpus, burned = (float(x) for x in row[-4:])
    assert bound == 1.4 and 3.4 <= overrun < 4.5 and gpus == 8
    assert 8 * 300 / 3600 - 0.01 <= burned < 8 * 380 / 3600
    rolling = browser.text("#live-rolling-table")
    assert "(fleet)" in rolling and "m" in rolling
    shot = SCREENSHOT if os.environ.get("ETT_SCREENSHOTS") == "1" else tmp_path / "live.png"
    browser.screenshot(shot)
    assert shot.stat().st_size > 10_000
    # A second job hangs: the page redraws itself with it (no reload)
    now = time.time()
    post(fleet.hung_in_phase("hung-2", "m", now - 400, "trainer_init.process_group", now).events)
    browser.wait_for_text(
        "#live-bad-table", "hung-2", timeout=live_page.LIVE_REFRESH_MS / 1000 + 20
    )
    assert browser.text("#live-bad-gpus") == "16"
    # The job's link opens its page
    browser.click("#live-bad-table a[href*='hung-pg']")
    browser.wait_for_url("/job?job_id=hung-pg")
    browser.wait_for_text("#job-id", "hung-pg")
    assert browser.severe() == []
