"""GET /fleet/lost?by=model|job: a component's top models and jobs, against each job's answer.

The expected numbers are summed here, independently of the fleet tables, from every job's own
GET /jobs/{id}/ett answer (seconds per component x the job's GPUs): the jobs lie wholly inside
the range and run every attempt at the job's GPUs, so that sum is the exact answer.
"""

from __future__ import annotations

import csv
import io
from collections import defaultdict
from typing import Any

import pytest

from tests.backend.fleet.fleet_jobs import DAY, job_a, job_b

RANGE = {"start": "2026-04-24T00:00:00Z", "end": "2026-04-27T00:00:00Z"}


@pytest.fixture
def fleet(post: Any) -> None:
    """job-a (m-a, 8 GPUs), job-b (m-b, 2 GPUs) and job-b2, job-b a day later."""
    later = job_b()
    for ev in later.events:
        ev["job_id"] = "job-b2"
        ev["event_id"] = "b2-" + ev["event_id"]
        for k in ("ts", "start", "end"):
            if k in ev:
                ev[k] += DAY
    for events in (job_a().events, job_b().events, later.events):
        r = post(events)
        assert r.status_code == 200, r.text


def approx(x: Any) -> Any:
    """Equal up to the answers' rounding (3 decimals for GPU-hours)."""
    return pytest.approx(x, abs=2e-3)


def per_job(client: Any, component: str) -> dict[str, tuple[str, float]]:
    """Job -> (model, GPU-hours lost in `component`) from the job answers alone."""
    jobs = client.get("/api/v1/jobs", params={"limit": 1000}).json()["jobs"]
    out = {}
    for j in jobs:
        ett = client.get(f"/api/v1/jobs/{j['job_id']}/ett").json()
        out[j["job_id"]] = (
            ett["model"],
            ett["components"].get(component, 0.0) * ett["gpus"] / 3600,
        )
    return out


@pytest.mark.parametrize("component", ["trainer_init", "wasted_training", "shutdown"])
def test_top_models_and_jobs_equal_the_sum_of_job_answers(
    client: Any, fleet: None, component: str
) -> None:
    truth = per_job(client, component)
    by_model: dict[str, float] = defaultdict(float)
    for model, gpu_h in truth.values():
        by_model[model] += gpu_h
    expected_models = {m: v for m, v in by_model.items() if v > 0}
    body = client.get(
        "/api/v1/fleet/lost", params={**RANGE, "by": "model", "component": component}
    ).json()
    assert body["by"] == "model"
    assert {r["model"]: r["gpu_h"] for r in body["rows"]} == approx(expected_models)
    assert body["total_gpu_h"] == approx(sum(expected_models.values()))
    assert [r["gpu_h"] for r in body["rows"]] == sorted(
        (r["gpu_h"] for r in body["rows"]), reverse=True
    )
    assert all(set(r["components"]) == {component} for r in body["rows"])

    jobs = client.get(
        "/api/v1/fleet/lost", params={**RANGE, "by": "job", "component": component}
    ).json()["rows"]
    expected_jobs = {j: v for j, (_m, v) in truth.items() if v > 0}
    assert {r["job_id"]: r["gpu_h"] for r in jobs} == approx(expected_jobs)
    assert all(r["model"] == truth[r["job_id"]][0] for r in jobs)
    assert sum(r["share"] for r in jobs) == approx(1.0)


