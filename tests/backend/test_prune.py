"""Raw-event retention: the partitioned table (migration 0011) and `ett db prune`, both dialects."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import func, select, text

from backend import migrate
from backend.db import Database
from backend.ett.models import JobResult
from backend.events import retention
from backend.events.models import RawEvent
from backend.jobs.models import Job
from backend.results import recompute
from ingest.service import ingest_batch
from tests.backend.alerts.fleet import job_events
from tests.conftest import DIALECTS, database_at

WINDOW = (0.0, 1e11)
JAN = datetime(2025, 1, 10, tzinfo=UTC).timestamp()
FEB = datetime(2025, 2, 10, tzinfo=UTC).timestamp()
MAR = datetime(2025, 3, 10, tzinfo=UTC).timestamp()
NOW = datetime(2026, 6, 1, tzinfo=UTC).timestamp()
DAY = 86_400.0


@pytest.fixture(params=DIALECTS)
def db_at_0010(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Database]:
    """A database at 0010 holding three months of jobs, then upgraded to head."""
    with database_at(request.param, tmp_path, "0010") as url:
        _ingest_at_0010(url)
        migrate.upgrade(url)
        db = Database(url)
        yield db
        db.dispose()


def _ingest_at_0010(url: str) -> None:
    """Jobs as the 0010 schema stored them (raw rows without job_month), with results."""
    db = Database(url)
    with db.engine.begin() as conn:
        for job_id, t0 in (("jan-a", JAN), ("jan-b", JAN + DAY), ("feb-a", FEB), ("mar-a", MAR)):
            conn.execute(
                text(
                    "INSERT INTO jobs (job_id, labels, config, dirty, created_at, updated_at) "
                    "VALUES (:j, '{}', '{}', true, :t, :t)"
                ),
                {"j": job_id, "t": t0},
            )
            for ev in job_events(job_id, "m", t0):
                conn.execute(
                    text(
                        "INSERT INTO raw_events (event_id, job_id, type, attempt, ts, "
                        "received_at, payload) VALUES (:e, :j, :ty, :a, :ts, :r, :p)"
                    ),
                    {
                        "e": ev["event_id"],
                        "j": job_id,
                        "ty": ev["type"],
                        "a": ev["attempt"],
                        "ts": ev.get("ts", ev.get("start")),
                        "r": t0,
                        "p": json.dumps(ev),
                    },
                )
    db.dispose()


def _recompute_all(db: Database) -> None:
    with db.session() as s:
        recompute.recompute_all(db_session=s, progress=False, now=NOW)


def _results(db: Database) -> dict[str, tuple[Any, ...]]:
    with db.session() as s:
        rows = s.execute(select(JobResult.job_id, JobResult.ett_pct, JobResult.gpu_hours_lost))
        return {j: (e, g) for j, e, g in rows}


def _rollup_rows(db: Database) -> int:
    with db.session() as s:
        return s.scalar(text("SELECT count(*) FROM fleet_job_days")) or 0


def test_migration_partitions_and_keeps_data(db_at_0010: Database) -> None:
    db = db_at_0010
    with db.session() as s:
        assert s.scalar(select(func.count()).select_from(RawEvent)) == 4 * 7
        months = dict(s.execute(select(RawEvent.job_id, RawEvent.job_month).distinct()).all())
        assert months == {"jan-a": 202501, "jan-b": 202501, "feb-a": 202502, "mar-a": 202503}
        conn = s.connection()
        if db.engine.dialect.name == "postgresql":
            assert retention.is_partitioned(conn)
            assert {202501, 202502, 202503} <= set(retention.partitions(conn))
            parts = set(
                s.scalars(
                    text(
                        "SELECT c.relname FROM pg_inherits i JOIN pg_class c "
                        "ON c.oid = i.inhrelid WHERE i.inhparent = 'raw_events'::regclass"
                    )
                )
            )
            assert "raw_events_default" in parts
            assert s.scalar(text("SELECT count(*) FROM raw_events_p202501")) == 14
        else:
            assert not retention.is_partitioned(conn)
    # Ingest dedupe still refuses a duplicate (job_id, event_id) sent long after.
    dup = job_events("jan-a", "m", JAN)[:2]
    with db.session() as s:
        r = ingest_batch(db_session=s, events=dup, token=None, now=NOW, time_window=WINDOW)
        s.commit()
        assert r.accepted == 0 and r.duplicates == 2
        assert s.scalar(select(func.count()).where(RawEvent.job_id == "jan-a")) == 7
    # A new job lands in its own month; recompute works on the converted table.
    with db.session() as s:
        new = job_events("new-a", "m", NOW - 10 * DAY)
        ingest_batch(db_session=s, events=new, token=None, now=NOW - 10 * DAY, time_window=WINDOW)
        s.commit()
    _recompute_all(db)
    results = _results(db)
    assert set(results) == {"jan-a", "jan-b", "feb-a", "mar-a", "new-a"}
    assert all(ett is not None for ett, _ in results.values())


def test_prune_drops_finished_and_keeps_stragglers(db_at_0010: Database) -> None:
    db = db_at_0010
    _recompute_all(db)
    before, rollups = _results(db), _rollup_rows(db)
    assert rollups > 0
    with db.session() as s:  # feb-a never ended: its month (or rows) must stay
        s.execute(text("UPDATE jobs SET ended_at = NULL WHERE job_id = 'feb-a'"))
        s.commit()
    age = retention.parse_age("400d")
    with db.session() as s:
        dry = retention.prune_raw(db_session=s, older_than_s=age, now=NOW, dry_run=True)
        s.commit()
    with db.session() as s:
        assert s.scalar(select(func.count()).select_from(RawEvent)) == 28
        assert s.scalar(select(func.count()).where(Job.raw_pruned_at.is_not(None))) == 0
    with db.session() as s:
        report = retention.prune_raw(db_session=s, older_than_s=age, now=NOW)
        s.commit()
    assert report.jobs_pruned == dry.jobs_pruned
    assert "feb-a" not in report.jobs_pruned and "jan-a" in report.jobs_pruned
    with db.session() as s:
        left = set(s.scalars(select(RawEvent.job_id).distinct()))
        assert "feb-a" in left and not {"jan-a", "jan-b"} & left
        if db.engine.dialect.name == "postgresql":
            assert report.dropped == dry.dropped and 202501 in report.dropped
            assert report.kept == {202502: ["feb-a"]}
            assert 202501 not in retention.partitions(s.connection())
        else:
            assert report.rows_deleted == dry.rows_deleted == 7 * len(report.jobs_pruned)
    # A recompute of everything keeps the pruned jobs' stored results and their rollups.
    _recompute_all(db)
    after = _results(db)
    for job_id in report.jobs_pruned:
        assert after[job_id] == before[job_id]
    assert _rollup_rows(db) == rollups
    with db.session() as s:
        recompute.recompute_job(db_session=s, job_id="jan-a", now=NOW)
        s.commit()
    assert _results(db)["jan-a"] == before["jan-a"]


def test_parse_age() -> None:
    assert retention.parse_age("400d") == 400 * DAY
    assert retention.parse_age("12w") == 84 * DAY
    for bad in ("", "0d", "10", "3m", "-4d"):
        with pytest.raises(ValueError):
            retention.parse_age(bad)


def test_cli_prune_on_sqlite(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'cli.db'}"
    migrate.upgrade(url, "0010")
    _ingest_at_0010(url)
    migrate.upgrade(url)
    db = Database(url)
    _recompute_all(db)
    ett = str(Path(sys.executable).with_name("ett"))
    env = {**os.environ, "ETT_DATABASE_URL": url}

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([ett, "db", "prune", *args], env=env, capture_output=True, text=True)

    helptext = run("--help").stdout
    assert "--dry-run" in helptext and "rollups" in helptext
    bad = run("--raw-older-than", "3m")
    assert bad.returncode == 2 and "not an age" in bad.stderr
    dry = run("--raw-older-than", "30d", "--dry-run")
    assert dry.returncode == 0 and "would prune 28 raw event rows" in dry.stdout
    with db.session() as s:
        assert s.scalar(select(func.count()).select_from(RawEvent)) == 28
    done = run("--raw-older-than", "30d")
    assert done.returncode == 0 and "pruned the raw events of 4 jobs" in done.stdout
    with db.session() as s:
        assert s.scalar(select(func.count()).select_from(RawEvent)) == 0
    db.dispose()


def test_worker_path_keeps_pruned_rollups_and_default_rows_move(db_at_0010: Database) -> None:
    db = db_at_0010
    _recompute_all(db)
    with db.session() as s:
        retention.prune_raw(db_session=s, older_than_s=retention.parse_age("90d"), now=NOW)
        s.commit()
    before, rollups = _results(db), _rollup_rows(db)
    with db.session() as s:  # the worker's batch path: recompute_jobs + one rollup refresh
        s.execute(text("UPDATE jobs SET dirty = true"))
        recompute.recompute_jobs(db_session=s, job_ids=list(before), now=NOW)
        s.commit()
    assert _results(db) == before and _rollup_rows(db) == rollups
    if db.engine.dialect.name != "postgresql":
        return
    far = datetime(2031, 5, 3, tzinfo=UTC).timestamp()  # no partition yet: lands in DEFAULT
    with db.session() as s:
        ingest_batch(
            db_session=s,
            events=job_events("far-a", "m", far),
            token=None,
            now=far,
            time_window=WINDOW,
        )
        s.commit()
        assert s.scalar(text("SELECT count(*) FROM raw_events_default")) == 7
    with db.engine.begin() as conn:
        assert 203105 in retention.ensure_partitions(conn, now=far)
    with db.session() as s:
        assert s.scalar(text("SELECT count(*) FROM raw_events_default")) == 0
        assert s.scalar(text("SELECT count(*) FROM raw_events_p203105")) == 7
        dup = job_events("far-a", "m", far)[:1]
        r = ingest_batch(db_session=s, events=dup, token=None, now=far, time_window=WINDOW)
        assert r.duplicates == 1


def test_downgrade_converts_back(db_at_0010: Database) -> None:
    from alembic import command

    db = db_at_0010
    url = db.engine.url.render_as_string(hide_password=False)
    db.dispose()
    command.downgrade(migrate.alembic_config(url), "0010")
    back = Database(url)
    with back.engine.begin() as conn:
        assert conn.scalar(text("SELECT count(*) FROM raw_events")) == 28
        assert not retention.is_partitioned(conn)
        cols = set(conn.execute(text("SELECT * FROM raw_events LIMIT 1")).keys())
        assert "job_month" not in cols
    back.dispose()


def _send(db: Database, events: list[dict[str, Any]], at: float) -> Any:
    with db.session() as s:
        r = ingest_batch(db_session=s, events=events, token=None, now=at, time_window=WINDOW)
        s.commit()
        return r


def test_prune_keeps_live_jobs_refuses_late_events_and_expires_held(db_at_0010: Database) -> None:
    """A job requeued after its end, an abandoned job and a queued job keep their raw events;
    a pruned job's later events are refused with a reason; old held events go."""
    from backend.events.models import HeldEvent

    db = db_at_0010
    late = datetime(2025, 6, 1, tzinfo=UTC).timestamp()  # after the cutoff, within a year
    requeue = {"event_id": "jan-b-late", "job_id": "jan-b", "type": "attempt_started"}
    _send(db, [{**requeue, "attempt": 1, "ts": late}], late)
    queued = job_events("feb-q", "m", FEB)[:1]  # submitted, never started
    abandoned = job_events("feb-ab", "m", FEB)[:2]  # started, then silent
    _send(db, queued + abandoned, FEB)
    with db.session() as s:
        s.add_all(
            HeldEvent(
                job_id="never",
                event_id=f"h{i}",
                received_at=at,
                token_name="t",
                token_models=["m"],
                payload={"event_id": f"h{i}"},
            )
            for i, at in enumerate((JAN, NOW - DAY))
        )
        s.commit()
    _recompute_all(db)
    with db.session() as s:
        status = dict(s.execute(select(JobResult.job_id, JobResult.status)).all())
    # Silent past the abandon timeout, both end at their last event, flagged abandoned.
    assert status["feb-ab"] == status["feb-q"] == "abandoned"
    with db.session() as s:
        report = retention.prune_raw(
            db_session=s, older_than_s=retention.parse_age("400d"), now=NOW
        )
        s.commit()
    assert report.held_deleted == 1
    assert not {"jan-b", "feb-q", "feb-ab"} & set(report.jobs_pruned)
    assert "mar-a" in report.jobs_pruned
    with db.session() as s:
        left = set(s.scalars(select(RawEvent.job_id).distinct()))
        assert {"jan-b", "feb-q", "feb-ab"} <= left and "mar-a" not in left
        assert set(s.scalars(select(HeldEvent.event_id))) == {"h1"}
        pruned_at = s.scalar(select(Job.raw_pruned_at).where(Job.job_id == "mar-a"))
    assert pruned_at == NOW
    if db.engine.dialect.name == "postgresql":
        assert set(report.kept[202501]) == {"jan-b"}
        assert set(report.kept[202502]) == {"feb-q", "feb-ab"}
        assert 202503 in report.dropped
    # A later event for the pruned job is refused with its reason, and nothing is stored.
    more = {"event_id": "mar-a-late", "job_id": "mar-a", "type": "attempt_started"}
    r = _send(db, [{**more, "attempt": 1, "ts": NOW - 60}], NOW)
    assert r.accepted == 0 and r.rejected[0]["error"].startswith("job_pruned: job 'mar-a'")
    assert "new job_id" in r.rejected[0]["error"]
    with db.session() as s:
        assert s.scalar(select(func.count()).where(RawEvent.job_id == "mar-a")) == 0
        assert not s.scalar(select(Job.dirty).where(Job.job_id == "mar-a"))


