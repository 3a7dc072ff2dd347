"""The lemon-node SLO (owned by the cluster team): a host that becomes a lemon pages once, stays
one alert while it is a lemon, resolves when it is healthy again; on SQLite and Postgres."""

from __future__ import annotations

from pathlib import Path

import yaml
from sqlalchemy import select, update

from backend.alerts import cycle
from backend.alerts.delivery import RetryPolicy
from backend.alerts.models import AlertState, Notification
from backend.config import Settings
from backend.db import Database
from backend.jobs.models import AttemptHost, Job
from tests.backend.alerts.fleet import ensure_model

T = 1_800_000_000.0
DAY = 86400.0
FAST = RetryPolicy(
    max_attempts=2, base_delay_s=0.01, max_delay_s=0.05, send_timeout_s=2, deadline_s=5
)


def _seed(db: Database) -> None:
    """20 hosts with 10 one-day attempts each in the last 20 days; host-00..03 fail once, the
    lemon bad-1 fails 6 of its 10 attempts."""
    hosts = [f"host-{i:02d}" for i in range(19)] + ["bad-1"]
    with db.session() as s:
        ensure_model(s, "m")
        for h in hosts:
            for a in range(10):
                job_id = f"{h}-j{a}"
                start = T - 20 * DAY + a * 2 * DAY
                s.add(
                    Job(
                        job_id=job_id,
                        model="m",
                        gpus=8,
                        labels={},
                        config={},
                        dirty=False,
                        created_at=start,
                        updated_at=start,
                    )
                )
                s.flush()
                fails = (h == "bad-1" and a < 6) or (h in hosts[:4] and a == 0)
                s.add(
                    AttemptHost(
                        job_id=job_id,
                        attempt=0,
                        host=h,
                        model="m",
                        started_at=start,
                        ended_at=start + DAY,
                        gpus=8,
                        failures=int(fails),
                        failure_ts=start + DAY if fails else None,
                        failure_kind="infra" if fails else None,
                        failure_cause="infra" if fails else None,
                        ttr_gpu_s=3600.0 * 8 if fails else 0.0,
                    )
                )
        s.commit()


def test_a_lemon_pages_once_and_resolves(database: Database, tmp_path: Path, http_receiver) -> None:
    doc = yaml.safe_load(
        (Path(__file__).resolve().parents[3] / "backend/alerts/default_slos.yaml").read_text()
    )
    (lemon_slo,) = [x for x in doc["slos"] if x["name"] == "lemon_nodes"]
    assert lemon_slo["owner"] == "cluster"
    path = tmp_path / "slos.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "slos": [lemon_slo],
                "channels": {
                    "cluster": [
                        {"name": "hook", "kind": "webhook", "target": f"{http_receiver.url}/c"}
                    ]
                },
            }
        )
    )
    settings = Settings(
        home=tmp_path,
        database_url=database.url,
        slos_file=path,
        public_url="http://dash.example:8050",
    )
    _seed(database)
    for i in range(3):  # three passes while bad-1 is a lemon: one alert, one page
        cycle.evaluate_once(
            db=database, settings=settings, holder="t", now=T + i * 600, policy=FAST, release=True
        )
    with database.session() as s:
        states = s.scalars(select(AlertState).where(AlertState.slo_name == "lemon_nodes")).all()
        notes = s.scalars(select(Notification)).all()
    assert [(x.labels["host"], x.state) for x in states] == [("bad-1", "firing")]
    assert [(n.kind, n.owner) for n in notes] == [("firing", "cluster")]
    (sent,) = http_receiver.wait_for("/c")
    assert "host bad-1 is a lemon node" in str(sent.body)
    # Its failures turn out to be someone else's: bad-1 is healthy again, the alert resolves.
    with database.session() as s:
        s.execute(
            update(AttemptHost)
            .where(AttemptHost.host == "bad-1")
            .values(failures=0, failure_ts=None, failure_kind=None, failure_cause=None)
        )
        s.commit()
    cycle.evaluate_once(
        db=database, settings=settings, holder="t", now=T + 3600, policy=FAST, release=True
    )
    with database.session() as s:
        notes = s.scalars(select(Notification).order_by(Notification.id)).all()
        state = s.scalars(select(AlertState).where(AlertState.slo_name == "lemon_nodes")).one()
    assert state.state == "resolved"
    assert [n.kind for n in notes] == ["firing", "resolved"]
