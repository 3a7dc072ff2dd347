"""Live indicators on both databases: a hang pages its phase's owner at the first pass past the
bound, names the job, bound, overrun and GPU-hours, reaches a real HTTP receiver and a real
Alertmanager, and resolves when the job moves on; crash loops and restart storms page too; a
healthy slow compile inside its bound never does; the volume guards keep a smoke job quiet."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from sqlalchemy import select

from backend.alerts import cycle, live
from backend.alerts.delivery import RetryPolicy
from backend.alerts.models import AlertState
from backend.alerts.slos import load_slo_file
from backend.config import Settings
from backend.db import Database
from backend.live import learn
from tests.backend.live import fleet

FAST = RetryPolicy(max_attempts=2, base_delay_s=0.01, max_delay_s=0.05, deadline_s=5)
OWNERS = ("trainer", "compiler", "cluster", "data", "checkpoint", "fleet", "scheduler")


def _slo_file(tmp_path: Path, receiver_url: str, am_url: str | None = None) -> Path:
    """The shipped SLOs, each owner with a webhook (and, given one, Alertmanager)."""
    slos = [s.to_doc() for s in load_slo_file().slos]
    for doc in slos:
        doc["window"], doc["for"] = doc.pop("window_s"), doc.pop("for_s")
    channels: dict[str, list[dict[str, Any]]] = {}
    for owner in OWNERS:
        channels[owner] = [{"name": "hook", "kind": "webhook", "target": f"{receiver_url}/{owner}"}]
        if am_url:
            channels[owner].append({"name": "am", "kind": "alertmanager", "target": am_url})
    path = tmp_path / "slos.yaml"
    path.write_text(yaml.safe_dump({"slos": slos, "channels": channels}))
    return path


@pytest.fixture
def live_settings(settings: Settings, tmp_path: Path, http_receiver: Any) -> Settings:
    settings.slos_file = _slo_file(tmp_path, http_receiver.url)
    settings.public_url = "http://dash.example:8050"
    return settings


def _pass(database: Database, settings: Settings, now: float | None = None) -> Any:
    return live.evaluate_live_once(
        db=database, settings=settings, holder="t", now=now, policy=FAST, release=True
    )


def _learn(database: Database, settings: Settings) -> None:
    with database.session() as s:
        learn.refresh(s, settings)
        s.commit()


def _states(database: Database) -> dict[str, AlertState]:
    with database.session() as s:
        return {
            f"{a.slo_name}/{(a.labels or {}).get('job_id')}": a
            for a in s.scalars(select(AlertState))
        }


def test_a_hang_pages_its_phase_owner_with_bound_overrun_and_burn_then_resolves(
    post: Any, database: Database, live_settings: Settings, http_receiver: Any
) -> None:
    now = time.time()
    post(fleet.history("m", now - 10 * 3600))
    _learn(database, live_settings)
    # process group: bound 85.65 s (test_live_service); open since now - 110: 24 s over
    hung = fleet.hung_in_phase("pg-1", "m", now - 120, "trainer_init.process_group", now)
    # cold compile: bound 556.5 s; open since now - 290: inside it, no page
    compiling = fleet.hung_in_phase("cc-1", "m", now - 300, "pt2_compile", now)
    post(hung.events + compiling.events)
    report = _pass(database, live_settings)
    assert report.evaluated and report.errors == []
    (hook,) = http_receiver.wait_for("/trainer", 1)
    alert = hook.body["alerts"][0]
    assert alert["status"] == "firing"
    labels = alert["labels"]
    assert labels["alertname"] == "hung_beyond_bound" and labels["owner"] == "trainer"
    assert labels["job_id"] == "pg-1" and labels["model"] == "m"
    assert labels["phase"] == "trainer_init.process_group" and labels["component"] == "trainer_init"
    ann = alert["annotations"]
    assert ann["job"] == "pg-1" and ann["bound"] == "86 s"
    assert 20 <= float(ann["overrun"].split()[0]) <= 40
    assert float(ann["gpu_hours_burned"]) == pytest.approx(8 * 120 / 3600, abs=0.01)
    assert ann["dashboard"] == "http://dash.example:8050/job?job_id=pg-1"
    assert "learned from 10 samples" in ann["description"]
    assert "trainer_init.process_group" in ann["summary"] and "GPU-hours" in ann["summary"]
    assert http_receiver.on("/compiler") == []
    # the next passes send nothing new while it stays hung
    _pass(database, live_settings)
    assert len(http_receiver.on("/trainer")) == 1
    # the span closes and the loop trains: resolved
    hung.add(
        "phase",
        0,
        phase="trainer_init.process_group",
        start=now - 110,
        end=time.time(),
        span_id="pg-1-open",
    )
    post(hung.events[-1:])
    _pass(database, live_settings)
    hooks = http_receiver.wait_for("/trainer", 2)
    assert [h.body["status"] for h in hooks] == ["firing", "resolved"]
    assert "no longer hung" in hooks[1].body["alerts"][0]["annotations"]["summary"]
    # the compile crosses its bound later (judged at a later now): the compiler team is paged
    _pass(database, live_settings, now=now + 280)
    (compiler,) = http_receiver.wait_for("/compiler", 1)
    assert compiler.body["alerts"][0]["labels"]["job_id"] == "cc-1"
    assert compiler.body["alerts"][0]["labels"]["phase"] == "pt2_compile"


def test_a_hang_reaches_a_real_alertmanager(
    post: Any,
    database: Database,
    settings: Settings,
    tmp_path: Path,
    alertmanager: Any,
    http_receiver: Any,
) -> None:
    settings.slos_file = _slo_file(tmp_path, http_receiver.url, alertmanager.url)
    now = time.time()
    post(fleet.history("m", now - 10 * 3600))
    _learn(database, settings)
    post(fleet.hung_in_phase("cc-2", "m", now - 700, "pt2_compile", now).events)
    _pass(database, settings)
    got = alertmanager.receiver.wait_for("/am/compiler", 1, timeout=15)
    body = got[0].body
    assert body["receiver"] == "compiler" and body["status"] == "firing"
    assert body["alerts"][0]["labels"]["job_id"] == "cc-2"
    assert body["alerts"][0]["labels"]["alertname"] == "hung_beyond_bound"
    listed = [a for a in alertmanager.alerts() if a["labels"].get("job_id") == "cc-2"]
    assert len(listed) == 1 and listed[0]["status"]["state"] == "active"


def test_crash_loop_and_restart_storm_page_and_a_slow_healthy_compile_does_not(
    post: Any, database: Database, live_settings: Settings, http_receiver: Any
) -> None:
    now = time.time()
    post(fleet.history("m", now - 10 * 3600))
    _learn(database, live_settings)
    # 5 attempts in 5 minutes, none past cursor 300 after the first
    loop = fleet.crash_loop("cl-1", "m", now - 300, 5)
    # a cold compile open 290 s: about twice the model's median (145 s), inside its 556.5 s
    slow = fleet.hung_in_phase("slow-1", "m", now - 300, "pt2_compile", now)
    post(loop.events + slow.events)
    _pass(database, live_settings)
    (trainer,) = http_receiver.wait_for("/trainer", 1)
    a = trainer.body["alerts"][0]
    assert (a["labels"]["alertname"], a["labels"]["job_id"]) == ("crash_loop", "cl-1")
    assert "crash looping (4 attempts in a row" in a["annotations"]["summary"]
    (cluster,) = http_receiver.wait_for("/cluster", 1)
    b = cluster.body["alerts"][0]
    assert (b["labels"]["alertname"], b["labels"]["job_id"]) == ("restart_storm", "cl-1")
    states = _states(database)
    assert states["crash_loop/cl-1"].state == "firing"
    assert not any(k.endswith("/slow-1") for k in states), "a healthy slow compile paged"


def test_volume_guards_keep_a_smoke_job_quiet(
    post: Any, database: Database, live_settings: Settings, http_receiver: Any
) -> None:
    """A one-second job at 0% ETT: the shipped model_ett_floor would have gone pending (the
    README snippet's job did); under 3 jobs and 10 GPU-hours it measures nothing."""
    t = time.time() - 600
    smoke = [
        {
            "event_id": "s1",
            "job_id": "smoke",
            "type": "job_submitted",
            "ts": t,
            "model": "s",
            "gpus": 8,
        },
        {"event_id": "s2", "job_id": "smoke", "type": "attempt_started", "attempt": 0, "ts": t},
        {
            "event_id": "s3",
            "job_id": "smoke",
            "type": "attempt_ended",
            "attempt": 0,
            "ts": t + 1,
            "reason": "completed",
        },
        {
            "event_id": "s4",
            "job_id": "smoke",
            "type": "job_ended",
            "ts": t + 1,
            "status": "succeeded",
        },
    ]
    post(smoke)
    report = cycle.evaluate_once(
        db=database, settings=live_settings, holder="t", policy=FAST, release=True
    )
    assert report.evaluated and report.errors == []
    states = {a.slo_name: a for a in _states(database).values()}
    assert "model_ett_floor" not in states and "unattributed_share" not in states
    assert http_receiver.requests == []
