"""GET /jobs?component=: the jobs with time in that component inside [start, end) (the Jobs list
a chart's bar opens: that bucket, that component)."""

from __future__ import annotations

from backend.timefmt import rfc3339
from tests.backend.ett.builders import M
from tests.backend.results.test_recompute_and_jobs_api import T0, fig1_job, ok, short_job


def _ids(client, **params) -> list[str]:
    r = client.get("/api/v1/jobs", params={"sort": "submitted_at", **params})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["total"] == len(body["jobs"])
    return [j["job_id"] for j in body["jobs"]]


def test_the_component_filter_keeps_jobs_with_time_in_it_inside_the_range(client, post):
    # fig1 compiles from 22.4 to 52.4 min after T0; "short" (T0+1000 s to +1100 s) only trains.
    ok(post(fig1_job().events))
    ok(post(short_job("short", "ranker", 60.0).events))
    hour = {"start": rfc3339(T0), "end": rfc3339(T0 + 60 * M)}
    assert _ids(client, **hour) == ["fig1", "short"]
    assert _ids(client, component="pt2_compile", **hour) == ["fig1"]
    assert _ids(client, component="effective_training", **hour) == ["fig1", "short"]
    # Both jobs run in [T0+53 min, T0+3 h), but fig1's compile ended at 52.4 min.
    after = {"start": rfc3339(T0 + 53 * M), "end": rfc3339(T0 + 180 * M)}
    assert _ids(client, **after) == ["fig1"]
    assert _ids(client, component="pt2_compile", **after) == []
    # The last second of the compile is inside [52 min, 53 min).
    edge = {"start": rfc3339(T0 + 52 * M), "end": rfc3339(T0 + 53 * M)}
    assert _ids(client, component="pt2_compile", **edge) == ["fig1"]
    # Without a range: every job that ever compiled.
    assert _ids(client, component="pt2_compile") == ["fig1"]
    assert client.get("/api/v1/jobs", params={"component": "lunch"}).status_code == 422
