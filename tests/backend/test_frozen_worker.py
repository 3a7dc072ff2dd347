"""A frozen worker does not take the API down (Postgres, real processes).

One `ett worker` is SIGSTOPped while it holds the claim (backend.jobs.claims: an advisory lock)
of the job it is computing, before its final update of the job's row. 60 clients then post into
that job, honouring Retry-After: ingest does not wait on a claim, so each is stored at its
first try. Unrelated ingest, the job list and /healthz keep answering, the frozen worker's claim
is released by the server once its session has idled in its transaction for
ETT_IDLE_IN_TRANSACTION_TIMEOUT_S, and the other worker computes its job, the posts included,
while it is still frozen. (A job's row held past ETT_LOCK_TIMEOUT_S costs ingest a 503 with
Retry-After: tests/backend/test_lock_bounds.py.)
"""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import select, text

from backend.db import Database
from backend.ett.models import JobResult
from backend.jobs.claims import CLAIM_NAMESPACE
from tests.backend.ett.builders import JobEvents
from tests.cluster import Cluster, EttProcess
from tests.conftest import DIALECTS, database_at

pytestmark = pytest.mark.skipif("postgresql" not in DIALECTS, reason="needs Postgres")

JOBS = 48
WINDOWS = 300  # progress windows per job: a claimed batch takes the worker a while
POSTERS = 60
IDLE_S = 6.0  # ETT_IDLE_IN_TRANSACTION_TIMEOUT_S of every process
GUARD_S = 2.0  # unrelated requests answer within this, frozen worker or not

# The backend of a session that holds a job's claim, idles in its transaction, and has not
# written the jobs table (its final update, which takes the job's row, is still to come).
HOLDER = text(
    "SELECT DISTINCT a.pid FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid "
    "WHERE l.locktype = 'advisory' AND l.classid = :ns AND l.granted "
    "AND a.state = 'idle in transaction' AND a.datname = current_database() "
    "AND NOT EXISTS (SELECT 1 FROM pg_locks w WHERE w.pid = a.pid "
    "AND w.relation = 'jobs'::regclass AND w.mode = 'RowExclusiveLock')"
).bindparams(ns=CLAIM_NAMESPACE)


def _job(job_id: str, t0: float) -> list[dict[str, Any]]:
    j = JobEvents(job_id)
    j.submitted(t0, model="frozen-m", gpus=8)
    j.started(0, t0 + 10)
    for k in range(WINDOWS):
        j.progress(0, t0 + 20 + 2 * k, t0 + 21 + 2 * k, float(k), float(k + 1))
    j.heartbeat(0, t0 + 20 + 2 * WINDOWS)
    return j.events


def _locked_jobs(db: Database) -> set[str]:
    """The jobs whose claim another transaction holds (the ones a worker's claim passes over)."""
    with db.engine.connect() as conn:
        held = set(
            conn.scalars(
                text(
                    "SELECT job_id FROM jobs WHERE NOT pg_try_advisory_xact_lock(:ns, hashtext(job_id))"
                ),
                {"ns": CLAIM_NAMESPACE},
            )
        )
        conn.rollback()
    return held


def _freeze_mid_claim(db: Database, worker: EttProcess) -> set[str]:
    """SIGSTOP the worker while it idles in a transaction holding claimed job rows."""
    for _round in range(40):
        with db.engine.begin() as conn:  # every job dirty again: the worker claims anew
            conn.execute(text("UPDATE jobs SET dirty = true, updated_at = updated_at + 1"))
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            with db.engine.connect() as conn:
                holders = list(conn.scalars(HOLDER))
            if not holders:
                time.sleep(0.002)
                continue
            os.kill(worker.pid, signal.SIGSTOP)
            time.sleep(0.3)  # whatever it had sent is answered; then it is idle for good
            with db.engine.connect() as conn:
                still = list(conn.scalars(HOLDER))
            locked = _locked_jobs(db)
            if still and locked:
                return locked
            os.kill(worker.pid, signal.SIGCONT)
    raise AssertionError(f"never caught the worker holding a claim:\n{worker.log_tail()}")


