"""Workers on one Postgres: SKIP LOCKED claims hand each dirty job to one worker, and a worker
that dies mid-job (its transaction rolled back) leaves the job dirty for the next claim."""

from __future__ import annotations

import threading
import time

import pytest
from sqlalchemy import select

from backend.db import Database
from backend.ett.models import JobResult
from backend.jobs.models import Job
from backend.results import recompute
from backend.workers import PeriodicWorker
from ingest import service as ingest_service
from tests.backend.results.test_recompute_and_jobs_api import short_job


def _ingest(database: Database, *job_ids: str) -> None:
    with database.session() as s:
        for job_id in job_ids:
            ingest_service.ingest_batch(
                db_session=s, events=short_job(job_id, "m", 30).events, token=None
            )
        s.commit()


def test_two_claims_never_get_the_same_job_and_a_rollback_leaves_it_dirty(database, settings):
    if database.dialect != "postgresql":
        pytest.skip("SKIP LOCKED claims are the Postgres path; SQLite has one writer")
    _ingest(database, "a", "b")
    with database.session() as one, database.session() as two:
        first = recompute.claim_dirty_job(db_session=one)
        second = recompute.claim_dirty_job(db_session=two)
        assert first is not None and second is not None
        assert first[0] != second[0]  # the first's row is locked: the second skips it
        assert recompute.claim_dirty_job(db_session=two) == second  # its own lock: same row
        # The first worker "dies" mid-job: its transaction never commits.
        recompute.recompute_job(db_session=one, job_id=first[0], settings=settings, claimed=True)
        one.rollback()
        recompute.recompute_job(db_session=two, job_id=second[0], settings=settings, claimed=True)
        two.commit()
    with database.session() as s:
        dirty = set(s.scalars(select(Job.job_id).where(Job.dirty.is_(True))))
        assert dirty == {first[0]}
        assert s.get(JobResult, first[0]) is None
        # The next claim picks the abandoned job up again.
        assert recompute.recompute_dirty(db_session=s, settings=settings) == 1
        assert recompute.count_dirty(db_session=s) == 0


def test_concurrent_drains_compute_each_job_once(database, settings, monkeypatch):
    ids = [f"j{i:02d}" for i in range(24)]
    _ingest(database, *ids)
    seen: list[str] = []
    lock = threading.Lock()
    real = recompute.load_events_after

    def counting(**kwargs):
        with lock:
            seen.append(kwargs["job_id"])
        time.sleep(0.01)
        return real(**kwargs)

    # Every recompute, full or extended, reads the job's (new) events once.
    monkeypatch.setattr(recompute, "load_events_after", counting)

    def drain() -> None:
        with database.session() as s:
            while recompute.recompute_dirty(db_session=s, settings=settings, limit=5):
                pass

    threads = [threading.Thread(target=drain) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    with database.session() as s:
        assert recompute.count_dirty(db_session=s) == 0
        assert len(list(s.scalars(select(JobResult.job_id)))) == len(ids)
    if database.dialect == "postgresql":
        assert sorted(seen) == sorted(ids)  # claimed: no job computed twice


class _Flaky(PeriodicWorker):
    name = "test-flaky"

    def __init__(self) -> None:
        super().__init__(interval_s=0.01)
        self.ticks = 0
        self.stopped = False

    def tick(self) -> int:
        self.ticks += 1
        if self.ticks % 2:
            raise RuntimeError("every other pass fails")
        return self.ticks

    def on_stop(self) -> None:
        self.stopped = True


def test_periodic_worker_survives_errors_and_stops_cleanly():
    worker = _Flaky()
    worker.start()
    deadline = time.monotonic() + 10
    while worker.passes < 3 and time.monotonic() < deadline:
        time.sleep(0.01)
    worker.stop(timeout=5)
    assert not worker.is_alive() and worker.stopped
    assert worker.passes >= 3 and worker.errors >= 3
    assert worker.last_success_at is not None
