"""Jobs that cannot be computed are quarantined (issue 12 defect 4), on SQLite and Postgres.

The poisons are real: events stored behind ingest's back (as older versions let them in),
and a database trigger that refuses a job's results.
"""

from __future__ import annotations

import logging
from typing import Any

from sqlalchemy import select, text

from backend.config import Settings
from backend.ett.models import JobResult
from backend.events.models import RawEvent
from backend.events.retention import month_of
from backend.jobs.models import Job, JobQuarantine
from backend.results import recompute
from tests.conftest import post_events

T0 = 1_780_000_000.0


def _good_job(job_id: str) -> list[dict[str, Any]]:
    return [
        {
            "event_id": f"{job_id}-s",
            "job_id": job_id,
            "type": "job_submitted",
            "ts": T0,
            "model": "m-q",
            "gpus": 2,
        },
        {
            "event_id": f"{job_id}-a",
            "job_id": job_id,
            "type": "attempt_started",
            "attempt": 0,
            "ts": T0 + 1,
        },
        {
            "event_id": f"{job_id}-e",
            "job_id": job_id,
            "type": "attempt_ended",
            "attempt": 0,
            "ts": T0 + 60,
            "reason": "completed",
        },
        {
            "event_id": f"{job_id}-x",
            "job_id": job_id,
            "type": "job_ended",
            "ts": T0 + 61,
            "status": "succeeded",
        },
    ]


def _store_behind_ingest(database: Any, jobs: dict[str, list[dict[str, Any]]]) -> None:
    """Rows as an old, unvalidated ingest wrote them (one transaction for all the jobs)."""
    with database.session() as s:
        for job_id in jobs:
            s.add(
                Job(job_id=job_id, labels={}, config={}, dirty=True, created_at=T0, updated_at=T0)
            )
        s.flush()
        for job_id, events in jobs.items():
            for ev in events:
                s.add(
                    RawEvent(
                        event_id=ev["event_id"],
                        job_id=job_id,
                        type=ev["type"],
                        attempt=ev.get("attempt"),
                        ts=ev.get("ts", ev.get("start", 0.0)),
                        received_at=T0,
                        payload=ev,
                        job_month=month_of(T0),
                    )
                )
        s.commit()


def _poison_trigger(database: Any) -> None:
    """The database refuses any result row of a job whose id starts with 'poison'."""
    # Drop and create on one connection: a test stopped between create and drop leaves none
    # behind, and another pooled SQLite connection may still hold the schema from before the drop
    # (its CREATE then fails with "already exists" while it prepares).
    with database.engine.begin() as conn:
        _drop_poison_trigger_on(conn, database.dialect)
        if database.dialect == "postgresql":
            conn.execute(
                text(
                    "CREATE OR REPLACE FUNCTION ett_test_poison_result() RETURNS trigger AS $$ BEGIN "
                    "IF NEW.job_id LIKE 'poison%' THEN RAISE EXCEPTION 'cannot store %', NEW.job_id; "
                    "END IF; RETURN NEW; END $$ LANGUAGE plpgsql"
                )
            )
            conn.execute(
                text(
                    "CREATE TRIGGER ett_test_poison_result BEFORE INSERT ON job_results "
                    "FOR EACH ROW EXECUTE FUNCTION ett_test_poison_result()"
                )
            )
        else:
            conn.execute(
                text(
                    "CREATE TRIGGER ett_test_poison_result BEFORE INSERT ON job_results "
                    "WHEN NEW.job_id LIKE 'poison%' BEGIN SELECT RAISE(ABORT, 'cannot store'); END"
                )
            )


def _drop_poison_trigger_on(conn: Any, dialect: str) -> None:
    if dialect == "postgresql":
        conn.execute(text("DROP TRIGGER IF EXISTS ett_test_poison_result ON job_results"))
        conn.execute(text("DROP FUNCTION IF EXISTS ett_test_poison_result()"))
    else:
        conn.execute(text("DROP TRIGGER IF EXISTS ett_test_poison_result"))


def _drop_poison_trigger(database: Any) -> None:
    with database.engine.begin() as conn:
        _drop_poison_trigger_on(conn, database.dialect)
    database.engine.dispose()  # no pooled SQLite connection keeps the trigger in its schema


def _settings(database: Any) -> Settings:
    return Settings(
        database_url=database.url, quarantine_backoff_s=30, quarantine_backoff_max_s=100
    )


