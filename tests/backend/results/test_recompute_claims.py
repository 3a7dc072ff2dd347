"""Workers on one Postgres: claims (advisory locks) hand each dirty job to one worker, a worker
that dies mid-job (its transaction rolled back) leaves the job dirty for the next claim, and
ingest into a claimed job does not wait for its recompute."""

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


def test_ingest_into_a_claimed_job_does_not_wait_and_leaves_it_dirty(
    database, settings, monkeypatch
):
    if database.dialect != "postgresql":
        pytest.skip("advisory claims are the Postgres path; SQLite has one writer")
    from backend.db import bound_lock_waits

    _ingest(database, "c")
    beat = {"event_id": "c-beat", "job_id": "c", "type": "heartbeat", "attempt": 0}
    beat["ts"] = short_job("c", "m", 30).events[0]["ts"] + 50
    real = recompute.load_events_after
    answers = []

    def read_then_ingest(**kwargs):
        read = real(**kwargs)
        # Mid-recompute, the claim held: a new batch of the job commits without waiting on
        # any lock (a wait would end in a lock timeout here).
        with database.session() as api:
            bound_lock_waits(api, 0.5)
            answers.append(ingest_service.ingest_batch(db_session=api, events=[beat], token=None))
            api.commit()
        return read

    monkeypatch.setattr(recompute, "load_events_after", read_then_ingest)
    with database.session() as worker:
        assert recompute.claim_dirty_job(db_session=worker) == ("c", False)
        recompute.recompute_job(db_session=worker, job_id="c", settings=settings, claimed=True)
        worker.commit()
    monkeypatch.setattr(recompute, "load_events_after", real)
    assert [a.accepted for a in answers] == [1]
    with database.session() as s:
        # Marked after the worker read the job: it stays dirty, and the next pass has the beat.
        assert recompute.count_dirty(db_session=s) == 1
        assert recompute.recompute_dirty(db_session=s, settings=settings) == 1
        assert recompute.count_dirty(db_session=s) == 0
        assert s.get(JobResult, "c").result["events"] == len(short_job("c", "m", 30).events) + 1


def test_an_event_replacement_waits_for_the_claim(database, settings):
    if database.dialect != "postgresql":
        pytest.skip("advisory claims are the Postgres path; SQLite has one writer")
    from sqlalchemy.exc import OperationalError

    from backend.db import bound_lock_waits, is_lock_timeout
    from backend.ett.store import forget_states

    _ingest(database, "r")
    with database.session() as worker, database.session() as api:
        assert recompute.claim_dirty_job(db_session=worker) == ("r", False)
        # An ingest replacing a stored copy drops the job's state: not under a recompute that
        # read the old copy (it would save a state computed from it).
        bound_lock_waits(api, 0.3)
        with pytest.raises(OperationalError) as err:
            forget_states(db_session=api, job_ids=["r"])
        assert is_lock_timeout(err.value)
        api.rollback()
        recompute.recompute_job(db_session=worker, job_id="r", settings=settings, claimed=True)
        worker.commit()
        bound_lock_waits(api, 0.3)
        forget_states(db_session=api, job_ids=["r"])  # the claim is gone with the commit
        api.commit()
