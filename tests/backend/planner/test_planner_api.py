"""The planner's REST endpoints on a small demo fleet loaded through ingest and the ETT engine."""

from __future__ import annotations

import math
from datetime import UTC, datetime

import pytest
from fastapi.testclient import TestClient

from backend.app import create_app
from backend.config import Settings
from backend.db import Database
from backend.demo import fleet, loader
from backend.demo.backtest import demo_observations
from backend.fleet.days import DAY_S
from backend.planner.fit import fit_inputs, measured_ett_pct
from backend.planner.model import predict
from backend.planner.service import inputs_from_dict
from tests.conftest import DIALECTS, database_at

# A fixed clock: the demo's fleet depends on its `now`, and the fit's check against the window's
# last quarter (about 7 jobs) is only meaningful on a fleet that does not move with the day.
NOW = 1_796_000_000.0 + 14 * 86400.0
SPEC = fleet.FleetSpec(seed=7, models=3, days=40.0, now=NOW)
START = NOW - 41 * DAY_S
END = NOW + 60.0
# The answers are rounded (docs/API.md "Units and rounding"): seconds to 3 decimals, ETT% to 2,
# shares to 4, unit-less numbers to 6 significant digits.
S, PCT, SHARE, SIG = 5e-4, 5e-3, 5e-5, 1e-5
RANGE = {
    "submitted_after": datetime.fromtimestamp(START, UTC).isoformat(),
    "submitted_before": datetime.fromtimestamp(END, UTC).isoformat(),
}


@pytest.fixture(scope="module", params=DIALECTS)
def seeded(request, tmp_path_factory):
    """The demo fleet, loaded once per dialect into this module's own database: every test here
    only reads (a what-if is a POST that stores nothing)."""
    home = tmp_path_factory.mktemp("planner")
    with database_at(request.param, home, "head") as url:
        db = Database(url)
        settings = Settings(home=home, database_url=url, recompute_mode="inline")
        report = loader.load_in_process(
            db, settings, fleet.fleet_events(SPEC), now=NOW, progress=False
        )
        assert report.accepted > 0 and not report.rejected
        yield create_app(settings, database=db, start_workers=False, with_dashboard=False)
        db.dispose()


@pytest.fixture
def client(seeded):
    """An HTTP client over the seeded fleet."""
    with TestClient(seeded) as c:
        yield c


def _fleet_model() -> str:
    return fleet.fleet_profile(SPEC.seed, 0).name


def _cache_model(client) -> str:
    opps = client.get("/api/v1/plan/fleet", params={**RANGE, "top": 50}).json()["opportunities"]
    cache = next(o for o in opps if o["id"] == "pt2_compile_cache")
    return cache["models"][0]["model"]


