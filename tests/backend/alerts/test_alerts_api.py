"""REST for SLOs, alerts, silences, acks and owner status; the evaluator the app starts; the CLI."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from fastapi.testclient import TestClient
from sqlalchemy import func, select

from backend import migrate
from backend.alerts import cycle, store
from backend.alerts.models import AlertState, EvaluatorLease
from backend.alerts.scheduled import AlertEvaluator, make_alert_evaluator
from backend.alerts.slos import load_slo_file
from backend.config import Settings
from backend.db import Database
from tests.backend.alerts.fleet import seed_job, slow_scheduling

ETT = str(Path(sys.executable).with_name("ett"))


def _auth(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def _sched_slo(**kw: Any) -> dict[str, Any]:
    doc = {
        "name": "sched_api",
        "owner": "scheduler",
        "component": "scheduling",
        "indicator": "gpu_time_share",
        "objective": 10.0,
        "window": "1d",
        "for": "0s",
    }
    doc.update(kw)
    return doc


def _seed_regression(db: Database, now: float) -> None:
    with db.session() as s:
        for i in range(6):
            seed_job(s, f"h-{i}", "model-a", now - 30_000 + i)
        for i in range(4):
            seed_job(s, f"slow-{i}", "model-x", now - 20_000 + i, slow_scheduling(3000.0))
        s.commit()


def test_slos_from_the_shipped_file_and_the_admin_api(
    client: TestClient, database: Database, admin_token: str
) -> None:
    with database.session() as s:
        store.sync_from_file(db_session=s, slo_file=load_slo_file())
        s.commit()
    listed = client.get("/api/v1/slos").json()
    got = listed["items"]
    assert listed["total"] == len(got) == len(load_slo_file().slos)
    names = {s["name"] for s in got}
    assert {"scheduling_share", "pt2_compile_share", "model_ett_floor", "first_batch_p90"} <= names
    sched = next(s for s in got if s["name"] == "scheduling_share")
    assert sched["owner"] == "scheduler" and sched["window"] == "7d" and sched["window_s"] == 604800
    only = client.get("/api/v1/slos", params={"owner": "compiler"}).json()["items"]
    assert only and {s["owner"] for s in only} == {"compiler"}

    body = _sched_slo()
    assert client.put("/api/v1/slos/sched_api", json=body).status_code == 401
    r = client.put("/api/v1/slos/sched_api", json=body, headers=_auth(admin_token))
    assert r.status_code == 200, r.text
    assert r.json()["for_s"] == 0 and r.json()["window_s"] == 86400
    bad = _sched_slo(indicator="duration_percentile")
    r = client.put("/api/v1/slos/sched_api", json=bad, headers=_auth(admin_token))
    assert r.status_code == 422 and "percentile" in r.json()["detail"]
    r = client.put("/api/v1/slos/other", json=body, headers=_auth(admin_token))
    assert r.status_code == 400
    assert client.get("/api/v1/slos/sched_api").json()["objective"] == 10.0
    # An API edit of a file SLO survives the next file sync.
    edited = {**client.get("/api/v1/slos/scheduling_share").json(), "objective": 12.5}
    for k in ("window", "window_s", "for_s"):
        edited.pop(k)
    edited.update(window="7d", **{"for": "30m"})
    r = client.put("/api/v1/slos/scheduling_share", json=edited, headers=_auth(admin_token))
    assert r.status_code == 200, r.text
    with database.session() as s:
        store.sync_from_file(db_session=s, slo_file=load_slo_file())
        s.commit()
    assert client.get("/api/v1/slos/scheduling_share").json()["objective"] == 12.5
    assert client.delete("/api/v1/slos/sched_api", headers=_auth(admin_token)).status_code == 204
    assert client.get("/api/v1/slos/sched_api").status_code == 404


def test_alerts_ack_silences_and_owner_status(
    client: TestClient, database: Database, settings: Settings, make_token: Any
) -> None:
    admin_token = make_token("admin", name="oncall")
    now = time.time()
    _seed_regression(database, now)
    r = client.put("/api/v1/slos/sched_api", json=_sched_slo(), headers=_auth(admin_token))
    assert r.status_code == 200
    report = cycle.evaluate_once(db=database, settings=settings, now=now, sync_file=False)
    assert report.evaluated

    body = client.get("/api/v1/alerts", params={"owner": "scheduler", "state": "firing"}).json()
    firing = body["items"]
    assert len(firing) == 1 and body["total"] == 1
    alert = firing[0]
    assert alert["slo"] == "sched_api" and alert["value"] > 10.0
    # Rounded for the SLO's unit (docs/API.md): a share of GPU-time to 2 decimals.
    with database.session() as s:
        stored = s.scalars(select(AlertState).where(AlertState.fingerprint == alert["fingerprint"]))
        raw = stored.one().value
    assert raw != round(raw, 2), "the seeded share has more decimals than the answer keeps"
    assert alert["unit"] == "% of GPU-time" and alert["value"] == round(raw, 2)
    assert all(m["value"] == round(m["value"], 2) for m in alert["models"])
    # `total` counts every match, past the limit too.
    with database.session() as s:
        every = s.scalar(select(func.count()).select_from(AlertState))
    page = client.get("/api/v1/alerts", params={"limit": 1}).json()
    assert len(page["items"]) == 1 and page["total"] == every >= 1 and page["limit"] == 1
    assert alert["job_drivers"][0]["job_id"].startswith("slow-")
    assert alert["models"][0]["model"] == "model-x"
    assert alert["fired_at"].endswith("Z") and alert["acknowledged"] is False
    assert client.get("/api/v1/alerts", params={"owner": "compiler"}).json()["items"] == []
    assert client.get("/api/v1/alerts", params={"state": "bogus"}).status_code == 422

    fp = alert["fingerprint"]
    # The actor is the token's name; a body that names one is refused, so it cannot be forged.
    forged = client.post(
        f"/api/v1/alerts/{fp}/ack",
        json={"acknowledged_by": "alice", "comment": "looking"},
        headers=_auth(admin_token),
    )
    assert forged.status_code == 422
    assert "acknowledged_by is not accepted" in forged.text and "admin token" in forged.text
    r = client.post(
        f"/api/v1/alerts/{fp}/ack", json={"comment": "looking"}, headers=_auth(admin_token)
    )
    assert r.status_code == 201 and r.json()["episode"] == 1 and r.json()["by"] == "oncall"
    assert (
        client.post("/api/v1/alerts/nope/ack", json={}, headers=_auth(admin_token)).status_code
        == 404
    )
    again = client.get("/api/v1/alerts", params={"owner": "scheduler"}).json()["items"][0]
    assert again["acknowledged"] is True and again["acknowledgements"][0]["by"] == "oncall"

    status = client.get("/api/v1/owners/scheduler/status").json()
    assert status["status"] == "firing"
    row = next(s for s in status["slos"] if s["name"] == "sched_api")
    assert row["status"] == "firing" and row["instances"][0]["fingerprint"] == fp
    assert status["alerts"][0]["fingerprint"] == fp
    assert status["dashboard"].endswith("/owners?owner=scheduler")
    quiet = client.get("/api/v1/owners/nobody/status").json()
    assert quiet["status"] == "ok" and quiet["slos"] == [] and quiet["alerts"] == []

    # Silences: validation, creation, listing, the alert shows as silenced, expiry.
    no_matcher = {"comment": "x", "duration": "1h"}
    assert client.post("/api/v1/silences", json=no_matcher).status_code == 401
    r = client.post("/api/v1/silences", json=no_matcher, headers=_auth(admin_token))
    assert r.status_code == 422 and "matcher" in r.json()["detail"]
    r = client.post(
        "/api/v1/silences",
        json={"owner": "scheduler", "comment": "x", "ends_at": "yesterday"},
        headers=_auth(admin_token),
    )
    assert r.status_code == 422 and "is not an RFC 3339 time" in r.json()["detail"]
    r = client.post(
        "/api/v1/silences",
        json={
            "owner": "scheduler",
            "model": "model-x",
            "comment": "queue upgrade",
            "duration": "2h",
        },
        headers=_auth(admin_token),
    )
    assert r.status_code == 201, r.text
    sil = r.json()
    assert sil["active"] and sil["matchers"] == {"owner": "scheduler", "model": "model-x"}
    # This alert is fleet-wide (no model label), so a model matcher does not mute it.
    assert client.get("/api/v1/alerts").json()["items"][0]["silenced"] is False
    r = client.post(
        "/api/v1/silences",
        json={"component": "scheduling", "comment": "all of it", "ends_at": now + 3600},
        headers=_auth(admin_token),
    )
    assert r.status_code == 201
    assert client.get("/api/v1/alerts").json()["items"][0]["silenced"] is True
    active = client.get("/api/v1/silences", params={"active": "true"}).json()
    assert len(active) == 2
    r = client.delete(f"/api/v1/silences/{r.json()['id']}", headers=_auth(admin_token))
    assert r.status_code == 200 and r.json()["active"] is False
    assert len(client.get("/api/v1/silences", params={"active": "true"}).json()) == 1
    assert client.get("/api/v1/alerts").json()["items"][0]["silenced"] is False

    # Channels through the API; targets are only shown to admins.
    ch = {"name": "hook", "kind": "webhook", "target": "http://127.0.0.1:9/x"}
    r = client.put("/api/v1/owners/scheduler/channels/hook", json=ch, headers=_auth(admin_token))
    assert r.status_code == 200
    assert client.get("/api/v1/owners/scheduler/channels").status_code == 401
    listed = client.get("/api/v1/owners/scheduler/channels", headers=_auth(admin_token)).json()
    assert listed == [
        {
            "name": "hook",
            "kind": "webhook",
            "target": ch["target"],
            "options": {},
            "enabled": True,
            "source": "api",
        }
    ]
    status = client.get("/api/v1/owners/scheduler/status").json()
    assert status["channels"] == [{"name": "hook", "kind": "webhook", "enabled": True}]


def test_app_lifespan_starts_the_evaluator(database: Database, tmp_path: Path) -> None:
    from backend.app import create_app

    settings = Settings(
        home=tmp_path, database_url=database.url, alert_eval_interval_s=1, recompute_mode="inline"
    )
    assert (
        make_alert_evaluator(settings.model_copy(update={"alerts_enabled": False}), database)
        is None
    )
    app = create_app(settings, database=database, start_workers=True, with_dashboard=False)
    with TestClient(app) as client:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and not client.get("/api/v1/slos").json()["items"]:
            time.sleep(0.1)
        names = {s["name"] for s in client.get("/api/v1/slos").json()["items"]}
    assert "scheduling_share" in names
    with database.session() as s:
        leases = {row.name: row.holder for row in s.scalars(select(EvaluatorLease))}
    # the evaluator, the live pass and the bounds worker each have their own lease, and each is
    # released on shutdown, so a replica takes over at once
    assert set(leases) == {"alert-evaluator", "live-evaluator", "bounds-learner"}
    assert set(leases.values()) == {None}


def test_evaluator_thread_survives_a_broken_pass(database: Database, tmp_path: Path) -> None:
    bad = tmp_path / "slos.yaml"
    bad.write_text("slos: [{name: x}]\n")
    settings = Settings(home=tmp_path, database_url=database.url, slos_file=bad)
    ev = AlertEvaluator(settings, database, holder="t")
    assert ev.run_once() is None  # the invalid file is logged, not raised
    bad.write_text("slos: []\n")
    report = ev.run_once()
    assert report is not None and report.evaluated and ev.passes == 1
    ev.stop()


def test_cli_alerts_evaluate(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'cli.db'}"
    migrate.upgrade(url)
    env = {**os.environ, "ETT_HOME": str(tmp_path), "ETT_DATABASE_URL": url}
    out = subprocess.run(
        [ETT, "alerts", "evaluate", "--json"], env=env, capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    assert '"evaluated": true' in out.stdout
    shipped = len(load_slo_file().slos)
    assert f'"slos": {shipped}' in out.stdout
    # The one-shot pass gave the lease back: a second run evaluates too.
    again = subprocess.run(
        [ETT, "alerts", "evaluate"], env=env, capture_output=True, text=True, timeout=120
    )
    assert again.returncode == 0 and f"{shipped} SLOs" in again.stdout
