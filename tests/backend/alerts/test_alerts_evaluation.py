"""Evaluation end to end on a seeded fleet: fire once to the right owner, resolve, no duplicates."""

from __future__ import annotations

import threading
import time
from email import message_from_bytes
from pathlib import Path
from typing import Any

import pytest
import yaml
from sqlalchemy import select

from backend.alerts import cycle, dispatch, evaluation, silences, store
from backend.alerts.delivery import RetryPolicy
from backend.alerts.models import AlertState, Delivery, Notification
from backend.config import Settings
from backend.db import Database
from tests.backend.alerts.fleet import HEALTHY, seed_job, slow_scheduling

T = 1_800_000_000.0
DAY = 86400.0
FAST = RetryPolicy(
    max_attempts=3, base_delay_s=0.01, max_delay_s=0.05, send_timeout_s=2, deadline_s=5
)


def _slo_file(tmp_path: Path, channels: dict[str, list[dict[str, Any]]], **sched: Any) -> Path:
    doc = {
        "slos": [
            {
                "name": "sched_share",
                "owner": "scheduler",
                "component": "scheduling",
                "indicator": "gpu_time_share",
                "objective": 10.0,
                "window": "1d",
                "for": "10m",
                "runbook_url": "https://runbooks.example/sched",
                **sched,
            },
            {
                "name": "compile_p90",
                "owner": "compiler",
                "component": "pt2_compile",
                "indicator": "duration_percentile",
                "percentile": 90,
                "objective": 600,
                "window": "1d",
                "for": "0s",
            },
        ],
        "channels": channels,
    }
    path = tmp_path / "slos.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def _settings(database: Database, tmp_path: Path, slos: Path) -> Settings:
    return Settings(
        home=tmp_path,
        database_url=database.url,
        slos_file=slos,
        public_url="http://dash.example:8050",
        alert_eval_interval_s=60,
    )


def _healthy_fleet(db: Database, start: float, n: int = 10, prefix: str = "h") -> None:
    with db.session() as s:
        for i in range(n):
            seed_job(s, f"{prefix}-{i}", "model-a" if i % 2 else "model-b", start + i * 60)
        s.commit()


def _regression(db: Database, start: float, n: int = 4) -> list[str]:
    ids = [f"slow-{i}" for i in range(n)]
    with db.session() as s:
        for i, job_id in enumerate(ids):
            seed_job(s, job_id, "model-x", start + i * 60, slow_scheduling(3000.0))
        s.commit()
    return ids


def _pass(
    db: Database, settings: Settings, now: float, holder: str = "test-a"
) -> evaluation.EvaluationReport:
    # release=True: every pass is a fresh process as far as the lease is concerned (a restart).
    return cycle.evaluate_once(
        db=db, settings=settings, holder=holder, now=now, policy=FAST, release=True
    )


def _state(db: Database, slo: str) -> AlertState:
    with db.session() as s:
        row = s.scalars(select(AlertState).where(AlertState.slo_name == slo)).one()
        return row


