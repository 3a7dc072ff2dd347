"""The dashboard in headless Chromium on a seeded database: pages draw, numbers equal REST,
charts lead fleet -> model -> job, filters live in the URL, and the console stays clean."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest
from selenium.webdriver.common.action_chains import ActionChains
from selenium.webdriver.support.ui import WebDriverWait

from dashboard.filters import DEFAULT_DAYS
from tests.dashboard.browser import Browser, browser_available, sqlite_site
from tests.dashboard.conftest import pct_matches, seed_demo

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(not browser_available(), reason="needs chromium and chromedriver"),
]

# Path -> charts the page draws once loaded.
PAGES = {
    "/": 8,
    "/model": 0,
    "/model?model=model-c": 6,
    "/job": 0,
    "/job?job_id=model-b-baseline": 3,
    "/compare": 2,
    "/owners": 1,
}


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The app (API and dashboard on one port) over a seeded SQLite database, under uvicorn."""
    with sqlite_site(tmp_path_factory.mktemp("browser"), seed_demo) as base:
        yield base


def _default_range() -> dict[str, str]:
    end = datetime.now(UTC).date()
    start = end - timedelta(days=DEFAULT_DAYS - 1)
    return {"start": f"{start}T00:00:00Z", "end": f"{end + timedelta(days=1)}T00:00:00Z"}


def _rest(site: str, path: str, **params: Any) -> Any:
    answer = httpx.get(site + path, params=params, timeout=30)
    answer.raise_for_status()
    return answer.json()


def _open(browser: Browser, url: str, charts: int) -> None:
    browser.get(url)
    browser.wait_for(".ett-main h1")
    if charts:
        browser.wait_for_graphs(charts)


def _click_bar(browser: Browser, graph_id: str, index: int = -1) -> None:
    bars = browser.find_all(f"#{graph_id} .bars .point path")
    assert bars, f"no bars in #{graph_id}"
    browser.click_at(bars[index])


def test_every_page_draws_without_console_errors(site: str, browser: Browser) -> None:
    browser.console()
    for path, charts in PAGES.items():
        _open(browser, site + path, charts)
        assert browser.severe() == [], path
    # The tables pages show real rows, not an empty state.
    _open(browser, site + "/model", 0)
    assert "model-a" in browser.text("#model-list-table")
    _open(browser, site + "/job", 0)
    assert "model-b-baseline" in browser.text("#job-list-table")


def test_headline_numbers_equal_the_rest_answers(site: str, browser: Browser) -> None:
    rng = _default_range()
    ett = _rest(site, "/api/v1/fleet/ett", **rng)
    failures = _rest(site, "/api/v1/fleet/failures", **rng)
    _open(browser, site + "/", 6)
    assert pct_matches(browser.text("#fleet-ett"), ett["total"]["ett_pct"])
    assert browser.text("#fleet-jobs") == f"{failures['total']['jobs']:,}"
    assert browser.text("#fleet-failures") == f"{failures['total']['failures']:,}"
    job = _rest(site, "/api/v1/jobs/model-b-baseline/ett")
    _open(browser, site + "/job?job_id=model-b-baseline", 3)
    assert pct_matches(browser.text("#job-ett"), job["ett_pct"])
    assert browser.text("#job-nof") == str(job["l1"]["nof"])
    assert browser.text("#job-tts") == f"{job['l1']['tts_s'] / 60.0:.1f} min"


def test_fleet_to_model_to_job_by_clicking(site: str, browser: Browser) -> None:
    browser.console()
    _open(browser, site + "/", 6)
    _click_bar(browser, "fleet-top-models-graph")  # the top bar: the model losing most
    url = browser.wait_for_url("/model?")
    model = parse_qs(urlsplit(url).query)["model"][0]
    assert browser.wait_for_text("#model-name", model)
    browser.wait_for_graphs(3)
    _click_bar(browser, "model-l2-graph", 0)
    url = browser.wait_for_url("/job?")
    job_id = parse_qs(urlsplit(url).query)["job_id"][0]
    browser.wait_for_text("#job-id", job_id)
    job = _rest(site, f"/api/v1/jobs/{job_id}/ett")
    assert job["model"] == model
    browser.wait_for_pct("#job-ett", job["ett_pct"])
    assert browser.severe() == []


