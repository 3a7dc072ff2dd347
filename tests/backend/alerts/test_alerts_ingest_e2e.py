"""Through the whole product: events in over the wire, the ETT engine, then the evaluator."""

from __future__ import annotations

import time
from pathlib import Path

import yaml
from sqlalchemy import select

from backend.alerts import cycle
from backend.alerts.delivery import RetryPolicy
from backend.alerts.models import AlertState
from backend.config import Settings
from backend.db import Database
from tests.backend.alerts.fleet import job_events

FAST = RetryPolicy(
    max_attempts=2, base_delay_s=0.01, max_delay_s=0.02, send_timeout_s=2, deadline_s=5
)


def test_preemption_regression_from_ingested_events_pages_the_scheduler(
    database: Database, settings: Settings, post, tmp_path: Path, http_receiver
) -> None:
    now = float(int(time.time()))
    t0 = now - 40_000
    events = []
    for i in range(6):
        events += job_events(f"ok-{i}", "model-a", t0 + i * 10)
    for i in range(3):
        events += job_events(f"pre-{i}", "model-x", t0 + i * 10, preempted_queue_s=6000.0)
    r = post(events)
    assert r.status_code == 200 and r.json()["rejected"] == [], r.text

    doc = {
        "slos": [
            {
                "name": "preemptions",
                "owner": "scheduler",
                "component": "scheduling",
                "indicator": "failures_per_job",
                "failure_kind": "preemption",
                "objective": 0.2,
                "window": "1d",
            },
            {
                "name": "queue_share",
                "owner": "scheduler",
                "component": "scheduling",
                "indicator": "gpu_time_share",
                "objective": 10.0,
                "window": "1d",
            },
            {
                "name": "restore_p90",
                "owner": "checkpoint",
                "component": "trainer_init",
                "phase": "checkpoint_restore",
                "indicator": "duration_percentile",
                "percentile": 90,
                "objective": 600,
                "window": "1d",
            },
        ],
        "channels": {
            "scheduler": [
                {"name": "hook", "kind": "webhook", "target": f"{http_receiver.url}/sched"}
            ],
            "checkpoint": [
                {"name": "hook", "kind": "webhook", "target": f"{http_receiver.url}/ckpt"}
            ],
        },
    }
    path = tmp_path / "slos.yaml"
    path.write_text(yaml.safe_dump(doc))
    cfg = settings.model_copy(update={"slos_file": path})
    report = cycle.evaluate_once(db=database, settings=cfg, now=now, policy=FAST)
    assert report.errors == [] and report.delivered == 2

    with database.session() as s:
        states = {a.slo_name: a for a in s.scalars(select(AlertState))}
    pre = states["preemptions"]
    assert pre.state == "firing" and pre.value == 3 / 9
    assert {d["job_id"] for d in pre.details["job_drivers"]} == {"pre-0", "pre-1", "pre-2"}
    share = states["queue_share"]
    # 6 x 300 s + 3 x (300 + 6000) s queued, of 6 x 4860 + 3 x 13360 s wall (same GPUs everywhere).
    assert abs(share.value - 100 * (6 * 300 + 3 * 6300) / (6 * 4860 + 3 * 13360)) < 1e-6
    assert share.state == "firing" and share.details["models"][0]["model"] == "model-x"
    restore = states["restore_p90"]
    assert restore.state == "inactive" and abs(restore.value - 100.0) < 1e-6

    # Both of the scheduler's notices travel in one group, as Alertmanager would send them.
    sched = http_receiver.on("/sched")
    assert len(sched) == 1
    body = sched[0].body
    assert sorted(a["labels"]["alertname"] for a in body["alerts"]) == [
        "preemptions",
        "queue_share",
    ]
    assert body["commonLabels"]["owner"] == "scheduler" and body["groupLabels"] == {
        "owner": "scheduler"
    }
    assert http_receiver.on("/ckpt") == []