def test_200_poison_jobs_do_not_stop_a_good_one(database, caplog) -> None:
    settings = _settings(database)
    _poison_trigger(database)
    try:
        jobs = {f"poison-{i:03d}": _good_job(f"poison-{i:03d}") for i in range(200)}
        _store_behind_ingest(database, {**jobs, "good": _good_job("good")})
        with database.session() as s:  # the good job is marked last: behind every poison
            s.execute(text("UPDATE jobs SET updated_at = :t WHERE job_id = 'good'"), {"t": T0 + 1})
            s.commit()
        caplog.set_level(logging.DEBUG, logger="ett")
        now = T0 + 1000
        with database.session() as s:
            recompute.recompute_dirty(db_session=s, settings=settings, limit=200, now=now)
            assert s.get(JobResult, "good") is None  # not in the first batch of 200
            # The next pass skips the 200 quarantined jobs: the good one is computed.
            assert (
                recompute.recompute_dirty(db_session=s, settings=settings, limit=200, now=now + 1)
                == 1
            )
            assert s.get(JobResult, "good") is not None
            assert s.get(Job, "good").dirty is False
            rows = list(s.scalars(select(JobQuarantine)))
        assert len(rows) == 200
        row = next(r for r in rows if r.job_id == "poison-007")
        assert row.failures == 1 and row.retry_at == now + 30
        assert "cannot store" in row.error and len(row.error) <= 1000
        lines = [r for r in caplog.records if "poison-007" in r.getMessage()]
        assert len(lines) == 1 and "quarantined" in lines[0].getMessage()
    finally:
        _drop_poison_trigger(database)


def test_quarantine_backoff_and_release(database, caplog) -> None:
    """Retried not before its next try, the wait doubling up to the cap; logged once per state."""
    settings = _settings(database)
    _poison_trigger(database)
    caplog.set_level(logging.DEBUG, logger="ett")
    now = T0 + 1000
    try:
        _store_behind_ingest(database, {"poison-1": _good_job("poison-1")})
        with database.session() as s:
            recompute.recompute_dirty(db_session=s, settings=settings, now=now)
            recompute.recompute_dirty(db_session=s, settings=settings, now=now + 29)
            assert s.get(JobQuarantine, "poison-1").failures == 1
            recompute.recompute_dirty(db_session=s, settings=settings, now=now + 31)
            q = s.get(JobQuarantine, "poison-1")
            assert q.failures == 2 and q.retry_at == now + 31 + 60
            recompute.recompute_dirty(db_session=s, settings=settings, now=now + 200)
            q = s.get(JobQuarantine, "poison-1")
            assert q.failures == 3 and q.retry_at == now + 200 + 100  # capped
        lines = [r.getMessage() for r in caplog.records if "poison-1" in r.getMessage()]
        assert len(lines) == 1 and "quarantined" in lines[0], lines
        assert all(len(r.getMessage()) < 2000 for r in caplog.records)
    finally:
        _drop_poison_trigger(database)
    with database.session() as s:  # it computes now: out of quarantine, one more line
        recompute.recompute_dirty(db_session=s, settings=settings, now=now + 10_000)
        assert s.get(JobQuarantine, "poison-1") is None
        assert s.get(JobResult, "poison-1") is not None
    lines = [r.getMessage() for r in caplog.records if "poison-1" in r.getMessage()]
    assert len(lines) == 2 and "left quarantine" in lines[1]


def test_uncomputable_job_answers_422_with_its_error_and_quarantine(
    client, database, settings
) -> None:
    """A job whose events cannot be computed: REST carries the error (never a 500)."""
    if database.dialect == "sqlite":
        # SQLite's JSON keeps NaN: the events are stored but cannot be read back as JSON.
        bad = _good_job("bad")
        bad[0] = {**bad[0], "config": {"checkpoint_interval_s": float("nan")}}
    else:
        # Postgres' JSON refuses NaN: here the database refuses the job's results instead.
        _poison_trigger(database)
        bad = _good_job("poison-bad")
    job_id = bad[0]["job_id"]
    _store_behind_ingest(database, {job_id: bad})
    with database.session() as s:
        recompute.recompute_dirty(db_session=s, settings=settings, now=T0)
        q = s.get(JobQuarantine, job_id)
    _drop_poison_trigger(database)
    assert q is not None and q.failures == 1
    # Nothing is stored and the read path reads no raw event: the answer is the quarantine's.
    r = client.get(f"/api/v1/jobs/{job_id}/ett")
    assert r.status_code == 422, r.text
    body = r.json()
    assert body["detail"] == f"job {job_id!r} cannot be computed: {q.error}"
    assert body["quarantine"]["error"] == q.error and body["quarantine"]["failures"] == 1
    if database.dialect == "sqlite":
        assert q.error.startswith("JSONDecodeError")
    assert client.get("/api/v1/jobs").status_code == 200


