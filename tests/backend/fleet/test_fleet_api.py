"""Fleet REST over jobs sent through ingest (inline recompute), on SQLite and Postgres.

Jobs (tests/backend/fleet/fleet_jobs.py): job-a (m-a, 8 GPUs) spans D0-1 and D0; job-b (m-b,
2 GPUs) lies in D0. GPU-seconds on D0: wall 6300*8 + 2700*2 = 55800, effective
5900*8 + 1500*2 = 50200. On D0-1: wall 3600*8 = 28800, effective 1200*8 = 9600.
"""

from __future__ import annotations

import csv
import io
import time
from typing import Any

import pytest
from sqlalchemy import func, select

from backend.fleet.models import FleetDayRollup
from tests.backend.fleet.fleet_jobs import D0, DAY, job_a, job_b
from tests.conftest import post_events

RANGE = {"start": "2026-04-24T00:00:00Z", "end": "2026-04-26T00:00:00Z"}


@pytest.fixture
def fleet(post: Any) -> None:
    """Both jobs ingested and computed."""
    for job in (job_a(), job_b()):
        r = post(job.events)
        assert r.status_code == 200 and r.json()["accepted"] == len(job.events), r.text


def approx(x: float) -> Any:
    """Equal to 1e-9 relative."""
    return pytest.approx(x, rel=1e-9, abs=5e-3)  # answers are rounded (docs/API.md)


def test_daily_series_splits_at_midnight(client: Any, fleet: None) -> None:
    body = client.get("/api/v1/fleet/ett", params=RANGE).json()
    series = body["series"]
    assert [p["bucket"] for p in series] == ["2026-04-24T00:00:00.000Z", "2026-04-25T00:00:00.000Z"]
    d1, d0 = series
    assert d1["wall_gpu_h"] == approx(28800 / 3600)
    assert d1["effective_gpu_h"] == approx(9600 / 3600)
    assert d1["ett_pct"] == approx(9600 / 28800 * 100)
    assert d1["components_gpu_h"]["pt2_compile"] == approx(600 * 8 / 3600)
    assert d0["ett_pct"] == approx(50200 / 55800 * 100)
    assert d0["components_gpu_h"]["scheduling"] == approx(300 * 2 / 3600)
    assert d0["components_gpu_h"]["wasted_training"] == approx((100 * 8 + 500 * 2) / 3600)
    assert d0["components_gpu_h"]["shutdown"] == approx(300 * 8 / 3600)
    assert body["total"]["ett_pct"] == approx((9600 + 50200) / (28800 + 55800) * 100)


def test_week_bucket_and_filters(client: Any, fleet: None) -> None:
    week = client.get("/api/v1/fleet/ett", params={**RANGE, "bucket": "week"}).json()["series"]
    # Friday and Saturday share the ISO week that began on Monday 2026-04-20.
    assert [p["bucket"] for p in week] == ["2026-04-20T00:00:00.000Z"]
    assert week[0]["ett_pct"] == approx((9600 + 50200) / (28800 + 55800) * 100)

    month = client.get(
        "/api/v1/fleet/ett",
        params={"start": "2026-04-01", "end": "2026-05-31", "bucket": "month"},
    ).json()["series"]
    # Calendar months: both days fall in April; May is empty; neither bucket is cut.
    assert [p["bucket"] for p in month] == ["2026-04-01T00:00:00.000Z", "2026-05-01T00:00:00.000Z"]
    assert month[0]["ett_pct"] == approx((9600 + 50200) / (28800 + 55800) * 100)
    assert month[1]["wall_gpu_h"] == 0 and not month[0]["partial"]
    cut = client.get("/api/v1/fleet/ett", params={**RANGE, "bucket": "month"}).json()
    assert [p["partial"] for p in cut["series"]] == [True]

    only_b = client.get("/api/v1/fleet/ett", params={**RANGE, "model": "m-b"}).json()
    assert only_b["series"][0]["wall_gpu_h"] == 0
    assert only_b["series"][0]["ett_pct"] is None
    assert only_b["series"][1]["ett_pct"] == approx(1500 / 2700 * 100)

    by_owner = client.get("/api/v1/fleet/ett", params={**RANGE, "owner": "ranking"}).json()
    assert by_owner["total"]["wall_gpu_h"] == approx(9900 * 8 / 3600)

    by_label = client.get("/api/v1/fleet/ett", params={**RANGE, "label": "team=x"}).json()
    assert by_label["total"]["effective_gpu_h"] == approx(1500 * 2 / 3600)
    assert by_label["series"][1]["ett_pct"] == approx(1500 / 2700 * 100)
    none = client.get("/api/v1/fleet/ett", params={**RANGE, "label": "team=nobody"}).json()
    assert none["total"]["wall_gpu_h"] == 0