def test_model_plan_fits_the_stored_jobs_like_the_pure_path(seeded, client):
    model = _fleet_model()
    answer = client.get(f"/api/v1/plan/models/{model}", params=RANGE)
    assert answer.status_code == 200, answer.text
    body = answer.json()
    # The same jobs through the engine in memory and the planner's pure fit.
    jobs = [j for j in demo_observations(SPEC) if j.model == model]
    pure = fit_inputs(jobs, end=END, window_days=(END - START) / DAY_S)
    assert pure.inputs is not None
    assert body["fit"]["jobs"] == len(jobs) == pure.jobs
    assert body["fit"]["failures"] == pure.failures
    inputs = body["inputs"]
    assert inputs["gpus"] == pure.inputs.gpus
    assert inputs["csbt_s"] == pytest.approx(pure.inputs.csbt_s, abs=S)
    assert inputs["failures_per_job"] == pytest.approx(pure.inputs.failures_per_job, rel=SIG)
    for part, s in pure.inputs.cold_start_s.items():
        assert inputs["cold_start_s"][part] == pytest.approx(s, abs=S)
    for part, s in pure.inputs.recovery_s.items():
        assert inputs["recovery_s"][part] == pytest.approx(s, abs=S)
    assert inputs["stall_s_per_h"] == pytest.approx(pure.inputs.stall_s_per_h, abs=S)
    assert inputs["other_in_loop_s_per_h"] == pytest.approx(
        dict(pure.inputs.other_in_loop_s_per_h), abs=S
    )
    assert inputs["final_shutdown_s"] == pytest.approx(pure.inputs.final_shutdown_s, abs=S)
    assert inputs["give_up_share"] == pytest.approx(pure.inputs.give_up_share, abs=SHARE)
    assert inputs["give_up_s"] == pytest.approx(dict(pure.inputs.give_up_s), abs=S)
    pred = body["prediction"]
    assert pred["ett_pct"] == pytest.approx(predict(pure.inputs).ett_pct, abs=PCT)
    # The dashboard's what-if sliders recompute from the REST inputs: the round trip keeps them.
    assert predict(inputs_from_dict(inputs)).ett_pct == pytest.approx(pred["ett_pct"], abs=0.01)
    # The fit follows the current level (the model's shutdown and cold start dropped inside
    # the window): the prediction is near what the window's last quarter measured.
    recent = [j for j in jobs if j.submitted_at >= END - (END - START) / 4]
    assert abs(pred["ett_pct"] - measured_ett_pct(recent)) < 2.0
    assert sum(pred["lost_gpu_h_per_day_by_component"].values()) == pytest.approx(
        pred["lost_gpu_h_per_day"], abs=0.01
    )
    ids = {w["id"] for w in body["what_ifs"]}
    assert {"gpus_doubled", "failures_halved"} <= ids
    # The compile cache applies where compile is above the fleet's p25: the top contributor.
    cached = _cache_model(client)
    body = client.get(f"/api/v1/plan/models/{cached}", params=RANGE).json()
    inputs = body["inputs"]
    cache = next(w for w in body["what_ifs"] if w["id"] == "pt2_compile_cache")
    assert cache["owner"] == "compiler"
    assert cache["ett_pct_after"] > cache["ett_pct_before"]
    assert cache["gpu_h_per_day_freed"] > 0
    # Recoveries repeat the compile: the cascade saving exceeds the one-off TTS saving.
    if inputs["failures_per_job"] > 0:
        assert cache["cascade_saving_s"] > cache["tts_saving_s"] > 0


def test_few_jobs_carry_a_warning(seeded, client):
    # A benchmark model has two jobs (its pair) in the window.
    body = client.get("/api/v1/plan/models/model-a", params=RANGE).json()
    assert body["fit"]["jobs"] == 2
    assert any("rests on 2 job(s)" in w for w in body["fit"]["warnings"])


def test_fleet_ranking_sums_models_and_names_owners(seeded, client):
    answer = client.get("/api/v1/plan/fleet", params={**RANGE, "top": 50})
    assert answer.status_code == 200, answer.text
    body = answer.json()
    opps = body["opportunities"]
    assert opps, body
    freed = [o["gpu_h_per_day_freed"] for o in opps]
    assert freed == sorted(freed, reverse=True)
    assert [o["rank"] for o in opps] == list(range(1, len(opps) + 1))
    for o in opps:
        assert o["gpu_h_per_day_freed"] == pytest.approx(
            sum(m["gpu_h_per_day_freed"] for m in o["models"]), abs=0.01
        )
        assert o["owner"]
    owners = {o["id"]: o["owner"] for o in opps}
    assert owners.get("async_checkpointing") == "checkpoint"
    assert owners.get("pt2_compile_cache") == "compiler"
    assert {m["model"] for m in body["models"]} >= {_fleet_model(), "model-a"}