def test_hand_worked_trainer_init_and_filters(client: Any, fleet: None) -> None:
    # trainer_init: job-a 600 s x 8 GPUs; job-b and job-b2 2 x 200 s x 2 GPUs each.
    params = {**RANGE, "by": "job", "component": "trainer_init"}
    rows = client.get("/api/v1/fleet/lost", params=params).json()["rows"]
    assert [(r["job_id"], r["model"]) for r in rows] == [
        ("job-a", "m-a"),
        ("job-b", "m-b"),
        ("job-b2", "m-b"),
    ]
    assert [r["gpu_h"] for r in rows] == approx([600 * 8 / 3600, 800 / 3600, 800 / 3600])
    top = client.get("/api/v1/fleet/lost", params={**params, "top": 1}).json()
    assert len(top["rows"]) == 1 and top["total_gpu_h"] == approx((4800 + 1600) / 3600)
    only_b = client.get("/api/v1/fleet/lost", params={**params, "model": "m-b"}).json()
    assert [r["job_id"] for r in only_b["rows"]] == ["job-b", "job-b2"]
    team = client.get("/api/v1/fleet/lost", params={**params, "team": "ranking"}).json()
    assert [r["job_id"] for r in team["rows"]] == ["job-a"]
    label = client.get("/api/v1/fleet/lost", params={**params, "label": "team=x"}).json()
    assert [r["job_id"] for r in label["rows"]] == ["job-b", "job-b2"]
    # One day only: job-b2 ran the day after.
    day0 = {"start": "2026-04-25T00:00:00Z", "end": "2026-04-26T00:00:00Z"}
    d0 = client.get("/api/v1/fleet/lost", params={**params, **day0}).json()["rows"]
    assert [r["job_id"] for r in d0] == ["job-b"]  # job-a's trainer_init was the day before
    # The component's owner (the default mapping: trainer) holds all of it; data owns none.
    owned = client.get("/api/v1/fleet/lost", params={**params, "component_owner": "trainer"})
    assert owned.json()["rows"] == rows
    data = client.get("/api/v1/fleet/lost", params={**params, "component_owner": "data"})
    assert data.json()["rows"] == [] and data.json()["total_gpu_h"] == 0
    # by=component honours the component filter too.
    comp = client.get("/api/v1/fleet/lost", params={**RANGE, "component": "trainer_init"}).json()[
        "rows"
    ]
    assert [r["component"] for r in comp] == ["trainer_init"]
    assert comp[0]["gpu_h"] == approx((4800 + 1600) / 3600)


def test_csv_and_bad_parameters(client: Any, fleet: None) -> None:
    params = {**RANGE, "by": "job", "component": "trainer_init", "format": "csv"}
    r = client.get("/api/v1/fleet/lost", params=params)
    rows = list(csv.DictReader(io.StringIO(r.text)))
    assert r.text.splitlines()[0] == "job_id,model,gpu_h,share"
    assert [row["job_id"] for row in rows] == ["job-a", "job-b", "job-b2"]
    r = client.get("/api/v1/fleet/lost", params={**RANGE, "by": "model", "format": "csv"})
    assert r.text.splitlines()[0] == "model,gpu_h,share"
    bad = [
        {"component": "effective_training"},
        {"component": "colour"},
        {"by": "job", "top": 0},
    ]
    for extra in bad:
        assert client.get("/api/v1/fleet/lost", params={**RANGE, **extra}).status_code == 422


def test_jobs_sort_by_a_components_gpu_hours(client: Any, fleet: None) -> None:
    truth = per_job(client, "wasted_training")
    # wasted_training: job-a 100 s blocking x 8 GPUs; job-b, job-b2 500 s replay x 2 GPUs.
    assert {j: v for j, (_m, v) in truth.items()} == approx(
        {"job-a": 800 / 3600, "job-b": 1000 / 3600, "job-b2": 1000 / 3600}
    )
    params = {"component": "wasted_training", "sort": "-component_gpu_h"}
    jobs = client.get("/api/v1/jobs", params=params).json()["jobs"]
    assert [j["job_id"] for j in jobs] == ["job-b", "job-b2", "job-a"]
    assert {j["job_id"]: j["component_gpu_h"] for j in jobs} == approx(
        {j: v for j, (_m, v) in truth.items()}
    )
    up = client.get("/api/v1/jobs", params={**params, "sort": "component_gpu_h"}).json()["jobs"]
    assert [j["job_id"] for j in up] == ["job-a", "job-b", "job-b2"]
    plain = client.get("/api/v1/jobs").json()["jobs"]
    assert all(j["component_gpu_h"] is None for j in plain)
    assert client.get("/api/v1/jobs", params={"sort": "-component_gpu_h"}).status_code == 422
    assert client.get("/api/v1/jobs", params={"component": "colour"}).status_code == 422