def test_csv_series(client: Any, fleet: None) -> None:
    r = client.get("/api/v1/fleet/ett", params={**RANGE, "format": "csv"})
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/csv")
    rows = list(csv.DictReader(io.StringIO(r.text)))
    assert [row["bucket"] for row in rows] == [
        "2026-04-24T00:00:00.000Z",
        "2026-04-25T00:00:00.000Z",
    ]
    assert float(rows[1]["components_gpu_h.shutdown"]) == pytest.approx(300 * 8 / 3600, abs=1e-3)


def test_lost_by_component_owner_phase(client: Any, fleet: None) -> None:
    day0 = {"start": "2026-04-25T00:00:00Z", "end": "2026-04-26T00:00:00Z"}
    comp = client.get("/api/v1/fleet/lost", params=day0).json()
    got = {r["component"]: r["gpu_h"] for r in comp["rows"]}
    assert got == {
        "shutdown": approx(2400 / 3600),
        "wasted_training": approx(1800 / 3600),
        "trainer_init": approx(800 / 3600),
        "scheduling": approx(600 / 3600),
    }
    assert [r["component"] for r in comp["rows"]][0] == "shutdown"
    assert comp["total_gpu_h"] == approx(5600 / 3600)
    assert sum(r["share"] for r in comp["rows"]) == approx(1.0)

    owners = client.get("/api/v1/fleet/lost", params={**day0, "by": "owner"}).json()["rows"]
    assert {r["owner"]: r["gpu_h"] for r in owners} == {
        "trainer": approx((2400 + 800) / 3600),
        "checkpoint": approx((800 + 1000) / 3600),
        "scheduler": approx(600 / 3600),
    }
    phases = client.get("/api/v1/fleet/lost", params={**day0, "by": "phase"}).json()["rows"]
    assert {r["phase"]: r["gpu_h"] for r in phases}["replay"] == approx(1000 / 3600)
    r = client.get("/api/v1/fleet/lost", params={**day0, "by": "owner", "format": "csv"})
    assert r.text.splitlines()[0] == "owner,gpu_h,share"


def test_owner_change_applies_without_reingest(client: Any, fleet: None, admin_token: str) -> None:
    day0 = {"start": "2026-04-25T00:00:00Z", "end": "2026-04-26T00:00:00Z", "by": "owner"}
    doc = client.get("/api/v1/owners").json()
    doc["phases"]["checkpoint_blocking"]["owner"] = "storage"
    r = client.put(
        "/api/v1/owners",
        json={"components": doc["components"], "phases": doc["phases"]},
        headers={"Authorization": f"Bearer {admin_token}"},
    )
    assert r.status_code == 200, r.text
    rows = client.get("/api/v1/fleet/lost", params=day0).json()["rows"]
    got = {r["owner"]: r["gpu_h"] for r in rows}
    assert got["storage"] == approx(800 / 3600)
    assert got["checkpoint"] == approx(1000 / 3600)


def test_failures_series_and_by_model(client: Any, fleet: None) -> None:
    body = client.get("/api/v1/fleet/failures", params=RANGE).json()
    d1, d0 = body["series"]
    assert d1["failures"] == 0 and d1["jobs"] == 1 and d1["attempts_per_job"] == 1
    assert d0["nof_by_kind"]["preemption"] == 1 and d0["failures"] == 1
    assert d0["jobs"] == 1 and d0["attempts"] == 2
    assert d0["attempts_per_job_excl_preemption"] == 1
    assert d0["failures_per_1000_gpu_h"] == approx(1 / (55800 / 3600 / 1000))
    assert body["total"]["failures"] == 1 and body["total"]["jobs"] == 2
    assert body["total"]["attempts_per_job"] == approx(1.5)

    per_model = client.get("/api/v1/fleet/failures/by-model", params=RANGE).json()["models"]
    assert [m["model"] for m in per_model] == ["m-b", "m-a"]
    assert per_model[0]["failures_per_1000_gpu_h"] == approx(1 / (2700 * 2 / 3600 / 1000))
    assert per_model[1]["failures"] == 0
    only_a = client.get("/api/v1/fleet/failures", params={**RANGE, "model": "m-a"}).json()
    assert only_a["total"]["failures"] == 0 and only_a["total"]["jobs"] == 1