def test_custom_what_if_matches_the_standard_one(seeded, client):
    model = _cache_model(client)
    plan = client.get(f"/api/v1/plan/models/{model}", params=RANGE).json()
    standard = next(w for w in plan["what_ifs"] if w["id"] == "pt2_compile_cache")
    answer = client.post(
        "/api/v1/plan/what-if",
        json={"model": model, **RANGE, "change": {"cut_pct": {"pt2_compile": 80}}},
    )
    assert answer.status_code == 200, answer.text
    body = answer.json()
    (one,) = body["models"]
    assert one["ett_pct_after"] == pytest.approx(standard["ett_pct_after"])
    assert body["gpu_h_per_day_freed"] == pytest.approx(standard["gpu_h_per_day_freed"])
    assert one["inputs"]["gpus"] == plan["inputs"]["gpus"]
    # The whole fleet at once, and a GPU-count change (failures per GPU: more GPUs, more lost).
    everyone = client.post("/api/v1/plan/what-if", json={**RANGE, "change": {"gpus": 4096}}).json()
    assert len(everyone["models"]) >= 4
    assert all(m["gpu_h_per_day_freed"] < 0 for m in everyone["models"])
    tau = client.post(
        "/api/v1/plan/what-if",
        json={"model": model, **RANGE, "change": {"optimal_interval": True}},
    ).json()["models"][0]
    assert tau["change"]["interval_s"] == pytest.approx(plan["inputs"]["optimal_interval_s"])


@pytest.mark.parametrize(
    ("change", "needle"),
    [
        ({"cut_pct": {"compile": 50}}, "cut_pct"),
        ({"cut_pct": {"pt2_compile": 150}}, "between 0 and 100"),
        ({"scale": {"pt2_compile": -1}}, "between 0 and 10"),
        ({"failure_scale": {"cosmic_rays": 0.5}}, "failure_scale"),
        ({}, "the change is empty"),
        ({"interval_s": 600, "optimal_interval": True}, "not both"),
        ({"staging_fraction": 0.1}, "needs async_checkpointing"),
        ({"gpus": 0}, "greater than or equal to 1"),
        ({"speed": "fast"}, "Extra inputs are not permitted"),
    ],
)
def test_bad_what_if_is_refused_with_a_clear_message(client, change, needle):
    answer = client.post("/api/v1/plan/what-if", json={"model": _fleet_model(), "change": change})
    assert answer.status_code == 422
    assert needle in answer.text


def test_unknown_model_and_bad_range(client):
    assert client.get("/api/v1/plan/models/no-such-model").status_code == 404
    answer = client.post(
        "/api/v1/plan/what-if", json={"model": "no-such-model", "change": {"gpus": 8}}
    )
    assert answer.status_code == 404 and "unknown model" in answer.text
    bad = client.get(
        "/api/v1/plan/fleet",
        params={
            "submitted_after": RANGE["submitted_before"],
            "submitted_before": RANGE["submitted_after"],
        },
    )
    assert bad.status_code == 422 and "submitted_after must be before submitted_before" in bad.text
    # The old names still work for one release, flagged deprecated; they fit the same jobs.
    old = client.get(
        "/api/v1/plan/fleet",
        params={"start": RANGE["submitted_after"], "end": RANGE["submitted_before"]},
    )
    new = client.get("/api/v1/plan/fleet", params=RANGE)
    assert (
        old.headers.get("deprecation") == "true" and "use submitted_after" in old.headers["warning"]
    )
    assert old.json()["lost_gpu_h_per_day"] == new.json()["lost_gpu_h_per_day"]
    assert "deprecation" not in new.headers
    assert client.get("/api/v1/plan/fleet", params={"half_life_days": 0}).status_code == 422
    assert not math.isnan(client.get("/api/v1/plan/fleet").json()["lost_gpu_h_per_day"])


def test_half_life_switches_the_fit_to_the_recency_mean(seeded, client):
    model = _fleet_model()
    level = client.get(f"/api/v1/plan/models/{model}", params=RANGE).json()
    recency = client.get(
        f"/api/v1/plan/models/{model}", params={**RANGE, "half_life_days": 14}
    ).json()
    assert level["fit"]["estimator"] == "level" and level["fit"]["half_life_days"] is None
    assert recency["fit"]["estimator"] == "recency" and recency["fit"]["half_life_days"] == 14
    jobs = [j for j in demo_observations(SPEC) if j.model == model]
    pure = fit_inputs(
        jobs, end=END, window_days=(END - START) / DAY_S, half_life_days=14, estimator="recency"
    )
    assert pure.inputs is not None
    assert recency["prediction"]["ett_pct"] == pytest.approx(predict(pure.inputs).ett_pct, abs=PCT)
    assert recency["prediction"]["ett_pct"] != pytest.approx(level["prediction"]["ett_pct"])