def test_filters_live_in_the_url(site: str, browser: Browser) -> None:
    rng = _default_range()
    only_a = _rest(site, "/api/v1/fleet/ett", model="model-a", **rng)
    _open(browser, site + "/?model=model-a", 6)
    assert pct_matches(browser.text("#fleet-ett"), only_a["total"]["ett_pct"])
    label = browser.wait_for("#fleet-filter-label")
    label.send_keys("variant=baseline\n")
    url = browser.wait_for_url("label=variant")
    query = parse_qs(urlsplit(url).query)
    assert query["model"] == ["model-a"] and query["label"] == ["variant=baseline"]
    baseline = _rest(site, "/api/v1/fleet/ett", model="model-a", label="variant=baseline", **rng)
    browser.wait_for_pct("#fleet-ett", baseline["total"]["ett_pct"])
    assert "label=variant" in browser.wait_for("#shell-nav-models").get_attribute("href")
    # The same link in a fresh load reproduces the view.
    _open(browser, url, 6)
    assert pct_matches(browser.text("#fleet-ett"), baseline["total"]["ett_pct"])
    assert browser.severe() == []


def test_owner_bar_to_owner_page_back_to_fleet_then_models(site: str, browser: Browser) -> None:
    browser.console()
    _open(browser, site + "/", 6)
    _click_bar(browser, "fleet-lost-owner-graph", 0)
    url = browser.wait_for_url("/owners?")
    owner = parse_qs(urlsplit(url).query)["owner"][0]
    browser.wait_for_text(".ett-main h1", f"Owner {owner}")
    held = {row.split()[0] for row in browser.text("#owners-components-table").splitlines()[1:]}
    assert owner in held
    # The component owner is the owners page's own filter: the nav does not carry it.
    assert "owner=" not in browser.wait_for("#shell-nav-fleet").get_attribute("href")
    browser.click("#shell-nav-fleet")
    browser.wait_for_url(site + "/?")
    browser.wait_for_graphs(6)
    assert browser.text("#fleet-ett").endswith("%")
    assert not browser.find_all("#fleet-empty")
    browser.click("#shell-nav-models")
    browser.wait_for_url("/model")
    assert "model-a" in browser.text("#model-list-table")
    assert not browser.find_all("#model-empty")
    # An old owner= link on the models page reads as the team filter and says no model matches.
    _open(browser, site + f"/model?owner={owner}", 0)
    assert browser.text("#model-empty h3") == "No model matches these filters"
    assert browser.severe() == []


REDOC_LOGO = "https://cdn.redoc.ly/redoc/logo-mini.svg"


def _outside(site: str, urls: list[str]) -> list[str]:
    # Only network requests count: not data:, blob: or Chromium's own chrome:// resources.
    network = [u for u in urls if u.startswith(("http://", "https://", "ws://", "wss://"))]
    return [u for u in network if not u.startswith(site)]


def test_api_docs_render_with_every_outside_request_blocked(site: str) -> None:
    offline = Browser(offline=True)
    try:
        paths = _rest(site, "/openapi.json")["paths"]
        offline.requested_urls()
        offline.get(site + "/docs")
        offline.wait_for("#swagger-ui .opblock-summary-path")
        drawn = {e.text.replace("\u200b", "") for e in offline.find_all(".opblock-summary-path")}
        assert "/api/v1/events" in drawn and len(drawn) >= len(paths) // 2
        asked = offline.requested_urls()
        assert asked and _outside(site, asked) == [], asked
        offline.get(site + "/redoc")
        offline.wait_for_text("redoc", "POST")
        # ReDoc's footer ("API docs by Redocly") links its logo from its CDN; it alone fails.
        assert _outside(site, offline.requested_urls()) in ([], [REDOC_LOGO])
        assert [e for e in offline.severe() if REDOC_LOGO not in e["message"]] == []
    finally:
        offline.close()


