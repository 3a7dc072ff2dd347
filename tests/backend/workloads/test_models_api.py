"""GET /api/v1/models and /models/{model} (hand-computed from fleet_jobs, both databases)."""

from __future__ import annotations

import functools
from typing import Any

import pytest

from tests.backend.fleet.fleet_jobs import DAY, job_a, job_b

# Answers are rounded by unit (docs/API.md): pct 2 decimals, gpu_h and s 3.
_approx = functools.partial(pytest.approx, abs=5e-3)

# The window is 2026-04-25..27 (D0, D0+1); the window before it, 2026-04-23..25.
WINDOW = {"start": "2026-04-25T00:00:00Z", "end": "2026-04-27T00:00:00Z"}


@pytest.fixture
def fleet(post: Any) -> None:
    """job-a and job-b, plus a later copy of job-b (job-b2) one day later."""
    post(job_a().events)
    post(job_b().events)
    later = job_b()
    for ev in later.events:
        ev["job_id"] = "job-b2"
        ev["event_id"] = "b2-" + ev["event_id"]
        for k in ("ts", "start", "end"):
            if k in ev:
                ev[k] += DAY
    post(later.events)


def test_list_models(client: Any, fleet: None) -> None:
    body = client.get("/api/v1/models", params=WINDOW).json()
    assert body["total"] == 2
    rows = {m["model"]: m for m in body["models"]}
    a, b = rows["m-a"], rows["m-b"]
    assert [m["model"] for m in body["models"]] == ["m-b", "m-a"]  # most GPU-hours lost first
    # m-a in the window: its D0 part only (6300 s wall, 5900 effective, 8 GPUs)
    assert a["ett_pct"] == _approx(5900 / 6300 * 100)
    assert a["previous_ett_pct"] == _approx(1200 / 3600 * 100)
    # The window before holds one job (job-a's first day): no trend, and the reason.
    assert a["trend_pp"] is None and a["previous_jobs"] == 1
    assert a["trend_reason"] == "the range before holds 1 job (a trend needs 3)"
    assert a["lost_gpu_h"] == _approx(400 * 8 / 3600)
    assert a["owner"] == "ranking" and a["jobs"] == 0  # submitted the day before
    assert a["top_lost_component"] == "shutdown"
    assert b["jobs"] == 2 and b["ett_pct"] == _approx(1500 / 2700 * 100)
    assert b["lost_gpu_h"] == _approx(2 * 1200 * 2 / 3600)
    assert b["trend_pp"] is None  # no GPU-time in the window before
    assert b["trend_reason"] == "no GPU-time in the range before"

    by_ett = client.get("/api/v1/models", params={**WINDOW, "sort": "ett_pct", "order": "asc"})
    assert [m["model"] for m in by_ett.json()["models"]] == ["m-b", "m-a"]
    q = client.get("/api/v1/models", params={**WINDOW, "q": "-a"}).json()
    assert [m["model"] for m in q["models"]] == ["m-a"]
    page = client.get("/api/v1/models", params={**WINDOW, "limit": 1, "offset": 1}).json()
    assert page["total"] == 2 and [m["model"] for m in page["models"]] == ["m-a"]
    csv_text = client.get("/api/v1/models", params={**WINDOW, "format": "csv"}).text
    assert csv_text.splitlines()[0].startswith("model,team,tier,jobs,ett_pct")
    assert client.get("/api/v1/models", params={"sort": "colour"}).status_code == 422
    assert client.get("/api/v1/models", params={"limit": 0}).status_code == 422


def test_model_page(client: Any, fleet: None) -> None:
    r = client.get("/api/v1/models/m-b", params=WINDOW)
    assert r.status_code == 200, r.text
    page = r.json()
    assert page["owner"] == "ads"
    assert page["ett_pct"] == _approx(1500 / 2700 * 100)
    assert [p["ett_pct"] for p in page["series"]] == _approx([1500 / 2700 * 100] * 2)
    assert page["components_gpu_h"]["wasted_training"] == _approx(2 * 500 * 2 / 3600)
    assert {r["owner"]: r["gpu_h"] for r in page["lost_by_owner"]} == _approx(
        {"checkpoint": 2 * 1000 / 3600, "trainer": 2 * 800 / 3600, "scheduler": 2 * 600 / 3600}
    )
    assert page["nof_by_kind"]["preemption"] == 2
    assert page["job_count"] == 2
    assert [j["job_id"] for j in page["jobs"]] == ["job-b2", "job-b"]
    job = page["jobs"][1]
    assert job["tts_s"] == 200 and job["recovery_s"] == 1000 and job["nof"] == 1
    assert job["submitted_at"] == "2026-04-25T00:16:40.000Z"
    r = client.get("/api/v1/models/nope")
    assert r.status_code == 404 and "nope" in r.json()["detail"]
    assert client.get("/api/v1/models/m-b", params={"bucket": "year"}).status_code == 422


def _shifted(job: Any, job_id: str, by: float, model: str | None = None) -> list[dict[str, Any]]:
    """The job's events under another id, `by` seconds later, of `model` if given."""
    events = []
    for ev in job.events:
        ev = {**ev, "job_id": job_id, "event_id": f"{job_id}-{ev['event_id']}"}
        for k in ("ts", "start", "end", "blocking_end"):
            if k in ev:
                ev[k] += by
        if model and ev["type"] == "job_submitted":
            ev["model"] = model
        events.append(ev)
    return events


def test_trend_needs_three_jobs_before(client: Any, fleet: None, post: Any) -> None:
    """m-b gets three earlier jobs (job-a's timeline, a day earlier: 7100/9900 effective, 8
    GPUs, inside the window before): its trend is a number; m-a (one earlier job) stays null."""
    for i in range(3):
        r = post(_shifted(job_a(), f"early-{i}", -DAY, model="m-b"))
        assert r.status_code == 200, r.text
    rows = {m["model"]: m for m in client.get("/api/v1/models", params=WINDOW).json()["models"]}
    b = rows["m-b"]
    assert b["previous_jobs"] == 3 and b["trend_reason"] is None
    assert b["previous_ett_pct"] == _approx(7100 / 9900 * 100)
    assert b["trend_pp"] == _approx(1500 / 2700 * 100 - 7100 / 9900 * 100)
    assert rows["m-a"]["trend_pp"] is None and rows["m-a"]["previous_jobs"] == 1
    page = client.get("/api/v1/models/m-b", params=WINDOW).json()
    assert page["trend_pp"] == _approx(b["trend_pp"]) and page["previous_jobs"] == 3
    page_a = client.get("/api/v1/models/m-a", params=WINDOW).json()
    assert page_a["trend_pp"] is None and "1 job" in page_a["trend_reason"]
    # Sorting by trend puts the models without one last.
    by_trend = client.get("/api/v1/models", params={**WINDOW, "sort": "trend_pp"}).json()
    assert [m["model"] for m in by_trend["models"]] == ["m-b", "m-a"]
