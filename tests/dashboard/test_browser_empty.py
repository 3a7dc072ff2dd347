"""Every page in headless Chromium on an empty database: it draws, says what to do, no errors."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from dashboard.components import NO_DATA_HINT
from dashboard.pages.compare import HOW_TO
from tests.dashboard.browser import Browser, browser_available, sqlite_site

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(not browser_available(), reason="needs chromium and chromedriver"),
]

# Path -> what the page must say on an empty database.
PAGES = {
    "/": NO_DATA_HINT,
    "/model": NO_DATA_HINT,
    "/model?model=nope": NO_DATA_HINT,
    "/job": NO_DATA_HINT,
    "/job?job_id=nope": NO_DATA_HINT,
    "/owners": NO_DATA_HINT,
    "/compare": HOW_TO,
    "/plan": NO_DATA_HINT,
}


@pytest.fixture(scope="module")
def empty_site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The app over a migrated SQLite database with nothing in it, under uvicorn."""
    with sqlite_site(tmp_path_factory.mktemp("empty")) as base:
        yield base


@pytest.mark.parametrize("path", list(PAGES))
def test_each_page_on_an_empty_database_says_what_to_do(
    empty_site: str, browser: Browser, path: str
) -> None:
    """The page's own empty state, with the hint, and a clean console."""
    browser.console()
    browser.get(empty_site + path)
    browser.wait_for(".ett-main h1")
    browser.wait_for(".ett-empty")
    assert PAGES[path] in browser.text(".ett-main")
    assert "Traceback" not in browser.text(".ett-main")
    assert browser.severe() == [], path
