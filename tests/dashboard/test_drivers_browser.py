"""In headless Chromium: the compiler owner reaches the worst PT2-compile job of the range from
the navigation bar in three clicks, through the owner page's driver list and its link."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest

from dashboard.filters import DEFAULT_DAYS
from tests.dashboard.browser import Browser, browser_available, sqlite_site
from tests.dashboard.conftest import seed_demo

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(not browser_available(), reason="needs chromium and chromedriver"),
]


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The app over a seeded SQLite database, under uvicorn."""
    with sqlite_site(tmp_path_factory.mktemp("drivers"), seed_demo) as base:
        yield base


def _rest(site: str, path: str, **params: Any) -> Any:
    answer = httpx.get(site + path, params=params, timeout=30)
    answer.raise_for_status()
    return answer.json()


def _default_range() -> dict[str, str]:
    end = datetime.now(UTC).date()
    start = end - timedelta(days=DEFAULT_DAYS - 1)
    return {"start": f"{start}T00:00:00Z", "end": f"{end + timedelta(days=1)}T00:00:00Z"}


# Where the owner's bar lies in the by-owner chart: its trace (component) and point index.
_FIND_BAR = """
const gd = document.querySelector('#fleet-lost-owner-graph .js-plotly-plot');
for (let t = 0; t < gd.data.length; t++) {
  const p = Array.from(gd.data[t].y).indexOf(arguments[0]);
  if (p >= 0) { return [t, p]; }
}
return null;
"""


def test_compiler_owner_reaches_the_worst_compile_job_in_three_clicks(
    site: str, browser: Browser
) -> None:
    worst = _rest(
        site,
        "/api/v1/fleet/lost",
        by="job",
        component="pt2_compile",
        component_owner="compiler",
        **_default_range(),
    )["rows"][0]
    browser.console()
    browser.get(site + "/model")
    browser.wait_for(".ett-main h1")
    browser.click("#shell-nav-fleet")  # 1: the navigation bar
    browser.wait_for_text(".ett-main h1", "Fleet")
    browser.wait_for_graphs(6)
    where = browser.driver.execute_script(_FIND_BAR, "compiler")
    assert where is not None, "no compiler bar on the fleet page"
    trace, point = where
    traces = browser.find_all("#fleet-lost-owner-graph .trace.bars")
    bars = traces[trace].find_elements("css selector", ".point path")
    browser.click_at(bars[point])  # 2: the compiler's bar
    url = browser.wait_for_url("/owners?")
    assert parse_qs(urlsplit(url).query)["owner"] == ["compiler"]
    browser.wait_for_text("#owners-drivers-jobs-pt2_compile", worst["job_id"])
    models = browser.text("#owners-drivers-models-pt2_compile")
    assert worst["model"] in models
    links = browser.find_all("#owners-drivers-jobs-pt2_compile a")
    assert links and links[0].text == worst["job_id"]
    links[0].click()  # 3: the worst job
    browser.wait_for_url(f"job_id={worst['job_id']}")
    browser.wait_for_text("#job-id", worst["job_id"])
    browser.wait_for_graphs(1)
    assert browser.severe() == []


def test_a_driver_model_link_opens_the_model_page(site: str, browser: Browser) -> None:
    browser.get(site + "/owners?owner=compiler")
    browser.wait_for("#owners-drivers-models-pt2_compile a")
    link = browser.find_all("#owners-drivers-models-pt2_compile a")[0]
    model = link.text
    link.click()
    browser.wait_for_url(f"model={model}")
    browser.wait_for_text("#model-name", model)
    # The "every job" link opens the Jobs list sorted by the component's GPU-hours.
    browser.get(site + "/owners?owner=compiler")
    browser.click("#owners-drivers-all-pt2_compile")
    browser.wait_for_url("component=pt2_compile")
    browser.wait_for_text(".ett-main", "most GPU-hours in")
    assert "GPU-h in" in browser.text("#job-list-table")
    assert browser.severe() == []
