"""Grafana and W&B habits in headless Chromium: a quick range, auto-refresh, a bar that opens its
jobs, a chart and a table downloaded as CSV, and ticked jobs compared on one time axis."""

from __future__ import annotations

import csv
import io
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest
from selenium.webdriver.support.ui import WebDriverWait

from dashboard.palette import COMPONENT_LABELS
from tests.dashboard.browser import Browser, browser_available, sqlite_site
from tests.dashboard.conftest import seed_demo

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(not browser_available(), reason="needs chromium and chromedriver"),
]
SCREENSHOTS = Path(__file__).resolve().parents[2] / "docs" / "screenshots"


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The app over a seeded SQLite database, under uvicorn."""
    with sqlite_site(tmp_path_factory.mktemp("habits"), seed_demo) as base:
        yield base


@pytest.fixture(scope="module")
def downloads(tmp_path_factory: pytest.TempPathFactory, browser: Browser) -> Path:
    """Where the browser saves what it downloads."""
    folder = tmp_path_factory.mktemp("downloads")
    browser.driver.execute_cdp_cmd(
        "Browser.setDownloadBehavior", {"behavior": "allow", "downloadPath": str(folder)}
    )
    return folder


def _rest(site: str, path: str, **params: Any) -> Any:
    answer = httpx.get(site + path, params=params, timeout=30)
    answer.raise_for_status()
    return answer.json()


def _open(browser: Browser, url: str, charts: int = 0) -> None:
    browser.get(url)
    browser.wait_for(".ett-main h1")
    if charts:
        browser.wait_for_graphs(charts)


def _downloaded(folder: Path, name: str, timeout: float = 20.0) -> str:
    path = folder / name
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.exists() and path.stat().st_size > 0:
            return path.read_text(encoding="utf-8")
        time.sleep(0.1)
    raise AssertionError(f"{name} was not downloaded: {sorted(p.name for p in folder.iterdir())}")


def _csv_button(browser: Browser, target: str) -> Any:
    return browser.wait_for(f"#{target} ~ .ett-csv-button")


def test_a_quick_range_sets_the_days_and_stays_relative(site: str, browser: Browser) -> None:
    browser.console()
    _open(browser, site + "/", 3)
    browser.click("#fleet-quick-7d")
    url = browser.wait_for_url("range=7d")
    today = datetime.now(UTC).date()
    query = parse_qs(urlsplit(url).query)
    assert query["start"] == [(today - timedelta(days=6)).isoformat()]
    assert query["end"] == [today.isoformat()]
    rng = {"start": (today - timedelta(days=6)).isoformat(), "end": today.isoformat()}
    week = _rest(site, "/api/v1/fleet/ett", **rng)
    browser.wait_for_pct("#fleet-ett", week["total"]["ett_pct"])
    assert "ett-quick-on" in browser.wait_for("#fleet-quick-7d").get_attribute("class")
    assert "range=7d" in browser.wait_for("#shell-nav-owners").get_attribute("href")
    # Picking other dates drops the quick range.
    browser.click("#fleet-quick-30d")
    browser.wait_for_url("range=30d")
    browser.wait_for("#fleet-quick-30d.ett-quick-on")
    assert browser.severe() == []


# Every page runs its timers ten times faster, and records the delays it asked for: the test then
# sees the page set a 30 s timer and reload when it fires, without waiting 30 s.
FAST_TIMERS = """
window.__intervals = [];
const setIntervalAsAsked = window.setInterval;
window.setInterval = function (fn, delay, ...rest) {
    window.__intervals.push(delay);
    return setIntervalAsAsked(fn, delay / 10, ...rest);
};
"""


def test_auto_refresh_reloads_the_page(site: str, browser: Browser) -> None:
    fast = browser.driver.execute_cdp_cmd(
        "Page.addScriptToEvaluateOnNewDocument", {"source": FAST_TIMERS}
    )
    try:
        _open(browser, site + "/?range=24h", 3)
        browser.click_at(browser.wait_for("#fleet-refresh"))
        option = next(
            o
            for o in browser.find_all(".dash-dropdown-content .dash-dropdown-option")
            if o.text == "30s"
        )
        option.click()
        browser.wait_for_url("refresh=30s")
        browser.wait_for_graphs(3)
        WebDriverWait(browser.driver, 20).until(
            lambda d: 30_000 in d.execute_script("return window.__intervals"),
            "the page set no 30 s timer",
        )
        browser.driver.execute_script("window.__before_refresh = true;")
        WebDriverWait(browser.driver, 45).until(
            lambda d: d.execute_script("return window.__before_refresh === undefined")
        )
        browser.wait_for_graphs(3)
        assert "refresh=30s" in browser.driver.current_url
        assert browser.severe() == []
    finally:
        browser.driver.execute_cdp_cmd(
            "Page.removeScriptToEvaluateOnNewDocument", {"identifier": fast["identifier"]}
        )


def test_a_lost_bar_opens_the_jobs_of_its_day_and_component(site: str, browser: Browser) -> None:
    browser.console()
    _open(browser, site + "/?range=7d", 3)
    bars = browser.find_all("#fleet-lost-component-graph .bars .point path")
    assert bars
    browser.click_at(max(bars, key=lambda b: b.size["height"]))
    url = browser.wait_for_url("component=")
    query = {k: v[0] for k, v in parse_qs(urlsplit(url).query).items()}
    assert urlsplit(url).path == "/job" and query["start"] == query["end"]
    browser.wait_for("#job-list-table")
    name = COMPONENT_LABELS[query["component"]]
    assert name in browser.text("#job-component-filter")
    rest = _rest(
        site,
        "/api/v1/jobs",
        component=query["component"],
        start=query["start"],
        end=query["end"],
        sort="-gpu_hours_lost",
        limit=50,
    )
    assert rest["total"] > 0
    shown = [a.text for a in browser.find_all("#job-list-table td[data-dash-column=job] a")]
    assert shown == [j["job_id"] for j in rest["jobs"]]
    assert browser.severe() == []


def test_a_chart_and_a_table_download_as_csv(site: str, browser: Browser, downloads: Path) -> None:
    browser.console()
    _open(browser, site + "/?range=7d", 3)
    _csv_button(browser, "fleet-lost-component-graph").click()
    rows = list(csv.DictReader(io.StringIO(_downloaded(downloads, "fleet-lost-component.csv"))))
    today = datetime.now(UTC).date()
    ett = _rest(
        site,
        "/api/v1/fleet/ett",
        start=(today - timedelta(days=6)).isoformat(),
        end=today.isoformat(),
        bucket="day",
    )
    want = {
        (p["bucket"][:10], COMPONENT_LABELS[c]): v
        for p in ett["series"]
        for c, v in p["components_gpu_h"].items()
        if c != "effective_training" and v > 0
    }
    got = {(r["x"][:10], r["series"]): float(r["y"]) for r in rows}
    assert got.keys() == want.keys()
    for key, value in want.items():
        assert got[key] == pytest.approx(value, abs=0.01), key
    # A table: the Jobs list, its rows as shown, a link cell as its text.
    _open(browser, site + "/job?range=7d")
    browser.wait_for("#job-list-table")
    shown = [a.text for a in browser.find_all("#job-list-table td[data-dash-column=job] a")]
    _csv_button(browser, "job-list-table").click()
    table = list(csv.reader(io.StringIO(_downloaded(downloads, "job-list.csv"))))
    assert table[0][:3] == ["job", "model", "team"]
    assert [r[0] for r in table[1:]] == shown
    assert browser.severe() == []


def test_ticked_jobs_compare_on_one_time_axis(site: str, browser: Browser) -> None:
    browser.console()
    _open(browser, site + "/job?range=7d")
    browser.wait_for("#job-list-table")
    boxes = browser.find_all("#job-list-table input[type=checkbox]")
    assert len(boxes) >= 4
    ids = [a.text for a in browser.find_all("#job-list-table td[data-dash-column=job] a")][:4]
    assert browser.wait_for("#job-compare-timelines").get_attribute("disabled")
    for box in boxes[:4]:
        box.click()
    browser.wait_for_text("#job-timelines-note", "4 ticked")
    browser.click("#job-compare-timelines")
    url = browser.wait_for_url("timelines=")
    assert parse_qs(urlsplit(url).query)["timelines"] == [",".join(ids)]
    browser.wait_for_graphs(1)
    rows = browser.text("#compare-timelines-table")
    assert all(job_id in rows for job_id in ids)
    browser.click("#compare-align-step")
    browser.wait_for_url("align=step")
    browser.wait_for("#compare-align-step.ett-quick-on")
    browser.wait_for_graphs(1)
    assert browser.severe() == []
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    browser.screenshot(SCREENSHOTS / "compare-timelines.png")
    browser.driver.set_window_size(1440, 1000)


def test_an_owners_bar_opens_the_jobs_of_its_bucket_and_component(
    site: str, browser: Browser
) -> None:
    browser.console()
    _open(browser, site + "/?range=30d", 3)
    bars = browser.find_all("#fleet-lost-owner-graph .bars .point path")
    browser.click_at(bars[0])
    url = browser.wait_for_url("/owners?")
    owner = parse_qs(urlsplit(url).query)["owner"][0]
    browser.wait_for("#owners-trend-graph .bars .point path")
    # The part below the first screen arrives after it and moves the chart: wait for it.
    WebDriverWait(browser.driver, 30).until(
        lambda d: d.execute_script(
            "const e = document.getElementById('owners-deferred');"
            "return e && !e.textContent.includes('Loading the charts below');"
        )
    )
    time.sleep(0.5)
    held = browser.text("#owners-components-table")
    bars = browser.find_all("#owners-trend-graph .bars .point path")
    browser.click_at(max(bars, key=lambda b: b.size["height"]))  # a 1-px bar is hard to hit
    url = browser.wait_for_url("/job?")
    query = {k: v[0] for k, v in parse_qs(urlsplit(url).query).items()}
    assert COMPONENT_LABELS[query["component"]] in held or query["component"] in held, owner
    browser.wait_for("#job-component-filter")
    rest = _rest(
        site, "/api/v1/jobs", component=query["component"], start=query["start"], end=query["end"]
    )
    assert browser.text("#job-page-range").endswith(f"of {rest['total']:,}")
    assert browser.severe() == []
