"""Checkpoint advice and critical path over ingested jobs (hand-computed, both databases)."""

from __future__ import annotations

import functools
import math
from typing import Any

import pytest
from sqlalchemy import delete

from backend.db import Database
from backend.ett.models import JobResult
from backend.events.models import RawEvent
from tests.backend.fleet.fleet_jobs import D0, Job

# Answers are rounded by unit (docs/API.md): pct 2 decimals, gpu_h and s 3.
_approx = functools.partial(pytest.approx, abs=5e-3)

U = D0 + 3600.0


def checkpointed_job() -> Job:
    """m-k, 1 GPU, checkpoint every 1800 s (30 s blocking), one failure after 2 h of training.

    Training time = 7200 + 3600 s = 3 h, NoF 1: lambda = 1/3 per hour; CSBT 30 s;
    replay after the restart: cursor 5500 -> 7200 = 1700 s.
    """
    j = Job("k1")
    j.add("job_submitted", ts=U, model="m-k", gpus=1, config={"checkpoint_interval_s": 1800})
    j.add("attempt_started", 0, ts=U)
    j.phase(0, "trainer_init", U, U + 100)
    j.progress(0, U + 100, U + 7300, 0, 7200)
    for t in (1900, 3700, 5500):
        j.add("checkpoint", 0, start=U + t, blocking_end=U + t + 30)
    j.add("failure", 0, ts=U + 7300, kind="app_error")
    j.add("attempt_ended", 0, ts=U + 7300, reason="failure")
    j.add("attempt_started", 1, ts=U + 7300)
    j.phase(1, "trainer_init", U + 7300, U + 7400)
    j.progress(1, U + 7400, U + 11000, 5500, 9100)
    j.add("attempt_ended", 1, ts=U + 11000, reason="completed")
    j.add("job_ended", ts=U + 11000, status="succeeded")
    return j


def init_job() -> Job:
    """m-i: attempt 0 runs the warm-up (240 s) then PT2 (600 s); attempt 1 overlaps them."""
    j = Job("i1")
    j.add("job_submitted", ts=U, model="m-i", gpus=8)
    j.add("attempt_started", 0, ts=U)
    j.phase(0, "trainer_init.first_batch", U + 100, U + 340)
    j.phase(0, "trainer_init.train_module", U + 100, U + 200)
    j.phase(0, "pt2_compile", U + 340, U + 940)
    j.progress(0, U + 940, U + 2000, 0, 1000)
    j.add("failure", 0, ts=U + 2000, kind="preemption")
    j.add("attempt_ended", 0, ts=U + 2000, reason="preempted")
    a = U + 2100
    j.add("attempt_started", 1, ts=a)
    j.phase(1, "trainer_init.first_batch", a, a + 240)
    j.phase(1, "pt2_compile", a + 60, a + 660)
    j.progress(1, a + 660, a + 2000, 1000, 2340)
    j.add("attempt_ended", 1, ts=a + 2000, reason="completed")
    j.add("job_ended", ts=a + 2000, status="succeeded")
    return j


RANGE = {"start": "2026-04-24T00:00:00Z", "end": "2026-04-27T00:00:00Z"}


def test_checkpoint_advice(client: Any, post: Any) -> None:
    assert post(checkpointed_job().events).status_code == 200
    r = client.get("/api/v1/models/m-k/checkpoint-advice", params=RANGE)
    assert r.status_code == 200, r.text
    a = r.json()
    assert a["jobs"] == 1 and a["checkpoints"] == 3
    assert a["csbt_s"] == _approx(30)
    assert a["training_h"] == _approx(3)
    assert a["failure_rate_per_h"] == _approx(1 / 3)
    assert a["current_interval_s"] == 1800 and a["current_interval_source"] == "config"
    assert a["measured_interval_s"] == _approx(1800)
    tau = math.sqrt(2 * 30 * 10_800)  # 805 s
    assert a["optimal_interval_s"] == _approx(tau)
    f_now = 1800 / (2 * 10_800) + 30 / 1800  # 0.1
    f_best = 2 * 30 / tau
    assert a["wtt_pct_current"] == _approx(f_now * 100)
    assert a["minutes_per_day_saved"] == _approx(1440 * (f_now - f_best))
    assert a["utt"]["predicted_s"] == _approx(900)
    assert a["utt"]["measured_s"] == _approx(1700)
    assert a["utt"]["measured_pct"] == _approx(1700 / 10_800 * 100)
    assert any(p["interval_s"] == _approx(tau) for p in a["curve"])
    best = min(a["curve"], key=lambda p: p["wtt_pct"])
    assert best["interval_s"] == _approx(tau)
    assert a["start"] == "2026-04-24T00:00:00.000Z"


def test_checkpoint_advice_errors(client: Any, post: Any) -> None:
    assert post(checkpointed_job().events).status_code == 200
    assert client.get("/api/v1/models/nope/checkpoint-advice").status_code == 404
    r = client.get("/api/v1/models/m-k/checkpoint-advice", params={"points": 1})
    assert r.status_code == 422
    empty = client.get("/api/v1/models/m-k/checkpoint-advice").json()  # last 30 days: no jobs
    assert empty["jobs"] == 0 and empty["optimal_interval_s"] is None and empty["notes"]


def test_critical_path(client: Any, post: Any) -> None:
    assert post(init_job().events).status_code == 200
    r = client.get("/api/v1/jobs/i1/critical-path")
    assert r.status_code == 200, r.text
    body = r.json()
    a0, a1 = body["attempts"]
    assert [(p["phase"], p["duration_s"]) for p in a0["path"]] == [
        ("hardware_setup", 100),
        ("trainer_init.first_batch", 240),
        ("pt2_compile", 600),
    ]
    hidden = {p["phase"]: p["hidden_s"] for p in a0["phases"]}
    assert hidden["trainer_init.train_module"] == _approx(100)
    assert a0["fast_batch"]["saving_s"] == _approx(240)
    # attempt 1 starts after 100 s of scheduling; warm-up and compile already overlap 180 s
    assert a1["path"][0]["phase"] == "scheduling"
    assert a1["fast_batch"]["overlap_s"] == _approx(180)
    assert a1["fast_batch"]["saving_s"] == _approx(60)
    assert body["fast_batch"]["saving_s"] == _approx(300)
    assert a0["training_start"].endswith("Z")
    assert client.get("/api/v1/jobs/nope/critical-path").status_code == 404


def test_critical_path_reads_stored_results_not_raw_events(
    client: Any, post: Any, database: Database
) -> None:
    """The same answer after the job's raw events are gone: it comes from the engine's results."""
    assert post(init_job().events).status_code == 200
    before = client.get("/api/v1/jobs/i1/critical-path")
    assert before.status_code == 200, before.text
    with database.session() as s:
        s.execute(delete(RawEvent).where(RawEvent.job_id == "i1"))
        s.commit()
    after = client.get("/api/v1/jobs/i1/critical-path")
    assert after.status_code == 200, after.text
    assert after.json() == before.json()
    assert after.json()["fast_batch"]["saving_s"] == pytest.approx(300)


def test_critical_path_of_a_result_without_spans_asks_for_a_recompute(
    client: Any, post: Any, database: Database
) -> None:
    """A result stored before spans were kept answers 404 and says to recompute it."""
    assert post(init_job().events).status_code == 200
    with database.session() as s:
        row = s.get(JobResult, "i1")
        assert row is not None and "spans" in row.result
        row.result = {k: v for k, v in row.result.items() if k != "spans"}
        s.commit()
    r = client.get("/api/v1/jobs/i1/critical-path")
    assert r.status_code == 404
    assert "recompute" in r.text
