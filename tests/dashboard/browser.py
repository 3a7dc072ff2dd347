"""A headless Chromium driven by selenium, and a uvicorn server in a thread, for browser tests.

dash[testing] is not installable here, so this is the small part of `dash_duo` we need:
wait for elements, read their text, click, take screenshots and read the console log.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import socket
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import uvicorn
from selenium import webdriver
from selenium.common.exceptions import TimeoutException
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.action_chains import ActionChains
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webelement import WebElement
from selenium.webdriver.support import expected_conditions as EC
from selenium.webdriver.support.ui import WebDriverWait

from tests.dashboard.conftest import pct_matches

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"


def browser_available() -> bool:
    """True when Chromium and chromedriver are installed."""
    return Path(CHROMIUM).exists() and Path(CHROMEDRIVER).exists()


def free_port() -> int:
    """A free TCP port on 127.0.0.1."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def sqlite_site(home: Path, seed: Callable[[Any, Any], Any] | None = None) -> Iterator[str]:
    """The app (API and dashboard on one port) over a new SQLite database in `home`, after
    `seed(database, settings)`, served by uvicorn; its base URL."""
    from backend import migrate
    from backend.app import create_app
    from backend.config import Settings
    from backend.db import Database

    url = f"sqlite:///{home / 'ett.db'}"
    migrate.upgrade(url)
    database = Database(url)
    settings = Settings(home=home, database_url=url, recompute_mode="inline")
    try:
        if seed is not None:
            seed(database, settings)
        with serve(create_app(settings, database=database, start_workers=False)) as base:
            yield base
    finally:
        database.dispose()


@contextlib.contextmanager
def serve(app: Any) -> Iterator[str]:
    """Run `app` under uvicorn on 127.0.0.1 in a thread; yield its base URL; stop it after."""
    port = free_port()
    server = uvicorn.Server(
        uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="on")
    )
    thread = threading.Thread(target=server.run, name="ett-test-server", daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("test server did not start")
        time.sleep(0.05)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=15)