def test_a_tiny_half_life_weighs_the_newest_job_not_500(seeded, client):
    # Every job is over 1,074 half-lives old: 2^-age underflowed each weight to 0 (500 before).
    model = _fleet_model()
    params = {**RANGE, "half_life_days": 0.0001}
    plan = client.get(f"/api/v1/plan/models/{model}", params=params)
    assert plan.status_code == 200, plan.text[:300]
    fit = plan.json()["fit"]
    assert fit["estimator"] == "recency" and fit["half_life_days"] == 0.0001
    assert fit["effective_jobs"] == pytest.approx(1.0, abs=0.01)  # the newest job carries it
    assert 0 < plan.json()["prediction"]["ett_pct"] <= 100
    jobs = [j for j in demo_observations(SPEC) if j.model == model]
    pure = fit_inputs(
        jobs, end=END, window_days=(END - START) / DAY_S, half_life_days=0.0001, estimator="recency"
    )
    assert pure.inputs is not None
    assert plan.json()["prediction"]["ett_pct"] == pytest.approx(
        predict(pure.inputs).ett_pct, abs=PCT
    )
    fleet_plan = client.get("/api/v1/plan/fleet", params=params)
    assert fleet_plan.status_code == 200, fleet_plan.text[:300]
    assert fleet_plan.json()["opportunities"]
    what_if = client.post(
        "/api/v1/plan/what-if",
        json={
            "model": model,
            "half_life_days": 0.0001,
            "change": {"interval_s": 3600},
            **RANGE,
        },
    )
    assert what_if.status_code == 200, what_if.text[:300]
    (one,) = what_if.json()["models"]
    assert one["fit"]["effective_jobs"] == pytest.approx(1.0, abs=0.01)


@pytest.mark.parametrize("interval", [5e-324, 0.5])
def test_a_sub_second_interval_is_refused_not_nan(seeded, client, interval):
    model = _fleet_model()
    r = client.post(
        "/api/v1/plan/what-if",
        json={"model": model, "change": {"interval_s": interval}, **RANGE},
    )
    assert r.status_code == 422, r.text[:300]
    assert r.json()["detail"] == "change.interval_s: Input should be greater than or equal to 1"
    ok = client.post(
        "/api/v1/plan/what-if", json={"model": model, "change": {"interval_s": 1}, **RANGE}
    )
    assert ok.status_code == 200, ok.text[:300]
    (one,) = ok.json()["models"]
    assert 0 <= one["ett_pct_after"] <= 100 and one["ett_pct_after"] < one["ett_pct_before"]


def _floats(value, key=""):
    """(field name, float) for every float in an answer, a map's values under its own name."""
    if isinstance(value, dict):
        for k, v in value.items():
            yield from _floats(v, k if not isinstance(v, float) or not key.endswith("_s") else key)
    elif isinstance(value, list):
        for v in value:
            yield from _floats(v, key)
    elif isinstance(value, float):
        yield key, value


def test_plan_answers_are_rounded_as_docs_api_says(seeded, client):
    model = _fleet_model()
    plan = client.get(f"/api/v1/plan/models/{model}", params=RANGE).json()
    fleet_plan = client.get("/api/v1/plan/fleet", params=RANGE).json()
    checked = 0
    for key, v in [*_floats(plan), *_floats(fleet_plan)]:
        if key.endswith("_pct") or key == "ett_pct_delta":
            assert v == round(v, 2), (key, v)
            checked += 1
        elif key.endswith(("_s", "_gpu_h")) or "_gpu_h_" in key:
            assert v == round(v, 3), (key, v)
            checked += 1
        elif key.endswith("_share"):
            assert v == round(v, 4), (key, v)
        else:
            assert v == float(f"{v:.6g}"), (key, v)
    assert checked > 20
    # Before rounding the prediction had a dozen decimals; the answer keeps two.
    raw = predict(inputs_from_dict(plan["inputs"])).ett_pct
    assert raw != round(raw, 2) and plan["prediction"]["ett_pct"] == pytest.approx(raw, abs=0.01)
