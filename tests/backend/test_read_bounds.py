"""Every read is bounded (issue 12 defect 1): ranges, series points, rows, limit and offset.

The walk below reads the live OpenAPI document, so routes added later are held to the bounds
without anyone listing them here.
"""

from __future__ import annotations

import re
from typing import Any

import pytest

from backend.params import ReadBounds, check_range
from dashboard.filters import Filters
from tests.conftest import post_events

ABSURD_TIME = "0001-01-01T00:00:00Z"
FAR_TIME = "9999-12-31T00:00:00Z"
HUGE = str(10**20)


def _is_time(name: str) -> bool:
    return name in ("start", "end") or name.endswith(("_start", "_end"))


def _is_limit(name: str) -> bool:
    return name == "limit" or name.endswith("_limit")


def _is_offset(name: str) -> bool:
    return name == "offset" or name.endswith("_offset")


def _get_routes(client: Any) -> list[tuple[str, list[dict[str, Any]]]]:
    doc = client.get("/openapi.json").json()
    return [
        (path, ops["get"].get("parameters", []))
        for path, ops in doc["paths"].items()
        if "get" in ops
    ]


def _url(path: str, params: list[dict[str, Any]]) -> str:
    for p in params:
        if p["in"] == "path":
            schema = p.get("schema", {})
            value = "1" if schema.get("type") == "integer" else "x"
            path = path.replace("{" + p["name"] + "}", value).replace(
                "{" + p["name"] + ":path}", value
            )
    return re.sub(r"\{[^}]+\}", "x", path)


def _required_query(params: list[dict[str, Any]]) -> dict[str, str]:
    out = {}
    for p in params:
        if p["in"] == "query" and p.get("required"):
            out[p["name"]] = "x"
    return out


def _absurd_cases(params: list[dict[str, Any]]) -> list[dict[str, str]]:
    names = [p["name"] for p in params if p["in"] == "query"]
    cases: list[dict[str, str]] = []
    for name in names:
        if _is_time(name):
            cases.append({name: ABSURD_TIME})
            cases.append({name: FAR_TIME})
        if _is_limit(name):
            cases.append({name: HUGE})
        if _is_offset(name):
            cases.append({name: HUGE})
    starts = [n for n in names if n == "start" or n.endswith("_start")]
    for start in starts:
        end = start[: -len("start")] + "end"
        if end in names:
            # Both inside the event window, a century apart: over every range cap.
            cases.append({start: "2000-01-02T00:00:00Z", end: "2099-12-30T00:00:00Z"})
    return cases


def test_every_get_route_refuses_absurd_ranges_limits_offsets(client, make_token) -> None:
    """Walk every GET route of the OpenAPI document; each absurd parameter answers 422 in words."""
    headers = {"Authorization": f"Bearer {make_token('admin')}"}
    routes = _get_routes(client)
    checked = 0
    bounded_routes = set()
    for path, params in routes:
        url = _url(path, params)
        base = _required_query(params)
        for case in _absurd_cases(params):
            r = client.get(url, params={**base, **case}, headers=headers)
            assert r.status_code == 422, (path, case, r.status_code, r.text[:300])
            detail = r.json()["detail"]
            assert isinstance(detail, str) and detail, (path, case, r.text[:300])
            assert any(name in detail for name in case), (path, case, detail)
            assert len(r.content) < 10_000, (path, case)
            checked += 1
            bounded_routes.add(path)
        # A route must never fail on parameters it does not take.
        r = client.get(url, params={**base, "start": ABSURD_TIME, "limit": HUGE}, headers=headers)
        assert r.status_code < 500, (path, r.status_code, r.text[:300])
    # The walk found the range/limit reads (a regression in parameter naming would show here).
    assert {
        "/api/v1/fleet/ett",
        "/api/v1/jobs",
        "/api/v1/models",
        "/api/v1/events/rejected",
    } <= bounded_routes
    assert checked >= 30


def test_issue_repro_fleet_ett_whole_calendar_is_422(client) -> None:
    r = client.get(
        "/api/v1/fleet/ett",
        params={"start": "0001-01-01T00:00:00Z", "end": "9999-12-31T00:00:00Z", "bucket": "day"},
    )
    assert r.status_code == 422
    assert "ETT_EVENT_TIME_MIN" in r.json()["detail"]