def test_regression_fires_once_to_the_owner_and_resolves_after_recovery(
    database: Database, tmp_path: Path, http_receiver, smtp_server
) -> None:
    channels = {
        "scheduler": [
            {"name": "hook", "kind": "webhook", "target": f"{http_receiver.url}/sched"},
            {"name": "slack", "kind": "slack", "target": f"{http_receiver.url}/sched-slack"},
            {
                "name": "mail",
                "kind": "email",
                "target": "sched@example.test",
                "options": {"smtp_host": smtp_server.host, "smtp_port": smtp_server.port},
            },
        ],
        "compiler": [
            {"name": "hook", "kind": "webhook", "target": f"{http_receiver.url}/compiler"}
        ],
    }
    settings = _settings(database, tmp_path, _slo_file(tmp_path, channels))
    _healthy_fleet(database, T - 20 * 3600)

    report = _pass(database, settings, T)
    assert report.evaluated and report.slos == 2
    assert _state(database, "sched_share").state == "inactive"
    assert abs(_state(database, "sched_share").value - 100 * 300 / 6360) < 1e-6

    slow = _regression(database, T + 600)
    now = T + 12_000
    _pass(database, settings, now, holder="replica-1")
    st = _state(database, "sched_share")
    expected = 100 * (10 * 300 * 8 + 4 * 3300 * 8) / (10 * 6360 * 8 + 4 * 9360 * 8)
    assert st.state == "pending" and abs(st.value - expected) < 1e-6
    _pass(database, settings, now + 300, holder="replica-2")
    assert _state(database, "sched_share").state == "pending"
    assert http_receiver.requests == []

    report = _pass(database, settings, now + 700, holder="replica-1")
    assert "firing" in [t[2] for t in report.transitions]
    assert report.queued == 1 and report.delivered == 1 and report.failed == 0
    # Later passes, from other "restarted" evaluators, send nothing new.
    _pass(database, settings, now + 800, holder="replica-3")
    _pass(database, settings, now + 900, holder="replica-4")
    hooks = http_receiver.on("/sched")
    assert len(hooks) == 1 and len(http_receiver.on("/sched-slack")) == 1
    assert http_receiver.on("/compiler") == []
    assert len(smtp_server.wait_for(1)) == 1

    alert = hooks[0].body["alerts"][0]
    assert alert["status"] == "firing"
    assert alert["labels"]["owner"] == "scheduler" and alert["labels"]["alertname"] == "sched_share"
    ann = alert["annotations"]
    assert ann["value"] == f"{expected:.1f}%" and ann["objective"] == "<= 10.0%"
    assert ann["since"] == "2027-01-15T11:20:00.000Z"  # when the breach began (pending), T + 12000
    assert ann["models"].split(", ")[0] == "model-x"
    assert set(ann["jobs"].split(", ")[:4]) == set(slow)
    assert ann["runbook_url"] == "https://runbooks.example/sched"
    assert (
        alert["generatorURL"]
        == "http://dash.example:8050/owners?owner=scheduler&component=scheduling&start=2027-01-14"
    )
    slack = http_receiver.on("/sched-slack")[0].body["text"]
    assert "model-x" in slack and "slow-0" in slack
    mail = message_from_bytes(smtp_server.messages[0].content)
    assert mail["Subject"].startswith("[FIRING] scheduler: scheduling share of wall GPU-time")

    # Recovery: a day of healthy jobs, and the window no longer holds the slow ones.
    _healthy_fleet(database, T + DAY + 3600, prefix="r")
    report = _pass(database, settings, T + 2 * DAY, holder="replica-2")
    st = _state(database, "sched_share")
    assert st.state == "resolved" and st.resolved_at == T + 2 * DAY
    hooks = http_receiver.wait_for("/sched", 2)
    assert [h.body["status"] for h in hooks] == ["firing", "resolved"]
    assert hooks[1].body["alerts"][0]["endsAt"] == "2027-01-17T08:00:00.000Z"
    assert hooks[1].body["alerts"][0]["generatorURL"].endswith("&start=2027-01-14&end=2027-01-17")
    assert len(smtp_server.wait_for(2)) == 2
    _pass(database, settings, T + 2 * DAY + 60, holder="replica-3")
    assert len(http_receiver.on("/sched")) == 2

    with database.session() as s:
        notes = s.scalars(select(Notification).order_by(Notification.id)).all()
        assert [(n.kind, n.status, n.episode) for n in notes] == [
            ("firing", "sent", 1),
            ("resolved", "sent", 1),
        ]
        log = s.scalars(select(Delivery)).all()
        assert len(log) == 6 and all(d.outcome == "delivered" for d in log)
        assert {d.channel for d in log} == {"hook", "slack", "mail"}
    # The quiet SLO of another owner stayed quiet throughout.
    assert _state(database, "compile_p90").state == "inactive"


