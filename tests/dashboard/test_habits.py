"""What Grafana and W&B users reach for, on the page layouts (both dialects): quick ranges and
auto-refresh in the filter bar, a bucket's bar opening its jobs, jobs on one time axis."""

from __future__ import annotations

from datetime import date

import pytest
from fastapi.testclient import TestClient

from backend.config import Settings
from backend.db import Database
from dashboard import data, timelines
from dashboard.components import bucket_jobs_href
from dashboard.filters import Filters
from dashboard.pages import compare, fleet, job, models, owners
from tests.dashboard.conftest import dashboard_request, find


def test_quick_ranges_and_refresh_are_on_the_fleet_owner_and_model_pages(
    seeded: Settings, demo_db: Database
) -> None:
    with dashboard_request(seeded, demo_db):
        for module, prefix in ((fleet, "fleet"), (owners, "owners"), (models, "model")):
            page = module.layout(range="7d", refresh="1m")
            bar = find(page, f"{prefix}-quick")
            assert bar is not None and bar.style == {}, prefix
            assert "ett-quick-on" in find(page, f"{prefix}-quick-7d").className
            assert "ett-quick-on" not in find(page, f"{prefix}-quick-30d").className
            timer = find(page, f"{prefix}-refresh-timer")
            assert timer.disabled is False and timer.interval == 60_000
            assert find(page, f"{prefix}-refresh").value == "1m"
        # Off by default; the Jobs page has the controls hidden (its callbacks stay uniform).
        assert find(fleet.layout(), "fleet-refresh-timer").disabled is True
        assert find(job.layout(), "job-quick").style == {"display": "none"}


def test_a_bucket_opens_the_jobs_of_its_days() -> None:
    day = Filters.from_query({"start": "2026-05-01", "end": "2026-05-14"}, today=date(2026, 5, 20))
    href = bucket_jobs_href(day, "2026-05-06", "pt2_compile")
    got = Filters.from_query(dict(_query(href)), today=date(2026, 5, 20))
    assert (got.start, got.end) == (date(2026, 5, 6), date(2026, 5, 6))
    assert got.extra["component"] == "pt2_compile" and got.extra["view"] == "lost"
    # A week bucket is its seven days (ISO weeks start on Monday); a quick range is dropped.
    week = day.with_(bucket="week", extra={"range": "30d"})
    got = Filters.from_query(
        dict(_query(bucket_jobs_href(week, "2026-05-04T00:00:00", "shutdown")))
    )
    assert (got.start, got.end) == (date(2026, 5, 4), date(2026, 5, 10))
    assert "range" not in got.extra
    # "other" (folded components) and effective training are no component filter.
    assert "component" not in bucket_jobs_href(day, "2026-05-06", "other")
    assert "component" not in bucket_jobs_href(day, "2026-05-06", "effective_training")
    assert bucket_jobs_href(day, "not a date") is None


def _query(href: str) -> list[tuple[str, str]]:
    from urllib.parse import parse_qsl, urlsplit

    return parse_qsl(urlsplit(href).query)


def test_the_jobs_list_by_component_is_the_rest_answer(
    api: TestClient, seeded: Settings, demo_db: Database
) -> None:
    every = api.get("/api/v1/jobs", params={"limit": 1000}).json()["jobs"]
    day = max(j["submitted_at"] for j in every)[:10]
    rest = api.get(
        "/api/v1/jobs",
        params={"component": "pt2_compile", "start": day, "end": day, "limit": 1000},
    ).json()
    assert 0 < rest["total"] < len(every)
    with dashboard_request(seeded, demo_db):
        page = job.layout(start=day, end=day, component="pt2_compile", view="lost")
    listed = find(page, "job-list-table").data
    assert {r["job_id"] for r in listed} == {j["job_id"] for j in rest["jobs"]}
    assert "PT2 compile" in find(page, "job-component-filter").children


def test_ticked_jobs_open_on_one_axis_aligned_at_submission_or_first_step(
    api: TestClient, seeded: Settings, demo_db: Database
) -> None:
    ids = [j["job_id"] for j in api.get("/api/v1/jobs", params={"limit": 3}).json()["jobs"]]
    rows = [{"job_id": i} for i in ids]
    assert job.picked_jobs(rows, [2, 0]) == [ids[2], ids[0]]
    answers = {i: api.get(f"/api/v1/jobs/{i}/ett").json() for i in ids}
    with dashboard_request(seeded, demo_db):
        for align in ("submit", "step"):
            page = compare.layout(timelines=",".join(ids), align=align)
            fig = find(page, "compare-timelines-graph").figure
            assert list(fig.layout.yaxis.categoryarray) == ids[::-1]
            for job_id in ids:
                starts = [
                    base
                    for trace in fig.data
                    if trace.type == "bar"
                    for y, base in zip(trace.y, trace.base, strict=True)
                    if y == job_id
                ]
                doc = answers[job_id]
                first = min(data.epoch(iv["start"]) for iv in doc["intervals"])
                submitted = data.epoch(doc["submitted_at"])
                trained = [
                    data.epoch(iv["start"])
                    for iv in doc["intervals"]
                    if iv["component"] == "effective_training"
                ]
                t0 = min(trained) if align == "step" and trained else submitted
                # Hand-worked: the row's first interval sits at its own offset from the origin.
                assert min(starts) == pytest.approx((first - t0) / 3600.0, abs=1e-6)
            rows = find(page, "compare-timelines-table").data
            assert [r["job"].split("]")[0].lstrip("[") for r in rows] == ids
        assert "ett-quick-on" in find(page, "compare-align-step").className
        many = compare.layout(timelines=",".join([*ids, "no-such-job"]))
        assert "not found: no-such-job" in str(find(many, "compare-title").children)
        assert find(compare.layout(timelines="nope"), "compare-empty") is not None


def test_the_first_step_is_the_first_effective_second() -> None:
    result = {
        "job_id": "j",
        "submitted_at": 100.0,
        "intervals": [
            {"start": 100.0, "end": 160.0, "component": "scheduling"},
            {"start": 160.0, "end": 400.0, "component": "pt2_compile"},
            {"start": 400.0, "end": 4000.0, "component": "effective_training"},
        ],
    }
    assert timelines.first_step(result) == 400.0
    assert timelines.origin(result, "step") == (400.0, True)
    assert timelines.origin({**result, "intervals": result["intervals"][:2]}, "step") == (
        100.0,
        False,
    )
    spans = timelines.frame([result], "step")
    assert list(spans["start_h"]) == pytest.approx([-300 / 3600, -240 / 3600, 0.0])
