"""One default window: the model page, the Plan page and the planner REST default read the same
MODEL_WINDOW_DAYS, so they show one ETT% and one tau* for a model, each naming window and jobs."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from typing import Any

from fastapi.testclient import TestClient

from backend.app import create_app
from backend.config import Settings
from backend.db import Database
from backend.demo import fleet, loader
from backend.params import MODEL_WINDOW_DAYS
from dashboard.pages import models, plan
from tests.dashboard.conftest import dashboard_request, find

DAYS = 60.0


def _text(tree: Any, element_id: str) -> str:
    node = find(tree, element_id)
    assert node is not None, f"no #{element_id} on the page"
    return str(node.children)


def test_model_and_plan_pages_share_one_named_window(database: Database, settings: Settings):
    now = time.time()
    spec = fleet.FleetSpec(seed=7, models=4, days=DAYS, now=now, benchmarks=False)
    loader.load_in_process(database, settings, fleet.fleet_events(spec), now=now, progress=False)
    app = create_app(settings, database=database, start_workers=False, with_dashboard=False)
    today = datetime.now(UTC).date()
    start = today - timedelta(days=MODEL_WINDOW_DAYS - 1)
    window = {
        "start": f"{start.isoformat()}T00:00:00Z",
        "end": f"{(today + timedelta(days=1)).isoformat()}T00:00:00Z",
    }
    with TestClient(app) as api:
        names = [m["model"] for m in api.get("/api/v1/models").json()["models"]]
        counts = {
            m: api.get(f"/api/v1/models/{m}", params=window).json()["job_count"] for m in names
        }
        older = {
            m: api.get(
                f"/api/v1/models/{m}", params={**window, "start": f"{spec_start(now)}T00:00:00Z"}
            ).json()["job_count"]
            for m in names
        }
        # A model with jobs before the window too: a wider default would count more of them.
        model = max(names, key=lambda m: (older[m] > counts[m], counts[m]))
        assert older[model] > counts[model] > 0
        # The planner's REST default is the same window (ending now).
        fit = api.get(f"/api/v1/plan/models/{model}").json()["fit"]
        assert (
            abs(
                (datetime.fromisoformat(fit["end"]) - datetime.fromisoformat(fit["start"])).days
                - MODEL_WINDOW_DAYS
            )
            <= 1
        )
    with dashboard_request(settings, database):
        model_page = models.layout(model=model)
        plan_page = plan.layout(model=model)
    scope = f"last {MODEL_WINDOW_DAYS} d · {counts[model]:,} jobs"
    assert _text(model_page, "model-ett") == _text(plan_page, "plan-measured-ett")
    assert _text(model_page, "model-ett").endswith("%")
    assert _text(model_page, "model-tau") == _text(plan_page, "plan-tau")
    assert _text(model_page, "model-tau").endswith(" min")
    assert _text(model_page, "model-ett-scope") == scope
    assert _text(plan_page, "plan-measured-ett-scope") == scope
    assert _text(model_page, "model-tau-scope").startswith(f"last {MODEL_WINDOW_DAYS} d · ")
    assert _text(model_page, "model-tau-scope") == _text(plan_page, "plan-tau-scope")
    assert _text(plan_page, "plan-predicted-scope").startswith(
        f"fit: last {MODEL_WINDOW_DAYS} d · "
    )
    assert _text(plan_page, "plan-predicted-scope").endswith(" finished jobs")


def spec_start(now: float) -> str:
    """The first day of the demo fleet, as a date."""
    return datetime.fromtimestamp(now - DAYS * 86400, UTC).date().isoformat()
