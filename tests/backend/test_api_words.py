"""One meaning per word in the REST parameters (issue 14 items 2-4), on both databases."""

from __future__ import annotations

from typing import Any

import pytest

from backend.results.recompute import recompute_dirty
from backend.timefmt import DAY_S, parse_bound, parse_instant, rfc3339
from tests.backend.fleet.fleet_jobs import D0, job_a, job_b


@pytest.fixture
def fleet(post: Any) -> None:
    """Both fleet jobs ingested and computed (job-a spans D0-1 and D0, job-b lies in D0)."""
    for job in (job_a(), job_b()):
        assert post(job.events).status_code == 200


def _day(ts: float) -> str:
    return (rfc3339(ts) or "")[:10]


def test_parser_spellings() -> None:
    now = 1_780_000_000.0 + 3 * 3600  # 03:00 UTC-ish
    midnight = now - now % DAY_S
    assert parse_bound("2026-11-30", "end") == parse_bound("2026-12-01", "start")
    assert parse_bound("2026-11-30T12:00:00Z", "end") == parse_instant("2026-11-30T12:00Z").ts
    assert parse_instant("-12h", now=now).ts == now - 12 * 3600
    assert parse_instant("-180d", now=now).ts == midnight + DAY_S - 180 * DAY_S
    assert parse_instant("-4w", now=now).whole_day
    assert parse_instant("1796000000").ts == 1796000000.0
    with pytest.raises(ValueError):
        parse_instant("yesterday-ish")


def test_date_end_is_inclusive(client: Any, fleet: None) -> None:
    day0 = _day(D0)
    r = client.get("/api/v1/fleet/ett", params={"start": day0, "end": day0})
    assert r.status_code == 200, r.text
    body = r.json()
    assert [p["bucket"][:10] for p in body["series"]] == [day0]
    assert body["start"] == rfc3339(D0) and body["end"] == rfc3339(D0 + DAY_S)
    assert body["total"]["wall_gpu_h"] > 0


def test_sub_day_range_on_rollups_is_422_not_widened(client: Any, fleet: None) -> None:
    r = client.get(
        "/api/v1/fleet/ett", params={"start": rfc3339(D0 + 12 * 3600), "end": rfc3339(D0 + DAY_S)}
    )
    assert r.status_code == 422 and "00:00 UTC" in r.json()["detail"]
    r = client.get("/api/v1/fleet/lost", params={"start": "-12h"})
    assert r.status_code == 422
    # The per-job list answers any sub-day range and echoes it.
    r = client.get("/api/v1/jobs", params={"start": rfc3339(D0 + 3 * 3600)})
    assert r.status_code == 200 and r.json()["start"] == rfc3339(D0 + 3 * 3600)


def test_relative_and_default_range_are_echoed(client: Any, settings: Any) -> None:
    r = client.get("/api/v1/fleet/ett")
    body = r.json()
    lo, hi = parse_instant(body["start"]).ts, parse_instant(body["end"]).ts
    assert hi % DAY_S == 0 and (hi - lo) / DAY_S == settings.default_range_days
    r = client.get("/api/v1/models")
    assert (r.json()["start"], r.json()["end"]) == (body["start"], body["end"])
    r = client.get("/api/v1/fleet/ett", params={"start": "-7d", "bucket": "day"})
    assert len(r.json()["series"]) == 7
    assert all(p["partial"] in (True, False) for p in r.json()["series"])


