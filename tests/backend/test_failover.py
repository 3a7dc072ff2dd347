"""Failover on Postgres: two API replicas and two workers (real processes), one of each SIGKILLed
mid-load. No event is lost or counted twice, every job is computed, the stored results and
rollups equal a fresh single-process recompute, and the alert fires exactly once."""

from __future__ import annotations

import itertools
import json
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from sqlalchemy import func, select

from backend.alerts.models import EvaluatorLease
from backend.config import Settings
from backend.db import Database
from backend.ett.models import JobResult
from backend.events.models import RawEvent
from backend.fleet.models import FleetDayRollup, FleetDayTotal
from backend.fleet.rollups import rebuild_rollups
from backend.jobs.models import Job
from backend.results.recompute import count_dirty, recompute_all
from tests.backend.alerts.conftest import http_receiver  # noqa: F401 - the receiver fixture
from tests.backend.alerts.fleet import job_events
from tests.cluster import Cluster
from tests.conftest import DIALECTS, database_at

pytestmark = pytest.mark.skipif("postgresql" not in DIALECTS, reason="failover needs Postgres")

HEALTHY_JOBS = 240
PREEMPTED_JOBS = 60
BATCH_JOBS = 4  # jobs per POST: a batch carries every event of these jobs


class Balancer:
    """The load balancer's part: round-robin over replicas, the next one when one fails."""

    def __init__(self, urls: list[str], token: str) -> None:
        self.urls = urls
        self.turn = itertools.cycle(range(len(urls)))
        self.lock = threading.Lock()
        self.headers = {"Authorization": f"Bearer {token}"}
        self.client = httpx.Client(timeout=30)
        self.failovers = 0

    def post(self, events: list[dict[str, Any]]) -> dict[str, Any]:
        """POST one batch until a replica stores it (a retry of a stored batch is idempotent)."""
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            with self.lock:
                url = self.urls[next(self.turn)]
            try:
                r = self.client.post(
                    url + "/api/v1/events", json={"events": events}, headers=self.headers
                )
                if r.status_code == 200:
                    return r.json()
            except httpx.HTTPError:
                pass
            self.failovers += 1
            time.sleep(0.05)
        raise AssertionError("no replica stored the batch within 60 s")


def _results(db: Database) -> dict[str, tuple[Any, ...]]:
    with db.session() as s:
        rows = s.execute(
            select(
                JobResult.job_id,
                JobResult.status,
                JobResult.e2e_s,
                JobResult.effective_s,
                JobResult.gpu_hours_lost,
                JobResult.nof,
            )
        )
        return {
            r[0]: tuple(round(v, 6) if isinstance(v, float) else v for v in r[1:]) for r in rows
        }


def _rollups(db: Database) -> dict[tuple[Any, ...], float]:
    with db.session() as s:
        out = {
            ("day", r.day, r.model, r.component, r.phase): round(r.gpu_s, 3)
            for r in s.scalars(select(FleetDayRollup))
        }
        out.update(
            {
                ("total", r.day, r.component, r.phase): round(r.gpu_s, 3)
                for r in s.scalars(select(FleetDayTotal))
            }
        )
        return out


def _lease_holder_pid(db: Database) -> int | None:
    with db.session() as s:
        lease = s.scalars(select(EvaluatorLease)).first()
    if lease is None or not lease.holder or lease.expires_at < time.time():
        return None
    return int(lease.holder.split(":")[1])


