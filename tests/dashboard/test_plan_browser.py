"""The Plan page in headless Chromium on a demo-like fleet: the ranking equals REST, the model
panel shows its inputs and warnings, the what-if inputs recompute, the model page links here."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest

from backend.config import Settings
from backend.db import Database
from backend.demo import fleet, loader
from backend.planner.model import Change, what_if
from backend.planner.service import inputs_from_dict
from tests.dashboard.browser import Browser, browser_available, sqlite_site

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(not browser_available(), reason="needs chromium and chromedriver"),
]
SCREENSHOT = Path(__file__).resolve().parents[2] / "docs" / "screenshots" / "plan.png"
DAYS = 45.0


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The app over SQLite seeded with 5 fleet models and the 6 benchmark pairs over 45 days."""

    def seed(database: Database, settings: Settings) -> None:
        now = time.time()
        spec = fleet.FleetSpec(seed=7, models=5, days=DAYS, now=now)
        report = loader.load_in_process(
            database, settings, fleet.fleet_events(spec), now=now, progress=False
        )
        assert report.accepted > 0 and not report.rejected

    with sqlite_site(tmp_path_factory.mktemp("plan-browser"), seed) as base:
        yield base


def _range() -> dict[str, str]:
    end = datetime.now(UTC).date()
    start = end - timedelta(days=DAYS + 1)
    return {"start": start.isoformat(), "end": end.isoformat()}


def _rest_range() -> dict[str, str]:
    r = _range()
    end = datetime.fromisoformat(r["end"]) + timedelta(days=1)
    return {"start": f"{r['start']}T00:00:00Z", "end": f"{end.date()}T00:00:00Z"}


def _rest(site: str, path: str, **params: Any) -> Any:
    answer = httpx.get(site + path, params=params, timeout=60)
    answer.raise_for_status()
    return answer.json()


def _query() -> str:
    r = _range()
    return f"start={r['start']}&end={r['end']}"


def test_fleet_ranking_equals_rest(site: str, browser: Browser) -> None:
    browser.console()
    plan = _rest(site, "/api/v1/plan/fleet", **_rest_range())
    top = plan["opportunities"][0]
    browser.get(f"{site}/plan?{_query()}")
    browser.wait_for("#plan-opportunities-table")
    browser.wait_for_graphs(1)
    assert browser.text("#plan-fleet-ett") == f"{plan['predicted_ett_pct']:.1f}%"
    assert browser.text("#plan-top-freed") == f"{top['gpu_h_per_day_freed']:,.1f} GPU-h/day"
    first_row = browser.find_all("#plan-opportunities-table tbody tr")[1].text
    assert top["title"] in first_row and top["owner"] in first_row
    assert f"{top['gpu_h_per_day_freed']:,.1f}" in first_row
    # Benchmark models have two jobs each: their rows say the fit rests on too few.
    assert "rests on 2 job(s)" in browser.text("#plan-models-table")
    assert browser.severe() == []


def test_model_panel_inputs_warnings_and_what_if(
    site: str, browser: Browser, tmp_path: Path
) -> None:
    model = fleet.fleet_profile(7, 0).name
    plan = _rest(site, f"/api/v1/plan/models/{model}", **_rest_range())
    # The model page links to its plan.
    browser.get(f"{site}/model?model={model}&{_query()}")
    browser.click("#model-plan-link")
    url = browser.wait_for_url("/plan?")
    assert parse_qs(urlsplit(url).query)["model"] == [model]
    browser.wait_for("#plan-predicted")
    assert browser.text("#plan-predicted") == f"{plan['prediction']['ett_pct']:.1f}%"
    assert browser.text("#plan-measured-ett") == f"{plan['prediction']['measured_ett_pct']:.1f}%"
    inputs_text = browser.text("#plan-inputs-table")
    assert "CSBT per save" in inputs_text and "cold start C per job" in inputs_text
    assert f"{plan['fit']['jobs']} (" in inputs_text
    warnings = plan["fit"]["warnings"]
    if warnings:
        assert warnings[0] in browser.text("#plan-fit-warnings")
    # No change yet: the what-if equals the prediction.
    browser.wait_for_text("#plan-whatif-ett", f"{plan['prediction']['ett_pct']:.1f}%")
    # Async checkpointing on: the page's numbers equal the model's on the same inputs.
    browser.click("#plan-async input")
    expected = what_if(inputs_from_dict(plan["inputs"]), Change(csbt_scale=0.23))
    browser.wait_for_text("#plan-whatif-ett", f"{expected.after.ett_pct:.1f}%")
    assert browser.text("#plan-whatif-freed") == f"{expected.gpu_h_per_day_freed:,.1f}"
    assert expected.gpu_h_per_day_freed > 0
    # ETT_SCREENSHOTS=1 refreshes docs/screenshots; otherwise they go to a temporary folder.
    shot = SCREENSHOT if os.environ.get("ETT_SCREENSHOTS") == "1" else tmp_path / "plan.png"
    browser.get(f"{site}/plan?{_query()}")
    browser.wait_for_graphs(1)
    browser.screenshot(shot)
    browser.get(f"{site}/plan?model={model}&{_query()}")
    browser.wait_for_graphs(1)
    browser.wait_for("#plan-whatif-ett")
    browser.screenshot(shot.with_name("plan-model.png"))
    assert shot.stat().st_size > 10_000
    assert browser.severe() == []
