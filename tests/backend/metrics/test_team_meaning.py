"""Issue 25 item 7: `team=` has one meaning, the team on the job (backend/jobs/team.py).

Two jobs of one model, labelled teamA and then teamB: the model's team is teamB (the latest
label), but each job belongs to the team on it, in /jobs, /fleet/*, /models, the fleet_ett
service and the dashboard's data layer alike.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from fastapi.testclient import TestClient

from backend.config import Settings
from backend.db import Database
from backend.jobs.models import Model
from backend.metrics import fleet as metrics_fleet
from tests.backend.ett.builders import JobEvents

DAY = 1_796_083_200.0  # 2026-12-01T00:00:00Z, a whole UTC day
T0 = DAY + 3600.0
RANGE = {"start": "2026-12-01", "end": "2026-12-01"}  # a date end is inclusive: that one day


def _job(job_id: str, team: str, ts: float, gpus: int, effective: float) -> JobEvents:
    """A 100 s job of model m on `gpus` GPUs with `effective` seconds of training."""
    j = JobEvents(job_id)
    j.submitted(ts, model="m", gpus=gpus, labels={"owner": team})
    j.started(0, ts)
    j.progress(0, ts, ts + effective, 0, effective)
    j.ended(0, ts + 100.0)
    j.job_ended(ts + 100.0)
    return j


@pytest.fixture
def two_teams(post: Any, database: Database) -> None:
    # teamA first (2 GPUs, 60 of 100 s effective), then teamB (4 GPUs, 25 of 100 s).
    for j in (_job("a-1", "teamA", T0, 2, 60.0), _job("b-1", "teamB", T0 + 600.0, 4, 25.0)):
        r = post(j.events)
        assert r.status_code == 200 and not r.json().get("rejected"), r.text
    with database.session() as s:
        assert s.get(Model, "m").owner == "teamB"  # the model's team: its latest label


# Hand-worked: wall GPU-hours 2 x 100 s and 4 x 100 s; effective 2 x 60 s and 4 x 25 s.
EXPECTED = {
    "teamA": {"wall_gpu_h": round(200 / 3600, 3), "ett_pct": 60.0, "lost": 80 / 3600},
    "teamB": {"wall_gpu_h": round(400 / 3600, 3), "ett_pct": 25.0, "lost": 300 / 3600},
}


def test_jobs_list_filters_by_the_team_on_the_job(two_teams: None, client: TestClient) -> None:
    for team, job in (("teamA", "a-1"), ("teamB", "b-1")):
        body = client.get("/api/v1/jobs", params={"team": team}).json()
        assert [j["job_id"] for j in body["jobs"]] == [job] and body["total"] == 1
        assert body["jobs"][0]["team"] == team
    assert client.get("/api/v1/jobs", params={"team": "teamC"}).json()["total"] == 0


def test_fleet_answers_count_each_job_under_its_own_team(
    two_teams: None, client: TestClient
) -> None:
    for team, want in EXPECTED.items():
        r = client.get("/api/v1/fleet/ett", params={**RANGE, "team": team})
        assert r.status_code == 200, r.text  # not "unknown owner"
        total = r.json()["total"]
        assert total["wall_gpu_h"] == want["wall_gpu_h"]
        assert total["ett_pct"] == want["ett_pct"]
        lost = client.get("/api/v1/fleet/lost", params={**RANGE, "team": team}).json()
        assert sum(row["gpu_h"] for row in lost["rows"]) == pytest.approx(want["lost"], abs=2e-3)
        failures = client.get("/api/v1/fleet/failures", params={**RANGE, "team": team}).json()
        assert failures["total"]["jobs"] == 1
        models = client.get("/api/v1/models", params={**RANGE, "team": team}).json()
        assert [(m["model"], m["team"], m["jobs"]) for m in models["models"]] == [("m", team, 1)]
        assert models["models"][0]["ett_pct"] == want["ett_pct"]
    # Unfiltered, the fleet is both jobs: (120 + 100) / (200 + 400) effective GPU-seconds.
    every = client.get("/api/v1/fleet/ett", params=RANGE).json()["total"]
    assert every["ett_pct"] == round(220 / 600 * 100, 2)
    r = client.get("/api/v1/fleet/ett", params={**RANGE, "team": "teamC"})
    assert r.status_code == 404 and "unknown team 'teamC'" in r.json()["detail"]


def test_the_fleet_ett_service_knows_the_team_of_the_first_job(
    two_teams: None, database: Database
) -> None:
    with database.session() as s:
        for team, want in EXPECTED.items():
            answer = metrics_fleet.fleet_ett(db_session=s, start=DAY, end=DAY + 86400.0, owner=team)
            assert answer["total"]["ett_pct"] == pytest.approx(want["ett_pct"])


def test_the_dashboard_filters_by_the_team_on_the_job(
    two_teams: None, settings: Settings, database: Database
) -> None:
    from dashboard import data
    from dashboard.filters import Filters
    from tests.dashboard.conftest import dashboard_request

    today = datetime.fromtimestamp(DAY, UTC).date()
    with dashboard_request(settings, database):
        assert {"teamA", "teamB"} <= set(data.team_names())
        for team, want in EXPECTED.items():
            filters = Filters.from_query({**RANGE, "team": team}, today=today)
            view = data.fleet_view(filters)
            assert view.error is None, view.error
            assert view.headline["ett_pct"] == pytest.approx(want["ett_pct"])
            jobs = data.jobs_frame(filters)
            assert list(jobs["job_id"]) == [{"teamA": "a-1", "teamB": "b-1"}[team]]
            assert list(jobs["owner"]) == [team]
            table = data.models_table(filters)
            assert list(table["model"]) == ["m"] and list(table["jobs"]) == [1]