def test_replica_and_worker_killed_mid_load(tmp_path: Path, http_receiver: Any) -> None:  # noqa: F811
    now = float(int(time.time()))
    t0 = now - 40_000
    slos = {
        "slos": [
            {
                "name": "preemptions",
                "owner": "scheduler",
                "component": "scheduling",
                "indicator": "failures_per_job",
                "failure_kind": "preemption",
                "objective": 0.1,
                "window": "1d",
            }
        ],
        "channels": {
            "scheduler": [
                {"name": "hook", "kind": "webhook", "target": f"{http_receiver.url}/sched"}
            ]
        },
    }
    slo_path = tmp_path / "slos.yaml"
    slo_path.write_text(yaml.safe_dump(slos))
    jobs = [job_events(f"ok-{i:04d}", f"model-{i % 5}", t0 + i) for i in range(HEALTHY_JOBS)]
    jobs += [
        job_events(f"pre-{i:04d}", "model-x", t0 + i, preempted_queue_s=3000.0)
        for i in range(PREEMPTED_JOBS)
    ]
    batches = [
        [e for job in jobs[i : i + BATCH_JOBS] for e in job]
        for i in range(0, len(jobs), BATCH_JOBS)
    ]
    # The preempted jobs come last, after the kills: the alert fires under the survivors.
    sent_ids = {e["event_id"] for b in batches for e in b}

    with database_at("postgresql", tmp_path, "head") as url:
        db = Database(url)
        cluster = Cluster(
            url,
            tmp_path / "cluster",
            env={
                "ETT_SLOS_FILE": str(slo_path),
                "ETT_ALERT_EVAL_INTERVAL_S": "1",
                "ETT_ALERT_DELIVERY_INTERVAL_S": "0.5",
            },
        )
        token = cluster.token()
        cluster.start()
        try:
            lb = Balancer([a.url for a in cluster.apis], token)
            accepted = duplicates = 0
            killed = False
            for i, batch in enumerate(batches):
                answer = lb.post(batch)
                accepted += answer["accepted"]
                duplicates += answer["duplicates"]
                assert answer["rejected"] == []
                if not killed and i == len(batches) // 2:
                    with db.session() as s:
                        assert count_dirty(db_session=s) > 0  # the workers are busy
                    # The worker that holds the evaluator lease dies with it.
                    holder = _lease_holder_pid(db)
                    victim = next(
                        (w for w in cluster.workers if w.pid == holder), cluster.workers[0]
                    )
                    victim.kill()
                    cluster.apis[0].kill()
                    killed = True
            assert killed and lb.failovers >= 1  # batches did meet the dead replica

            deadline = time.monotonic() + 120
            while time.monotonic() < deadline:
                with db.session() as s:
                    left = count_dirty(db_session=s)
                fired = [
                    a
                    for r in http_receiver.on("/sched")
                    for a in r.body["alerts"]
                    if a["status"] == "firing"
                ]
                if left == 0 and fired:
                    break
                time.sleep(0.5)
            time.sleep(4)  # several more evaluation passes: none may notify again
            survivors = [p for p in [*cluster.apis, *cluster.workers] if p.alive()]
            assert len(survivors) == 2, [p.log_tail() for p in cluster.workers]
        finally:
            codes = cluster.stop()
        # The survivors stop cleanly on SIGTERM: the worker joins its threads and exits 0;
        # uvicorn shuts down gracefully, then re-raises the signal (-15).
        assert codes["api1"] in (0, -15) and codes[survivors[1].name] == 0, codes
        assert "Finished server process" in cluster.apis[1].log_tail()

        with db.session() as s:
            stored = s.scalar(select(func.count()).select_from(RawEvent))
            distinct = s.scalar(select(func.count(func.distinct(RawEvent.event_id))))
            jobs_known = s.scalar(select(func.count()).select_from(Job))
            assert count_dirty(db_session=s) == 0  # every job computed
        # Nothing lost, nothing twice: every event sent is stored exactly once.
        assert stored == distinct == len(sent_ids)
        assert accepted <= len(sent_ids) <= accepted + duplicates
        assert jobs_known == len(jobs)
        firing = Counter(
            json.dumps(a["labels"], sort_keys=True)
            for r in http_receiver.on("/sched")
            for a in r.body["alerts"]
            if a["status"] == "firing"
        )
        assert firing and set(firing.values()) == {1}, firing  # each alert fired once

        # What the cluster stored equals a fresh single-process recompute of the same events.
        got_results, got_rollups = _results(db), _rollups(db)
        assert len(got_results) == len(jobs)
        settings = Settings(home=tmp_path, database_url=url)
        with db.session() as s:
            recompute_all(db_session=s, settings=settings, progress=False)
            rebuild_rollups(db_session=s)
            s.commit()
        assert _results(db) == got_results
        assert _rollups(db) == pytest.approx(got_rollups)
        db.dispose()