def test_frozen_worker_leaves_the_api_answering(tmp_path: Path) -> None:
    now = float(int(time.time()))
    with database_at("postgresql", tmp_path, "head") as url:
        db = Database(url)
        cluster = Cluster(
            url,
            tmp_path / "c",
            apis=1,
            workers=0,
            env={"ETT_IDLE_IN_TRANSACTION_TIMEOUT_S": str(IDLE_S), "ETT_LOG_LEVEL": "warning"},
        )
        token = cluster.token()
        headers = {"Authorization": f"Bearer {token}"}
        frozen = EttProcess("frozen", ["worker"], cluster.env, cluster.home)
        other = EttProcess("other", ["worker"], cluster.env, cluster.home)
        cluster.start()
        api = cluster.apis[0].url
        client = httpx.Client(timeout=30)
        try:
            for i in range(0, JOBS, 8):
                events = [e for k in range(i, i + 8) for e in _job(f"f-{k:03d}", now - 3600 + k)]
                r = client.post(api + "/api/v1/events", json={"events": events}, headers=headers)
                assert r.status_code == 200 and r.json()["rejected"] == [], r.text
            frozen.start()
            locked = _freeze_mid_claim(db, frozen)
            paused_at = time.time()
            other.start()

            answers: list[tuple[int, str | None]] = []
            lock = threading.Lock()

            def poster(n: int) -> None:
                job_id = sorted(locked)[n % len(locked)]
                event = {
                    "event_id": f"late-{n}",
                    "job_id": job_id,
                    "type": "heartbeat",
                    "attempt": 0,
                    "ts": now - 1,
                }
                with httpx.Client(timeout=30) as c:
                    deadline = time.monotonic() + 60
                    while time.monotonic() < deadline:
                        r = c.post(
                            api + "/api/v1/events", json={"events": [event]}, headers=headers
                        )
                        with lock:
                            answers.append((r.status_code, r.headers.get("retry-after")))
                        if r.status_code != 503:
                            return
                        time.sleep(float(r.headers.get("retry-after", "1")))

            threads = [threading.Thread(target=poster, args=(n,)) for n in range(POSTERS)]
            for t in threads:
                t.start()

            slowest: dict[str, float] = {}
            probe = httpx.Client(timeout=10)
            k = 0
            while any(t.is_alive() for t in threads) or k < 8:
                k += 1
                for name, call in (
                    (
                        "ingest",
                        lambda k=k: probe.post(
                            api + "/api/v1/events",
                            json={"events": _job(f"free-{k:03d}", now - 600)[:3]},
                            headers=headers,
                        ),
                    ),
                    ("jobs", lambda: probe.get(api + "/api/v1/jobs", params={"limit": 5})),
                    ("healthz", lambda: probe.get(api + "/healthz")),
                ):
                    start = time.monotonic()
                    r = call()
                    took = time.monotonic() - start
                    assert r.status_code == 200, (name, r.status_code, r.text)
                    slowest[name] = max(slowest.get(name, 0.0), took)
                    assert took < GUARD_S, (name, took)
                time.sleep(0.25)
            for t in threads:
                t.join(timeout=90)
            probe.close()

            codes = [code for code, _ in answers]
            # Ingest does not wait on a claim: every post into the frozen worker's job is
            # stored at its first try, while the claim is held.
            assert codes == [200] * POSTERS, answers

            # The other worker computes the frozen worker's jobs, late heartbeats included.
            deadline = time.monotonic() + 60
            done: set[str] = set()
            while time.monotonic() < deadline:
                with db.session() as s:
                    done = set(
                        s.scalars(
                            select(JobResult.job_id).where(
                                JobResult.job_id.in_(locked), JobResult.computed_at > paused_at
                            )
                        )
                    )
                    dirty = s.scalar(text("SELECT count(*) FROM jobs WHERE dirty"))
                if done == locked and dirty == 0:
                    break
                time.sleep(0.3)
            assert done == locked, other.log_tail()
            assert frozen.alive()  # still frozen: its jobs were computed by the other worker

            os.kill(frozen.pid, signal.SIGCONT)
            time.sleep(1.5)
            assert frozen.alive(), frozen.log_tail()  # it survives its lost session
        finally:
            if frozen.alive():
                os.kill(frozen.pid, signal.SIGCONT)
            client.close()
            frozen.stop()
            other.stop()
            cluster.stop()
            db.dispose()
        print(f"slowest unrelated answers while frozen: {slowest}")