def test_team_filter_and_deprecated_owner_alias(client: Any, fleet: None) -> None:
    day0, prev = _day(D0), _day(D0 - DAY_S)
    params = {"start": prev, "end": day0, "by": "owner"}
    new = client.get("/api/v1/fleet/lost", params={**params, "team": "ranking"})
    assert new.status_code == 200 and "deprecation" not in new.headers
    old = client.get("/api/v1/fleet/lost", params={**params, "owner": "ranking"})
    assert old.status_code == 200
    assert old.headers["deprecation"] == "true" and "use team" in old.headers["warning"]
    assert old.json() == new.json()
    # by=owner groups by the component's owner, not the model's team.
    assert {row["owner"] for row in new.json()["rows"]} <= {
        "scheduler",
        "cluster",
        "trainer",
        "compiler",
        "checkpoint",
        "data",
        "publishing",
    }
    clash = client.get("/api/v1/fleet/lost", params={**params, "team": "ranking", "owner": "ads"})
    assert clash.status_code == 422
    spec = client.get("/openapi.json").json()
    lost = {p["name"]: p for p in spec["paths"]["/api/v1/fleet/lost"]["get"]["parameters"]}
    assert lost["owner"].get("deprecated") is True and not lost["team"].get("deprecated")


def test_bad_enum_is_422(client: Any, fleet: None) -> None:
    r = client.get("/api/v1/jobs", params={"status": "bogus"})
    assert r.status_code == 422 and "succeeded" in r.json()["detail"]
    assert client.get("/api/v1/jobs", params={"status": "succeeded"}).json()["total"] == 2
    r = client.get("/api/v1/alerts", params={"state": "bogus"})
    assert r.status_code == 422


def test_compare_pairs_submitted_after(client: Any, fleet: None) -> None:
    late = rfc3339(D0 + 2 * DAY_S)
    r = client.get("/api/v1/compare/pairs", params={"submitted_after": late})
    assert r.status_code == 200 and r.json()["submitted_after"] == late
    old = client.get("/api/v1/compare/pairs", params={"start": late})
    assert old.status_code == 200 and old.headers.get("deprecation") == "true"
    assert old.json()["submitted_after"] == late


def test_rounded_numbers(client: Any, fleet: None) -> None:
    body = client.get("/api/v1/fleet/ett", params={"start": _day(D0 - DAY_S)}).json()
    for point in body["series"]:
        if point["ett_pct"] is not None:
            assert point["ett_pct"] == round(point["ett_pct"], 2)
        assert point["wall_gpu_h"] == round(point["wall_gpu_h"], 3)


def test_owner_mapping_move_reaccounts_jobs(
    client: Any, post: Any, admin_token: str, database: Any, settings: Any
) -> None:
    job = job_b()
    job.phase(0, "custom.eval", D0 + 2200, D0 + 2500)
    assert post(job.events).status_code == 200
    headers = {"Authorization": f"Bearer {admin_token}"}
    doc = client.get("/api/v1/owners").json()
    day = {"start": _day(D0), "end": _day(D0)}

    def put(component: str) -> Any:
        phases = {**doc["phases"], "custom.eval": {"component": component, "owner": "eval"}}
        body = {"components": doc["components"], "phases": phases}
        r = client.put("/api/v1/owners", json=body, headers=headers)
        assert r.status_code == 200, r.text
        return r.json()

    assert put("shutdown")["jobs_marked"] == 1
    with database.session() as s:
        assert recompute_dirty(db_session=s, settings=settings) == 1
        s.commit()
    before = client.get("/api/v1/jobs/job-b/ett").json()["components"]
    lost_before = client.get("/api/v1/fleet/lost", params={**day, "by": "owner"}).json()
    # The same mapping again moves nothing.
    assert put("shutdown")["jobs_marked"] == 0
    assert put("trainer_init")["jobs_marked"] == 1
    with database.session() as s:
        assert recompute_dirty(db_session=s, settings=settings) == 1
        s.commit()
    after = client.get("/api/v1/jobs/job-b/ett").json()["components"]
    assert after["shutdown"] < before["shutdown"]
    assert after["trainer_init"] > before["trainer_init"]
    lost_after = client.get("/api/v1/fleet/lost", params={**day, "by": "component"}).json()
    comps = {r["component"]: r["gpu_h"] for r in lost_after["rows"]}
    assert comps.get("shutdown", 0.0) < 300 * 8 / 3600 + 1e-3
    assert lost_before["total_gpu_h"] == pytest.approx(lost_after["total_gpu_h"], abs=1e-2)
    assert client.delete("/api/v1/owners", headers=headers).json()["jobs_marked"] == 1