def test_prune_waits_a_bounded_time_behind_ingest_and_keeps_a_busy_month(
    db_at_0010: Database,
) -> None:
    """Postgres: while a batch holds raw_events (an open transaction), the prune's detach gives
    up after its lock timeout instead of queueing every later batch behind it; the busy month
    is kept whole, its jobs unmarked, and the next prune drops it."""
    db = db_at_0010
    if db.engine.dialect.name != "postgresql":
        pytest.skip("partitions and their detach are Postgres's")
    _recompute_all(db)
    age = retention.parse_age("400d")
    with db.engine.connect() as holder:
        holder.execute(text("BEGIN"))
        holder.execute(text("SELECT count(*) FROM raw_events"))  # a lock detach must wait for
        with db.session() as s:
            report = retention.prune_raw(
                db_session=s, older_than_s=age, now=NOW, lock_timeout_ms=200
            )
            s.commit()
        holder.execute(text("ROLLBACK"))
    assert report.dropped == [] and set(report.busy) >= {202501, 202503}
    with db.session() as s:
        assert s.scalar(select(func.count()).select_from(RawEvent)) == 28
        assert s.scalar(select(func.count()).where(Job.raw_pruned_at.is_not(None))) == 0
    with db.session() as s:
        again = retention.prune_raw(db_session=s, older_than_s=age, now=NOW)
        s.commit()
    assert again.busy == [] and set(again.dropped) == set(report.busy)
    assert "jan-a" in again.jobs_pruned