def test_a_job_found_by_search_opens_its_page(site: str, browser: Browser) -> None:
    every = _rest(site, "/api/v1/jobs", limit=1000, sort="submitted_at")
    oldest = every["jobs"][0]["job_id"]  # the last of the recent view: on its last page
    browser.console()
    _open(browser, site + "/job", 0)
    assert "newest first" in browser.text(".ett-main")
    search = browser.wait_for("#job-search")
    search.send_keys("no-such-job-\n")
    browser.wait_for_url("q=no-such-job-")
    assert browser.text("#job-empty h3") == "No job matches search 'no-such-job-'"
    _open(browser, site + "/job", 0)  # a fresh list, as a reader starting over
    browser.wait_for("#job-list-table")
    search = browser.wait_for("#job-search")
    search.send_keys(oldest + "\n")
    browser.wait_for_url(f"q={oldest}")
    browser.wait_for_text("#job-list-table", oldest)
    links = [a for a in browser.find_all("#job-list-table a") if a.text == oldest]
    assert links, browser.text("#job-list-table")
    links[0].click()
    browser.wait_for_url(f"job_id={oldest}")
    browser.wait_for_text("#job-id", oldest)
    browser.wait_for_graphs(1)
    assert browser.severe() == []


def _pick(browser: Browser, dropdown_id: str, text: str) -> None:
    from selenium.webdriver.common.action_chains import ActionChains

    # Dash 4's dropdown: a click opens a popover whose search box has the focus.
    from selenium.webdriver.common.keys import Keys

    browser.click_at(browser.wait_for(f"#{dropdown_id}"))
    ActionChains(browser.driver).send_keys(text).perform()
    # Each keystroke is a server-side search; on a loaded machine an earlier keystroke's answer
    # can arrive last and replace the options, or a keystroke can land before the search box has
    # the focus. Clearing the box and typing the whole text again asks again, as a user would.
    for retry in range(4):
        try:
            browser.wait_for_text(".dash-dropdown-content .dash-dropdown-options", text, 10)
            break
        except AssertionError:
            if retry == 3:
                raise
            ActionChains(browser.driver).send_keys(Keys.BACKSPACE * (len(text) + 4)).perform()
            ActionChains(browser.driver).send_keys(text).perform()
    option = next(
        o
        for o in browser.find_all(".dash-dropdown-content .dash-dropdown-option")
        if o.text == text
    )
    option.click()
    browser.wait_for_text(f"#{dropdown_id}", text)


def test_compare_picker_opens_the_chosen_pair(site: str, browser: Browser) -> None:
    browser.console()
    _open(browser, site + "/compare", 2)
    _pick(browser, "compare-pick-baseline", "model-c-baseline")
    _pick(browser, "compare-pick-optimized", "model-c-optimized")
    browser.click("#compare-pick-go")
    url = browser.wait_for_url("optimized=model-c-optimized")
    assert "baseline=model-c-baseline" in url
    browser.wait_for_text("#compare-title", "model-c-baseline (baseline) vs model-c-optimized")
    assert "PT2 compile" in browser.text("#compare-l2-table")
    assert not browser.find_all("#compare-filter-model")[0].is_displayed()
    assert browser.severe() == []


def test_the_modebar_shows_only_while_the_chart_is_hovered(site: str, browser: Browser) -> None:
    """Charts stay uncluttered: the plotly toolbar appears on hover, as on a desktop."""
    _open(browser, site + "/", 3)
    opacity = "return getComputedStyle(document.querySelector('#{} .modebar-group')).opacity"
    assert browser.driver.execute_script(opacity.format("fleet-trend-graph")) == "0"
    ActionChains(browser.driver).move_to_element(
        browser.wait_for("#fleet-trend-graph .main-svg")
    ).perform()
    WebDriverWait(browser.driver, 5).until(
        lambda d: d.execute_script(opacity.format("fleet-trend-graph")) == "1"
    )
    # Its neighbour, not hovered, keeps its toolbar hidden.
    assert browser.driver.execute_script(opacity.format("fleet-lost-component-graph")) == "0"