def test_two_evaluators_at_once_send_one_notification(
    database: Database, tmp_path: Path, http_receiver
) -> None:
    channels = {
        "scheduler": [{"name": "hook", "kind": "webhook", "target": f"{http_receiver.url}/s"}]
    }
    settings = _settings(database, tmp_path, _slo_file(tmp_path, channels, **{"for": "0s"}))
    _healthy_fleet(database, T - 20 * 3600)
    _regression(database, T + 600)
    now = T + 12_000
    barrier = threading.Barrier(2)
    reports: list[evaluation.EvaluationReport] = []

    def run(holder: str) -> None:
        second = Database(database.url)
        try:
            barrier.wait()
            reports.append(
                cycle.evaluate_once(
                    db=second, settings=settings, holder=holder, now=now, policy=FAST
                )
            )
        finally:
            second.dispose()

    threads = [threading.Thread(target=run, args=(h,)) for h in ("east", "west")]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert sorted(r.evaluated for r in reports) == [False, True]
    assert len(http_receiver.wait_for("/s", 1)) == 1
    # A third evaluator while the winner's lease is still live does nothing.
    assert not cycle.evaluate_once(
        db=database, settings=settings, holder="north", now=now
    ).evaluated
    assert len(http_receiver.on("/s")) == 1