def test_good_job_answer_has_no_quarantine(client, ingest_token) -> None:
    assert post_events(client, ingest_token, _good_job("fine")).status_code == 200
    r = client.get("/api/v1/jobs/fine/ett")
    assert r.status_code == 200 and r.json()["quarantine"] is None


def test_job_page_shows_the_quarantine(database, settings) -> None:
    """The job page names the error and the next try instead of failing."""
    from dashboard.pages import job as job_page
    from tests.dashboard.conftest import dashboard_request, find

    if database.dialect == "sqlite":
        bad = _good_job("bad")
        bad[0] = {**bad[0], "config": {"checkpoint_interval_s": float("nan")}}
    else:
        _poison_trigger(database)
        bad = _good_job("poison-bad")
    job_id = bad[0]["job_id"]
    _store_behind_ingest(database, {job_id: bad})
    with database.session() as s:
        recompute.recompute_dirty(db_session=s, settings=settings, now=T0)
        error = s.get(JobQuarantine, job_id).error
    _drop_poison_trigger(database)
    with dashboard_request(settings, database):
        page = job_page.layout(job_id=job_id)
    block = find(page, "job-quarantine")
    assert block is not None
    text_ = str(block.children)
    assert error in text_ and "failed 1 times" in text_ and "next try" in text_


def test_ett_recompute_takes_a_fixed_job_out_of_quarantine(database, settings) -> None:
    _poison_trigger(database)
    _store_behind_ingest(database, {"poison-r": _good_job("poison-r")})
    with database.session() as s:
        recompute.recompute_dirty(db_session=s, settings=settings, now=T0)
        assert s.get(JobQuarantine, "poison-r") is not None
    _drop_poison_trigger(database)
    with database.session() as s:
        assert recompute.recompute_all(db_session=s, settings=settings, progress=False) == 1
        assert s.get(JobQuarantine, "poison-r") is None


def test_a_job_spanning_a_century_is_quarantined_with_its_events_kept(
    client, ingest_token, database, settings
) -> None:
    """A batch whose job spans 2000..2099 is not accounted (the rollups would write a row per
    day): the job is quarantined with the reason, shown on its page and in REST, its events
    are kept, and its neighbour is computed."""
    from dashboard.pages import job as job_page
    from tests.dashboard.conftest import dashboard_request, find

    y2000, y2099 = 946_857_600.0, 4_070_908_800.0  # 2000-01-03, 2099-01-01
    wide = _good_job("century")
    wide[0]["ts"], wide[1]["ts"] = y2000, y2000 + 1
    wide[2]["ts"], wide[3]["ts"] = y2099, y2099 + 1
    assert post_events(client, ingest_token, wide + _good_job("fine-n")).status_code == 200
    with database.session() as s:
        recompute.recompute_dirty(db_session=s, settings=settings, now=T0 + 3600)
        q = s.get(JobQuarantine, "century")
        assert q is not None and q.error.startswith("JobSpanTooLong: job_span: job 'century'")
        assert "spans 36," in q.error and "ETT_MAX_JOB_SPAN_S (366 days)" in q.error
        assert "its events are kept" in q.error
        assert s.get(JobResult, "century") is None
        assert s.get(JobResult, "fine-n") is not None
        days = s.scalar(text("SELECT count(*) FROM fleet_job_days WHERE job_id = 'century'"))
        assert days == 0
        kept = s.scalar(
            select(text("count(*)")).select_from(RawEvent).where(RawEvent.job_id == "century")
        )
        assert kept == 4
    r = client.get("/api/v1/jobs/century/ett")
    assert r.status_code == 422, r.text
    assert "job_span" in r.json()["detail"] and r.json()["quarantine"]["error"] == q.error
    with dashboard_request(settings, database):
        page = job_page.layout(job_id="century")
    block = find(page, "job-quarantine")
    assert block is not None and "job_span" in str(block.children)
    # A setting that allows the span lets it be accounted.
    wider = settings.model_copy(update={"max_job_span_s": 101 * 366 * 86_400.0})
    with database.session() as s:
        assert recompute.recompute_all(db_session=s, settings=wider, progress=False) == 2
        assert s.get(JobResult, "century") is not None