class Browser:
    """One headless Chromium session with helpers that wait for the page."""

    def __init__(
        self,
        width: int = 1440,
        height: int = 1000,
        timeout: float = 20.0,
        *,
        offline: bool = False,
    ) -> None:
        self.profile = tempfile.mkdtemp(prefix="ett-chromium-")
        opts = webdriver.ChromeOptions()
        opts.binary_location = CHROMIUM
        if offline:
            # Every host name but loopback resolves to nothing: as on a cluster without internet.
            opts.add_argument("--host-resolver-rules=MAP * ~NOTFOUND , EXCLUDE 127.0.0.1")
        for flag in (
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-background-networking",
            "--disable-dev-shm-usage",
            f"--user-data-dir={self.profile}",
            f"--window-size={width},{height}",
            # Headless Chromium reports no pointer that can hover, and plotly then shows every
            # modebar all the time; the dashboard is drawn for a desktop with a mouse.
            "--blink-settings=primaryHoverType=2,availableHoverTypes=2,"
            "primaryPointerType=4,availablePointerTypes=4",
        ):
            opts.add_argument(flag)
        opts.set_capability("goog:loggingPrefs", {"browser": "ALL", "performance": "ALL"})
        self.driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=opts)
        self.timeout = timeout

    def get(self, url: str) -> None:
        """Open a URL."""
        self.driver.get(url)

    def wait_for(self, css: str, timeout: float | None = None) -> WebElement:
        """The first element matching `css`, once it is visible."""
        try:
            return WebDriverWait(self.driver, timeout or self.timeout).until(
                EC.visibility_of_element_located((By.CSS_SELECTOR, css))
            )
        except TimeoutException as err:
            raise AssertionError(f"no visible {css!r} on {self.driver.current_url}") from err

    def wait_for_text(self, css: str, text: str, timeout: float | None = None) -> WebElement:
        """The element matching `css`, once its text contains `text`."""
        try:
            WebDriverWait(self.driver, timeout or self.timeout).until(
                EC.text_to_be_present_in_element((By.CSS_SELECTOR, css), text)
            )
        except TimeoutException as err:
            got = self.find_all(css)
            raise AssertionError(
                f"{css!r} never showed {text!r} (shows {[e.text for e in got]!r})"
            ) from err
        return self.driver.find_element(By.CSS_SELECTOR, css)

    def wait_for_pct(self, css: str, rest_pct: float, timeout: float | None = None) -> WebElement:
        """The element matching `css`, once it shows the REST answer's ETT% (`pct_matches`)."""
        try:
            WebDriverWait(self.driver, timeout or self.timeout).until(
                lambda d: pct_matches(d.find_element(By.CSS_SELECTOR, css).text, rest_pct)
            )
        except TimeoutException as err:
            got = self.find_all(css)
            raise AssertionError(
                f"{css!r} never showed {rest_pct}% to one decimal (shows {[e.text for e in got]!r})"
            ) from err
        return self.driver.find_element(By.CSS_SELECTOR, css)

    def wait_for_url(self, part: str, timeout: float | None = None) -> str:
        """The current URL, once it contains `part`."""
        try:
            WebDriverWait(self.driver, timeout or self.timeout).until(EC.url_contains(part))
        except TimeoutException as err:
            raise AssertionError(
                f"URL never contained {part!r}: {self.driver.current_url}"
            ) from err
        return self.driver.current_url

    def wait_for_graphs(self, count: int, timeout: float | None = None) -> None:
        """Wait until at least `count` plotly charts have drawn their SVG."""
        try:
            WebDriverWait(self.driver, timeout or self.timeout).until(
                lambda d: (
                    len(d.find_elements(By.CSS_SELECTOR, ".js-plotly-plot .main-svg")) >= count
                )
            )
        except TimeoutException as err:
            drawn = len(self.find_all(".js-plotly-plot .main-svg"))
            raise AssertionError(f"{drawn} charts drawn, wanted {count}") from err

    def find_all(self, css: str) -> list[WebElement]:
        """Every element matching `css` (no wait)."""
        return self.driver.find_elements(By.CSS_SELECTOR, css)

    def text(self, css: str) -> str:
        """The visible text of the first element matching `css`."""
        return self.wait_for(css).text

    def click(self, css: str) -> None:
        """Click the first element matching `css`."""
        self.wait_for(css).click()

    def click_at(self, element: WebElement) -> None:
        """A real mouse click at the element's centre, whatever lies on top of it.

        Plotly listens on a transparent drag layer above its bars, so a bar is clicked
        by clicking where it is drawn.
        """
        ActionChains(self.driver).move_to_element(element).click().perform()

    def console(self) -> list[dict[str, Any]]:
        """Browser console entries since the last call."""
        return list(self.driver.get_log("browser"))

    def requested_urls(self) -> list[str]:
        """Every URL the page asked the network for since the last call (DevTools log)."""
        urls = []
        for entry in self.driver.get_log("performance"):
            message = json.loads(entry["message"])["message"]
            if message.get("method") == "Network.requestWillBeSent":
                urls.append(message["params"]["request"]["url"])
        return urls

    def severe(self) -> list[dict[str, Any]]:
        """Console entries of level SEVERE since the last call."""
        return [e for e in self.console() if e.get("level") == "SEVERE"]

    def screenshot(self, path: Path, full_page: bool = True) -> None:
        """A PNG of the page (the whole scroll height when `full_page`)."""
        if full_page:
            height = self.driver.execute_script("return document.body.scrollHeight")
            width = self.driver.get_window_size()["width"]
            self.driver.set_window_size(width, max(int(height) + 120, 800))
            time.sleep(0.3)
        self.driver.save_screenshot(str(path))

    def close(self) -> None:
        """Quit Chromium and remove its profile."""
        with contextlib.suppress(Exception):
            self.driver.quit()
        shutil.rmtree(self.profile, ignore_errors=True)
