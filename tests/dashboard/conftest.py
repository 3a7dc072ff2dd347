"""A small demo fleet loaded through the real ingest path, for the page and browser tests."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from backend.config import Settings
from backend.db import Database
from dashboard.app import get_dash_app
from dashboard.context import ENVIRON_KEY, DashboardContext
from tests.conftest import DIALECTS, database_at


def pct_matches(shown: str, rest_pct: float) -> bool:
    """A page's one-decimal ETT% shows the REST answer, itself rounded to 2 decimals (docs/API.md):
    the two roundings of one value can differ by up to 0.05 + 0.005."""
    return shown.endswith("%") and abs(float(shown[:-1]) - rest_pct) <= 0.05 + 5e-3


@pytest.fixture(autouse=True)
def _no_remembered_reads() -> None:
    """Each test reads its own database afresh (the pages' reads live cache.TTL_S seconds)."""
    from dashboard import cache

    cache.clear()


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    """One headless Chromium for the module."""
    from tests.dashboard.browser import Browser

    b = Browser()
    yield b
    b.close()


# Six benchmark pairs plus a couple of fleet models over a week: enough for every chart.
DEMO_MODELS = 2
DEMO_DAYS = 7.0


def seed_demo(database: Database, settings: Settings, *, now: float | None = None) -> float:
    """Load the demo fleet (ingest, then the ETT recompute); returns its 'now'."""
    from backend.demo import fleet, loader

    now = now or time.time()
    spec = fleet.FleetSpec(seed=7, models=DEMO_MODELS, days=DEMO_DAYS, now=now)
    report = loader.load_in_process(
        database, settings, fleet.fleet_events(spec), now=now, progress=False
    )
    assert report.accepted > 0 and not report.rejected
    loader.store_annotations(database, fleet.fleet_annotations(spec))
    loader.backfill_slo_history(database, settings, spec.start, now)
    return now


@pytest.fixture(scope="module", params=DIALECTS)
def demo_once(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Database, Settings]]:
    """The demo fleet loaded once per module and dialect, in a database of the module's own.

    Tests that only read take it as `demo_db`, `seeded` (its settings) and `api`: the fleet is
    seeded once instead of once a test. A test that writes seeds a database of its own.
    """
    home = tmp_path_factory.mktemp("demo-once")
    with database_at(request.param, home, "head") as url:
        database = Database(url)
        settings = Settings(home=home, database_url=url, recompute_mode="inline")
        try:
            seed_demo(database, settings)
            yield database, settings
        finally:
            database.dispose()


@pytest.fixture
def demo_db(demo_once: tuple[Database, Settings]) -> Database:
    """The module's demo fleet database (read only)."""
    return demo_once[0]


@pytest.fixture
def seeded(demo_once: tuple[Database, Settings]) -> Settings:
    """Settings on the module's demo fleet database (read only)."""
    return demo_once[1]


@pytest.fixture
def api(seeded: Settings, demo_db: Database) -> Iterator[Any]:
    """A REST client over the module's demo fleet."""
    from fastapi.testclient import TestClient

    from backend.app import create_app

    app = create_app(seeded, database=demo_db, start_workers=False, with_dashboard=False)
    with TestClient(app) as c:
        yield c


@contextmanager
def dashboard_request(settings: Settings, database: Database) -> Iterator[Any]:
    """A Flask request context bound to `database`, to call page layouts directly."""
    server = get_dash_app().server
    ctx = DashboardContext(settings=settings, database=database)
    with server.test_request_context("/", environ_overrides={ENVIRON_KEY: ctx}):
        yield server


def find(component: Any, element_id: str) -> Any:
    """The component with this id inside a Dash component tree, or None."""
    if getattr(component, "id", None) == element_id:
        return component
    children = getattr(component, "children", None)
    if children is None:
        return None
    for child in children if isinstance(children, list | tuple) else [children]:
        if hasattr(child, "to_plotly_json"):
            hit = find(child, element_id)
            if hit is not None:
                return hit
    return None


def ids(component: Any) -> set[str]:
    """Every id inside a component tree."""
    out: set[str] = set()
    if isinstance(getattr(component, "id", None), str):
        out.add(component.id)
    children = getattr(component, "children", None)
    for child in children if isinstance(children, list | tuple) else [children]:
        if hasattr(child, "to_plotly_json"):
            out |= ids(child)
    return out


def whole(module: Any, /, **query: Any) -> Any:
    """A page's layout with its part below the first screen filled in, as the browser gets it.

    The layout holds a deferred block (`<PREFIX>-deferred-query`) that a second callback fills
    with `module.below(query)`; this calls it the same way.
    """
    from dash import html

    top = module.layout(**query)
    store = find(top, f"{module.PREFIX}-deferred-query")
    if store is None:
        return top
    return html.Div([top, *module.below(store.data)])