def test_range_per_bucket(client) -> None:
    """Day buckets allow max_series_points days; weeks seven times that."""
    three_years = {"start": "2020-01-01T00:00:00Z", "end": "2023-01-01T00:00:00Z"}
    r = client.get("/api/v1/fleet/ett", params={**three_years, "bucket": "day"})
    assert r.status_code == 422
    assert "1000 days" in r.json()["detail"] and "ETT_MAX_SERIES_POINTS" in r.json()["detail"]
    r = client.get("/api/v1/fleet/ett", params={**three_years, "bucket": "week"})
    assert r.status_code == 200, r.text
    assert 150 <= len(r.json()["series"]) <= 160
    # The route's default bucket (day) counts when the URL names none.
    r = client.get("/api/v1/fleet/failures", params=three_years)
    assert r.status_code == 422 and "bucket=day" in r.json()["detail"]


def test_end_before_the_window_is_422_not_500(client) -> None:
    for path in ("/api/v1/fleet/ett", "/api/v1/fleet/lost", "/api/v1/models", "/api/v1/jobs"):
        r = client.get(path, params={"end": "0001-01-01T00:00:00Z"})
        assert r.status_code == 422, (path, r.text)
        assert r.json()["detail"].startswith("end: must be between")


def test_huge_offset_is_422_not_500(client) -> None:
    for path in ("/api/v1/jobs", "/api/v1/models", "/api/v1/events/rejected"):
        r = client.get(path, params={"offset": str(2**70)})
        assert r.status_code == 422, (path, r.text)
        assert "ETT_MAX_OFFSET" in r.json()["detail"]


def _jobs(n: int) -> list[dict[str, Any]]:
    t = 1_780_000_000.0
    return [
        {
            "event_id": f"s{i}",
            "job_id": f"j{i}",
            "type": "job_submitted",
            "ts": t,
            "model": f"m{i}",
            "gpus": 1,
        }
        for i in range(n)
    ]


def test_row_cap_in_json_and_csv(client, settings, ingest_token) -> None:
    """An answer (or CSV export) with more rows than ETT_MAX_ROWS is refused, naming the cap."""
    assert post_events(client, ingest_token, _jobs(3)).status_code == 200
    settings.max_rows = 2
    params = {"start": "2026-05-01T00:00:00Z", "end": "2026-07-01T00:00:00Z"}
    for fmt in ("json", "csv"):
        r = client.get("/api/v1/models", params={**params, "format": fmt})
        assert r.status_code == 422, (fmt, r.text)
        assert "3 rows is over the limit of 2" in r.json()["detail"]
        assert "ETT_MAX_ROWS" in r.json()["detail"]
    settings.max_rows = 3
    r = client.get("/api/v1/models", params=params)
    assert r.status_code == 200 and len(r.json()["models"]) == 3


def test_page_limit_setting(client, settings) -> None:
    settings.max_page_limit = 10
    r = client.get("/api/v1/jobs", params={"limit": "11"})
    assert r.status_code == 422
    assert r.json()["detail"] == "limit: 11 is over the limit of 10 (setting ETT_MAX_PAGE_LIMIT)"
    assert client.get("/api/v1/jobs", params={"limit": "10"}).status_code == 200


def test_check_range_is_pure() -> None:
    b = ReadBounds(max_series_points=10, max_range_days=5)
    t = 1_780_000_000.0
    check_range(t, t + 10 * 86400, bucket="day", bounds=b)
    check_range(t, t + 70 * 86400, bucket="week", bounds=b)
    with pytest.raises(Exception, match="over the limit of 5 days"):
        check_range(t, t + 6 * 86400, bounds=b)


def test_dashboard_url_range_is_held_to_the_bounds() -> None:
    """A page asked for the whole calendar shows a bounded range and says why."""
    f = Filters.from_query({"start": "0001-01-01", "end": "9999-12-31", "bucket": "day"})
    assert (f.end - f.start).days + 1 == 1000
    assert f.start.year >= 2000 and f.end.year < 2100
    assert f.notice and "ETT_MAX_SERIES_POINTS" in f.notice and "bucket=day" in f.notice
    ok = Filters.from_query({"start": "2026-01-01", "end": "2026-03-01"})
    assert ok.notice is None and ok.start.isoformat() == "2026-01-01"