def test_regressions(client: Any, post: Any) -> None:
    # m-a runs job-a (ETT 7100/9900) before, and a worse copy after: a 1-day shift and a
    # 10x longer shutdown (3000 s) lower its ETT% to 7100/12600.
    post(job_a().events)
    later = job_a()
    later.job_id = "job-a2"
    for ev in later.events:
        ev["job_id"] = "job-a2"
        ev["event_id"] = "a2-" + ev["event_id"]
        for k in ("ts", "start", "end", "blocking_end"):
            if k in ev:
                ev[k] += 10 * DAY
        if ev["type"] == "job_ended":
            ev["ts"] += 2700
    post(later.events)
    params = {
        "before_start": "2026-04-24T00:00:00Z",
        "before_end": "2026-04-27T00:00:00Z",
        "after_start": "2026-05-04T00:00:00Z",
        "after_end": "2026-05-07T00:00:00Z",
    }
    # One job before is too small a base (backend.metrics.core.trend_reason): no regression.
    assert client.get("/api/v1/fleet/regressions", params=params).json()["models"] == []
    for i in (1, 2):  # two more copies of job-a in the range before: the same ETT%, 3 jobs
        copy = [
            {**ev, "job_id": f"job-a-{i}", "event_id": f"c{i}-{ev['event_id']}"}
            for ev in job_a().events
        ]
        post(copy)
    rows = client.get("/api/v1/fleet/regressions", params=params).json()["models"]
    assert len(rows) == 1
    row = rows[0]
    assert row["model"] == "m-a" and row["owner"] == "ranking"
    assert row["ett_pct_before"] == approx(7100 / 9900 * 100)
    assert row["ett_pct_after"] == approx(7100 / 12600 * 100)
    assert row["driver"] == "shutdown"
    assert row["driver_share_pp"] == approx((3000 / 12600 - 300 / 9900) * 100)


def test_rollups_follow_a_recompute(client: Any, database: Any, ingest_token: str) -> None:
    job = job_a()
    post_events(client, ingest_token, job.events[:-1])  # still open: provisional until job_ended
    post_events(client, ingest_token, job.events[-1:])
    with database.session() as s:
        total = s.scalar(select(func.sum(FleetDayRollup.gpu_s)))
        days = s.scalar(select(func.count(func.distinct(FleetDayRollup.day))))
    assert total == approx(9900 * 8)
    assert days == 2


def test_bad_parameters_and_unknown_names(client: Any, fleet: None) -> None:
    cases = [
        {"bucket": "year"},
        {"start": "yesterday"},
        {"start": "2026-04-26T00:00:00Z", "end": "2026-04-25T00:00:00Z"},
        {"label": "novalue"},
        {"format": "xml"},
    ]
    for params in cases:
        r = client.get("/api/v1/fleet/ett", params=params)
        assert r.status_code == 422, (params, r.text)
        assert r.json()["detail"]
    assert client.get("/api/v1/fleet/lost", params={"by": "colour"}).status_code == 422
    r = client.get("/api/v1/fleet/ett", params={"model": "nope"})
    assert r.status_code == 404 and "nope" in r.json()["detail"]
    assert client.get("/api/v1/fleet/failures", params={"owner": "nobody"}).status_code == 404
    assert client.get("/api/v1/fleet/regressions", params={"limit": 0}).status_code == 422


def test_default_range_is_last_180_days(client: Any, fleet: None) -> None:
    body = client.get("/api/v1/fleet/ett").json()
    assert len(body["series"]) in (180, 181)
    assert body["total"]["wall_gpu_h"] == 0  # the jobs lie further back than 180 days
    assert time.time() - 180 * DAY > D0 + DAY


# Each fleet route's query parameters (the API docs/API.md describes; unchanged by issue 28's
# move of the shared ones into backend/metrics/views.py's FleetScope .. FleetSeries).
FLEET_PARAMS = {
    "/ett": {"start", "end", "bucket", "model", "team", "owner", "label", "format"},
    "/failures": {"start", "end", "bucket", "model", "team", "owner", "label", "format"},
    "/lost": {
        *("start", "end", "by", "model", "team", "owner", "label", "format"),
        *("component", "component_owner", "top"),
    },
    "/failures/by-model": {"start", "end", "team", "owner", "label", "format"},
    "/regressions": {
        *("before_start", "before_end", "after_start", "after_end", "limit"),
        *("team", "owner", "label", "format"),
    },
}


def test_fleet_routes_declare_their_shared_parameters_once(client: Any) -> None:
    """Every fleet route takes its documented parameters; a shared one reads the same on each."""
    spec = client.get("/openapi.json").json()
    seen: dict[str, dict[str, Any]] = {}
    for path, names in FLEET_PARAMS.items():
        params = spec["paths"]["/api/v1/fleet" + path]["get"]["parameters"]
        assert {p["name"] for p in params} == names, path
        for p in params:
            assert seen.setdefault(p["name"], p) == p, (path, p["name"])
    assert seen["owner"]["deprecated"] is True and seen["bucket"]["schema"]["default"] == "day"
