"""Bounds learned from ingested history and the fleet now over REST, on both databases."""

from __future__ import annotations

import time
from typing import Any

import pytest

from backend.config import Settings
from backend.db import Database
from backend.live import learn
from backend.live.models import BoundSample, LearnedBound
from tests.backend.live import fleet


def _learn(database: Database, settings: Settings) -> dict[str, int]:
    with database.session() as s:
        done = learn.refresh(s, settings)
        s.commit()
    return done


def _bounds(client: Any, model: str, **params: Any) -> dict[tuple[str, str], dict[str, Any]]:
    answer = client.get("/api/v1/live/bounds", params={"model": model, **params})
    assert answer.status_code == 200, answer.text
    return {(b["phase"], b["variant"]): b for b in answer.json()["bounds"]}


def test_bounds_learned_from_the_models_own_history(
    post: Any, client: Any, database: Database, settings: Settings
) -> None:
    t0 = time.time() - 10 * 3600
    assert post(fleet.history("m", t0)).status_code == 200
    done = _learn(database, settings)
    assert done["jobs"] == 10
    got = _bounds(client, "m", samples=3)
    # process group 20..29 s: p95 = 28 + 0.55 = 28.55, x3 = 85.65
    pg = got[("trainer_init.process_group", "")]
    assert (pg["source"], pg["samples"]) == ("model", 10)
    assert pg["bound_s"] == pytest.approx(85.65) and pg["quantile_s"] == pytest.approx(28.55)
    assert [s["value_s"] for s in pg["sample_values"]] == pytest.approx([29.0, 28.0, 27.0])
    assert pg["sample_values"][0]["job_id"] == "m-h09"
    # cold compile 100..190 s: p95 = 185.5, x3 = 556.5; no warm compile yet: the cold bound
    assert got[("pt2_compile", "cold")]["bound_s"] == pytest.approx(556.5)
    warm = got[("pt2_compile", "warm")]
    assert (warm["source"], warm["bound_s"]) == ("model", pytest.approx(556.5))
    # 30 s windows: the longest gap between advances is 30 s, x3 = 90
    assert got[("loop", "")]["bound_s"] == pytest.approx(90.0)
    # hardware set-up 5 s: 15 s is under the 60 s floor
    assert got[("hardware_setup", "")]["bound_s"] == 60.0
    # a model with no history of its own reads the fleet's
    other = _bounds(client, "new-model")
    assert other[("trainer_init.process_group", "")]["source"] == "fleet"
    assert other[("trainer_init.process_group", "")]["bound_s"] == pytest.approx(85.65)
    # a second pass reads nothing new and changes nothing
    assert _learn(database, settings) == {"jobs": 0, "keys": 0, "bounds": 0}


def test_a_bound_never_learns_from_the_job_it_judges(
    post: Any, client: Any, database: Database, settings: Settings
) -> None:
    t0 = time.time() - 10 * 3600
    events = fleet.history("m", t0, n=12)
    # m-h10 and m-h11 never sent job_ended: abandoned (finished) an hour after their last event
    events = [e for e in events if not (e["type"] == "job_ended" and e["job_id"] >= "m-h10")]
    post(events)
    _learn(database, settings)
    assert _bounds(client, "m")[("loop", "")]["samples"] == 12

    def reopen(job_id: str) -> None:
        beat = {"event_id": "late", "job_id": job_id, "type": "heartbeat", "attempt": 0}
        assert post([{**beat, "ts": time.time()}]).json()["accepted"] == 1

    # an event reopens m-h11: open again, it is being judged and takes its samples back
    reopen("m-h11")
    done = _learn(database, settings)
    assert done["jobs"] == 0 and done["keys"] > 0
    with database.session() as s:
        assert not s.query(BoundSample).filter(BoundSample.job_id == "m-h11").count()
    assert _bounds(client, "m")[("loop", "")]["samples"] == 11
    # after a third reopening the model has 9 samples of the loop: under min_samples (10), so
    # neither it nor the fleet (the same 9) has a learned bound; the default holds
    reopen("m-h10")
    _learn(database, settings)
    assert _bounds(client, "m")[("loop", "")]["samples"] == 10
    with database.session() as s:
        s.query(BoundSample).filter(BoundSample.job_id == "m-h09").delete()
        s.commit()
    with database.session() as s:
        learn.relearn(s, {("m", "loop", "")}, learn.rules_of(settings), time.time())
        s.commit()
        scopes = {b.scope for b in s.query(LearnedBound).filter(LearnedBound.phase == "loop")}
    assert scopes == set()
    assert _bounds(client, "m")[("loop", "")]["source"] == "default"


def test_overrides_in_the_slo_file_win(
    post: Any, client: Any, database: Database, settings: Settings, tmp_path: Any
) -> None:
    path = tmp_path / "slos.yaml"
    path.write_text(
        "bounds:\n"
        "  - {phase: loop, bound: 5m}\n"
        "  - {phase: pt2_compile, variant: cold, model: 'm*', bound: 90m}\n"
    )
    settings.slos_file = path
    post(fleet.history("m", time.time() - 10 * 3600))
    _learn(database, settings)
    got = _bounds(client, "m")
    assert (got[("loop", "")]["bound_s"], got[("loop", "")]["source"]) == (300.0, "override")
    assert got[("pt2_compile", "cold")]["bound_s"] == 5400.0
    assert got[("trainer_init.process_group", "")]["source"] == "model"


def test_the_fleet_now_names_the_hung_job_its_owner_bound_and_burn(
    post: Any, client: Any, database: Database, settings: Settings
) -> None:
    now = time.time()
    post(fleet.history("m", now - 10 * 3600))
    _learn(database, settings)
    hung = fleet.hung_in_phase("hung-1", "m", now - 120, "trainer_init.process_group", now)
    assert post(hung.events).status_code == 200
    ok = fleet.hung_loop("fine-1", "m", now - 105, 3, now)  # trained until 5 s ago
    post(ok.events)
    answer = client.get("/api/v1/live").json()
    assert answer["open_jobs"] == 2
    assert answer["gpus_by_state"]["hung"] == 8 and answer["gpus_by_state"]["training"] == 8
    (bad,) = answer["jobs"]
    assert bad["job_id"] == "hung-1" and bad["state"] == "hung:trainer_init.process_group"
    assert bad["owner"] == "trainer" and bad["team"] == "ranking"
    assert bad["bound_s"] == pytest.approx(85.65)
    # open since now - 110; crossed 85.65 s later
    assert bad["overrun_s"] == pytest.approx(110 - 85.65, abs=3)
    assert bad["gpu_hours_burned"] == pytest.approx(8 * 120 / 3600, abs=0.01)
    assert bad["job_url"] == "/job?job_id=hung-1"
    every = client.get("/api/v1/live", params={"jobs": "all"}).json()["jobs"]
    assert [j["job_id"] for j in every] == ["hung-1", "fine-1"]
    one = client.get("/api/v1/live/jobs/fine-1").json()
    assert one["state"] == "training" and not one["bad"]
    assert client.get("/api/v1/live/jobs/m-h00").status_code == 404
    # the rolling ETT% counts the open jobs' provisional time
    fleet_1h = answer["fleet"]["1h"]
    assert fleet_1h["wall_gpu_h"] == pytest.approx(8 * (120 + 105) / 3600, rel=0.05)
    assert fleet_1h["effective_gpu_h"] == pytest.approx(8 * 90 / 3600, rel=1e-6)
    (model,) = answer["models"]
    assert model["model"] == "m" and model["windows"]["24h"]["ett_pct"] > 0