def test_racing_evaluators_without_the_lease_still_queue_one_notice(
    database: Database, tmp_path: Path
) -> None:
    settings = _settings(database, tmp_path, _slo_file(tmp_path, {}, **{"for": "0s"}))
    with database.session() as s:
        store.sync_from_file(db_session=s, slo_file=store.slo_file_for(settings))
        s.commit()
    _healthy_fleet(database, T - 20 * 3600)
    _regression(database, T + 600)
    barrier = threading.Barrier(4)
    reports = []

    def run() -> None:
        second = Database(database.url)
        report = evaluation.EvaluationReport(evaluated=True, holder="x")
        try:
            with second.session() as s:
                barrier.wait()
                evaluation.evaluate_slos(
                    db_session=s, settings=settings, now=T + 12_000, report=report
                )
        finally:
            second.dispose()
        reports.append(report)

    threads = [threading.Thread(target=run) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert len(reports) == 4
    with database.session() as s:
        notes = s.scalars(select(Notification)).all()
        assert [(n.kind, n.episode) for n in notes] == [("firing", 1)]
        st = s.scalars(select(AlertState).where(AlertState.slo_name == "sched_share")).one()
        assert st.state == "firing" and st.episode == 1


def test_pending_breach_that_clears_never_notifies(
    database: Database, tmp_path: Path, http_receiver
) -> None:
    channels = {
        "scheduler": [{"name": "hook", "kind": "webhook", "target": f"{http_receiver.url}/s"}]
    }
    settings = _settings(database, tmp_path, _slo_file(tmp_path, channels))
    _healthy_fleet(database, T - 20 * 3600)
    _regression(database, T + 600, n=1)
    now = T + 12_000
    # One slow job: 100 * (24000 + 26400) / (508800 + 74880) = 8.6%: under the objective.
    _pass(database, settings, now)
    assert _state(database, "sched_share").state == "inactive"
    with database.session() as s:
        for i in range(3):
            seed_job(s, f"slow-more-{i}", "model-x", now - 9000 + i, slow_scheduling(3000.0))
        s.commit()
    _pass(database, settings, now)
    assert _state(database, "sched_share").state == "pending"
    # Flap: the slow jobs leave the window before `for` elapsed -> back to inactive, silently.
    _pass(database, settings, now + 90_000)
    assert _state(database, "sched_share").state == "inactive"
    assert http_receiver.requests == []


def test_silence_mutes_then_lapses_and_resolved_follows(
    database: Database, tmp_path: Path, http_receiver
) -> None:
    channels = {
        "scheduler": [{"name": "hook", "kind": "webhook", "target": f"{http_receiver.url}/s"}]
    }
    settings = _settings(database, tmp_path, _slo_file(tmp_path, channels, **{"for": "0s"}))
    _healthy_fleet(database, T - 20 * 3600)
    _regression(database, T + 600)
    now = T + 12_000
    with database.session() as s:
        silences.create_silence(
            db_session=s,
            owner="scheduler",
            component=None,
            model=None,
            starts_at=now - 10,
            ends_at=now + 100,
            comment="maintenance",
            created_by="ops",
            max_duration_s=settings.silence_max_duration_s,
            now=now - 10,
        )
        s.commit()
    _pass(database, settings, now)
    st = _state(database, "sched_share")
    assert st.state == "firing" and not st.notified_firing
    assert http_receiver.requests == []
    # The silence lapses while the alert still fires: the firing notice goes out now, once.
    _pass(database, settings, now + 200)
    _pass(database, settings, now + 260)
    assert [r.body["status"] for r in http_receiver.on("/s")] == ["firing"]
    _pass(database, settings, now + 2 * DAY)
    assert [r.body["status"] for r in http_receiver.wait_for("/s", 2)] == ["firing", "resolved"]


def test_silenced_episode_resolves_without_any_notice(
    database: Database, tmp_path: Path, http_receiver
) -> None:
    channels = {
        "scheduler": [{"name": "hook", "kind": "webhook", "target": f"{http_receiver.url}/s"}]
    }
    settings = _settings(database, tmp_path, _slo_file(tmp_path, channels, **{"for": "0s"}))
    _healthy_fleet(database, T - 20 * 3600)
    _regression(database, T + 600)
    with database.session() as s:
        silences.create_silence(
            db_session=s,
            owner=None,
            component="scheduling",
            model=None,
            starts_at=T,
            ends_at=T + 3 * DAY,
            comment="known",
            created_by="ops",
            max_duration_s=settings.silence_max_duration_s,
            now=T,
        )
        s.commit()
    _pass(database, settings, T + 12_000)
    _pass(database, settings, T + 2 * DAY)
    assert _state(database, "sched_share").state == "resolved"
    assert http_receiver.requests == []


def test_deleted_slo_resolves_its_firing_alert(
    database: Database, tmp_path: Path, http_receiver
) -> None:
    channels = {
        "scheduler": [{"name": "hook", "kind": "webhook", "target": f"{http_receiver.url}/s"}]
    }
    path = _slo_file(tmp_path, channels, **{"for": "0s"})
    settings = _settings(database, tmp_path, path)
    _healthy_fleet(database, T - 20 * 3600)
    _regression(database, T + 600)
    _pass(database, settings, T + 12_000)
    doc = yaml.safe_load(path.read_text())
    doc["slos"] = [s for s in doc["slos"] if s["name"] != "sched_share"]
    path.write_text(yaml.safe_dump(doc))
    _pass(database, settings, T + 12_060)
    assert _state(database, "sched_share").state == "resolved"
    assert [r.body["status"] for r in http_receiver.wait_for("/s", 2)] == ["firing", "resolved"]


@pytest.mark.parametrize("kind", ["app_error", "any"])
def test_failures_per_job_and_ett_floor_per_model(
    database: Database, tmp_path: Path, kind: str
) -> None:
    doc = {
        "slos": [
            {
                "name": "fails",
                "owner": "trainer",
                "component": "trainer_init",
                "indicator": "failures_per_job",
                "failure_kind": kind,
                "objective": 0.5,
                "window": "1d",
            },
            {
                "name": "floor",
                "owner": "fleet",
                "component": "effective_training",
                "indicator": "ett_floor",
                "objective": 80.0,
                "window": "1d",
                "min_jobs": 1,  # model-g has one job (the volume guard is tested on its own)
            },
        ]
    }
    path = tmp_path / "slos.yaml"
    path.write_text(yaml.safe_dump(doc))
    settings = _settings(database, tmp_path, path)
    with database.session() as s:
        for i in range(4):
            fails = [{"ts": T + i * 100 + 10, "kind": "app_error", "attempt": 0, "inferred": False}]
            if i == 0:
                fails.append({"ts": T + 20, "kind": "preemption", "attempt": 1, "inferred": False})
            seed_job(s, f"f-{i}", "model-f", T + i * 100, HEALTHY, failures=fails)
        # model-g: a long init makes its ETT% 5400 / (6360 + 3000) = 57.7%.
        init = (("trainer_init", "trainer_init.first_batch", 3180.0),)
        seed_job(s, "g-0", "model-g", T, (*HEALTHY[:2], *init, *HEALTHY[3:]))
        s.commit()
    report = _pass(database, settings, T + 20_000)
    assert report.errors == []
    with database.session() as s:
        rows = {(a.slo_name, a.model): a for a in s.scalars(select(AlertState))}
    fails = rows[("fails", None)]
    assert fails.value == pytest.approx((4 + (kind == "any")) / 5)
    assert fails.state == "firing"
    assert {d["job_id"] for d in fails.details["job_drivers"]} == {"f-0", "f-1", "f-2", "f-3"}
    assert rows[("floor", "model-f")].value == pytest.approx(100 * 5400 / 6360)
    assert rows[("floor", "model-f")].state == "inactive"
    g = rows[("floor", "model-g")]
    assert g.value == pytest.approx(100 * 5400 / 9360) and g.state == "firing"
    assert g.labels["model"] == "model-g"


def test_duration_percentile_of_a_phase(database: Database, tmp_path: Path) -> None:
    doc = {
        "slos": [
            {
                "name": "first_batch_p90",
                "owner": "data",
                "component": "trainer_init",
                "phase": "trainer_init.first_batch",
                "indicator": "duration_percentile",
                "percentile": 90,
                "objective": 300,
                "window": "1d",
                "per_model": True,
                "min_jobs": 1,  # model-q has one job
            }
        ]
    }
    path = tmp_path / "slos.yaml"
    path.write_text(yaml.safe_dump(doc))
    settings = _settings(database, tmp_path, path)
    with database.session() as s:
        for i in range(10):
            fb = 100.0 + 50.0 * i  # 100 .. 550 s
            pieces = (*HEALTHY[:2], ("trainer_init", "trainer_init.first_batch", fb), *HEALTHY[3:])
            seed_job(s, f"p-{i}", "model-p", T + i * 10, pieces)
        seed_job(s, "q-0", "model-q", T, HEALTHY)
        s.commit()
    _pass(database, settings, T + 30_000)
    with database.session() as s:
        rows = {a.model: a for a in s.scalars(select(AlertState))}
    # numpy linear percentile of 100..550 step 50: 505.
    assert rows["model-p"].value == pytest.approx(505.0)
    assert rows["model-p"].state == "firing"
    assert rows["model-p"].details["job_drivers"][0]["job_id"] == "p-9"
    assert rows["model-q"].value == pytest.approx(180.0) and rows["model-q"].state == "inactive"


def test_alertmanager_channel_routes_our_alert_to_the_owner(
    database: Database, tmp_path: Path, alertmanager
) -> None:
    channels = {"scheduler": [{"name": "am", "kind": "alertmanager", "target": alertmanager.url}]}
    settings = _settings(database, tmp_path, _slo_file(tmp_path, channels, **{"for": "0s"}))
    # Alertmanager compares with its own clock: put the fleet in the recent past.
    base = float(int(time.time()) - 20_000)
    _healthy_fleet(database, base - 20 * 3600)
    _regression(database, base + 600)
    report = _pass(database, settings, base + 12_000)
    assert report.delivered == 1
    got = alertmanager.receiver.wait_for("/am/scheduler", 1, timeout=15)
    body = got[0].body
    assert body["receiver"] == "scheduler" and body["status"] == "firing"
    assert body["alerts"][0]["labels"]["alertname"] == "sched_share"
    assert alertmanager.receiver.on("/am/compiler") == []
    assert alertmanager.receiver.on("/am/default") == []
    listed = alertmanager.alerts()
    assert len(listed) == 1 and listed[0]["status"]["state"] == "active"


def test_label_filter_scopes_the_share_and_agrees_with_the_sql_path(database: Database) -> None:
    from backend.alerts import indicators
    from backend.alerts.slos import SloSpec

    with database.session() as s:
        for i in range(3):
            seed_job(s, f"east-{i}", "model-a", T + i, HEALTHY, labels={"cluster": "east"})
        for i in range(2):
            seed_job(
                s,
                f"west-{i}",
                "model-x",
                T + i,
                slow_scheduling(3000.0),
                labels={"cluster": "west"},
            )
        s.commit()
    base = {
        "name": "q",
        "owner": "scheduler",
        "component": "scheduling",
        "indicator": "gpu_time_share",
        "objective": 10,
        "window": "1d",
        "min_jobs": 1,  # two jobs in the west
    }
    now = T + 20_000
    with database.session() as s:
        everything = indicators.measure(s, SloSpec.model_validate(base), now)[0]
        east = indicators.measure(
            s, SloSpec.model_validate({**base, "labels": {"cluster": "east"}}), now
        )[0]
        west = indicators.measure(
            s, SloSpec.model_validate({**base, "labels": {"cluster": "west"}}), now
        )[0]
        # The east jobs are exactly model-a's: the SQL path (no label filter) must agree.
        model_a = indicators.measure(s, SloSpec.model_validate({**base, "model": "model-a"}), now)[
            0
        ]
        globbed = indicators.measure(s, SloSpec.model_validate({**base, "model": "model-?"}), now)[
            0
        ]
        # The SLO history keeps values only: without the drivers' query, the same value.
        bare = indicators.measure(s, SloSpec.model_validate(base), now, drivers=False)[0]
    assert (bare.value, bare.jobs, bare.models) == (
        everything.value,
        everything.jobs,
        everything.models,
    )
    assert bare.job_drivers == [] and everything.job_drivers
    assert east.value == pytest.approx(100 * 300 / 6360) and east.jobs == 3
    assert west.value == pytest.approx(100 * 3300 / 9360) and west.jobs == 2
    assert everything.value == pytest.approx(100 * (3 * 300 + 2 * 3300) / (3 * 6360 + 2 * 9360))
    assert model_a.value == pytest.approx(east.value) and model_a.jobs == east.jobs
    assert [(d["job_id"], round(d["value"], 9)) for d in model_a.job_drivers] == [
        (d["job_id"], round(d["value"], 9)) for d in east.job_drivers
    ]
    assert [m["model"] for m in model_a.models] == [m["model"] for m in east.models] == ["model-a"]
    assert globbed.value == pytest.approx(everything.value) and globbed.jobs == 5
    assert everything.job_drivers[0]["job_id"] in ("west-0", "west-1")
    assert [m["model"] for m in everything.models] == ["model-x", "model-a"]


def test_every_delivery_attempt_is_logged_and_a_dead_channel_does_not_hold_the_others(
    database: Database, tmp_path: Path, http_receiver, unused_port: int
) -> None:
    http_receiver.script("/flaky", (500, {}), (429, {"Retry-After": "0"}), (200, {}))
    channels = {
        "scheduler": [
            {"name": "flaky", "kind": "webhook", "target": f"{http_receiver.url}/flaky"},
            {"name": "dead", "kind": "slack", "target": f"http://127.0.0.1:{unused_port}/x"},
            {"name": "gone", "kind": "webhook", "target": f"{http_receiver.url}/gone"},
        ]
    }
    http_receiver.script("/gone", (404, {}))
    settings = _settings(database, tmp_path, _slo_file(tmp_path, channels, **{"for": "0s"}))
    _healthy_fleet(database, T - 20 * 3600)
    _regression(database, T + 600)
    report = _pass(database, settings, T + 12_000)
    assert report.queued == 1 and report.failed == 1 and report.delivered == 0
    with database.session() as s:
        log = s.scalars(select(Delivery).order_by(Delivery.id)).all()
        by_channel: dict[str, list[tuple[str, int | None]]] = {}
        for d in log:
            by_channel.setdefault(d.channel, []).append((d.outcome, d.status_code))
        note = s.scalars(select(Notification)).one()
        # "dead" gave up on transient errors: a later pass owes it; "gone" (404) is not retried.
        assert note.status == "retry"
        assert note.pending_channels == ["dead"] and note.delivered_channels == ["flaky"]
        assert all(d.notification_id == note.id for d in log)
    assert by_channel["flaky"] == [("retry", 500), ("retry", 429), ("delivered", 200)]
    assert by_channel["gone"] == [("rejected", 404)]
    assert [o for o, _ in by_channel["dead"]] == ["retry", "retry", "gave_up"]
    assert len(http_receiver.on("/flaky")) == 3


def test_hysteresis_holds_a_firing_alert_until_well_inside_the_objective(
    database: Database, tmp_path: Path, http_receiver
) -> None:
    channels = {
        "scheduler": [{"name": "hook", "kind": "webhook", "target": f"{http_receiver.url}/s"}]
    }
    # Objective 10%, hysteresis 0.2: it resolves only at 8% or below.
    path = _slo_file(tmp_path, channels, hysteresis=0.2, **{"for": "0s"})
    settings = _settings(database, tmp_path, path)
    _healthy_fleet(database, T - 20 * 3600)
    _regression(database, T + 600)
    _pass(database, settings, T + 12_000)
    assert _state(database, "sched_share").state == "firing"
    # 26 more healthy jobs dilute the share to 9.0%: inside the objective, not by the margin.
    _healthy_fleet(database, T - 60_000, n=26, prefix="d1")
    _pass(database, settings, T + 12_100)
    st = _state(database, "sched_share")
    assert st.value == pytest.approx(100 * 192_000 / 2_131_200) and st.state == "firing"
    # 14 more: 7.9%, past the margin.
    _healthy_fleet(database, T - 59_000, n=14, prefix="d2")
    _pass(database, settings, T + 12_200)
    st = _state(database, "sched_share")
    assert st.value == pytest.approx(100 * 225_600 / 2_843_520) and st.state == "resolved"
    assert [r.body["status"] for r in http_receiver.wait_for("/s", 2)] == ["firing", "resolved"]


def test_a_channel_down_for_a_whole_pass_gets_the_notice_from_a_later_pass(
    database: Database, tmp_path: Path, http_receiver, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(dispatch, "REDELIVERY_BASE_S", 0.0)
    monkeypatch.setattr(dispatch, "MAX_REDELIVERIES", 2)
    down = [(503, {})] * FAST.max_attempts
    http_receiver.script("/late", *down)  # down for the first pass, up for the second
    http_receiver.script("/never", *(down * 3))  # down for every pass
    channels = {
        "scheduler": [
            {"name": "up", "kind": "webhook", "target": f"{http_receiver.url}/up"},
            {"name": "late", "kind": "webhook", "target": f"{http_receiver.url}/late"},
            {"name": "never", "kind": "webhook", "target": f"{http_receiver.url}/never"},
        ]
    }
    settings = _settings(database, tmp_path, _slo_file(tmp_path, channels, **{"for": "0s"}))
    _healthy_fleet(database, T - 20 * 3600)
    _regression(database, T + 600)

    def note() -> Notification:
        with database.session() as s:
            return s.scalars(select(Notification)).one()

    _pass(database, settings, T + 12_000)
    first = note()
    assert first.status == "retry" and first.redeliveries == 1
    assert first.pending_channels == ["late", "never"] and first.delivered_channels == ["up"]

    _pass(database, settings, T + 12_060)
    second = note()
    assert second.status == "retry" and second.pending_channels == ["never"]
    assert second.delivered_channels == ["late", "up"]

    _pass(database, settings, T + 12_120)
    final = note()
    assert final.status == "partial" and final.pending_channels == ["never"]
    assert final.delivered_channels == ["late", "up"] and final.retry_at is None

    _pass(database, settings, T + 12_180)  # nothing left to offer
    # Each channel that took the notice got it exactly once; "never" was tried every pass.
    assert len(http_receiver.on("/up")) == 1
    late = http_receiver.on("/late")
    assert len(late) == FAST.max_attempts + 1
    assert late[-1].body["alerts"][0]["labels"]["owner"] == "scheduler"
    assert len(http_receiver.on("/never")) == 3 * FAST.max_attempts
