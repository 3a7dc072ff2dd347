"""Materialization and REST over a real database (SQLite and Postgres)."""

from __future__ import annotations

import time
from typing import Any

import pytest
from sqlalchemy import func, select, update
from typer.testing import CliRunner

from backend.config import get_settings
from backend.ett.models import JobInterval, JobResult
from backend.jobs.models import Attempt, Job
from backend.params import rounded
from backend.results import recompute
from backend.results.views import JOB_ETT_ROUNDING
from backend.timefmt import rfc3339
from tests.backend.ett.builders import JobEvents, M

T0 = 1_780_000_000.0  # 2026-05-28


def fig1_job(job_id: str = "fig1", model: str = "ranker", **labels: str) -> JobEvents:
    """The paper's Fig. 1 job (90.0 of 151.5 minutes effective), on 128 GPUs."""
    j = JobEvents(job_id)
    j.submitted(T0, model=model, gpus=128, labels={"owner": "ads", **labels})
    j.started(0, T0 + 6.0 * M, host="h1")
    j.phase(0, "trainer_init", T0 + 7.4 * M, T0 + 22.4 * M)
    j.phase(0, "pt2_compile", T0 + 22.4 * M, T0 + 52.4 * M)
    j.progress(0, T0 + 52.4 * M, T0 + 100.0 * M, 0, 4760)
    j.checkpoint(0, T0 + 100.0 * M, T0 + 106.0 * M)
    j.progress(0, T0 + 106.0 * M, T0 + 148.4 * M, 4760, 9000)
    j.progress(0, T0 + 148.4 * M, T0 + 150.0 * M, 9000, 9000)
    j.ended(0, T0 + 150.0 * M)
    j.job_ended(T0 + 151.5 * M)
    return j


def short_job(job_id: str, model: str, effective: float, *, status: str = "succeeded") -> JobEvents:
    """A 100 s job with `effective` seconds of training."""
    j = JobEvents(job_id)
    j.submitted(T0 + 1000, model=model, gpus=2)
    j.started(0, T0 + 1000)
    j.progress(0, T0 + 1000, T0 + 1000 + effective, 0, effective)
    j.ended(0, T0 + 1100)
    j.job_ended(T0 + 1100, status=status)
    return j


def ok(response: Any) -> Any:
    """Assert a 200 with nothing rejected and return the JSON."""
    assert response.status_code == 200, response.text
    body = response.json()
    assert body.get("rejected", []) == [], body
    return body


def test_ingest_then_job_ett_answers_fig1(client, post):
    ok(post(fig1_job().events))
    r = client.get("/api/v1/jobs/fig1/ett")
    assert r.status_code == 200, r.text
    doc = r.json()
    # Rounded as docs/API.md says: ETT% to 2 decimals, GPU-hours and seconds to 3.
    assert doc["ett_pct"] == round(90.0 / 151.5 * 100, 2) == 59.41
    assert doc["e2e_s"] == pytest.approx(151.5 * M)
    assert doc["submitted_at"] == "2026-05-28T20:26:40.000Z"
    assert doc["status"] == "succeeded" and doc["provisional"] is False
    assert doc["components"]["pt2_compile"] == pytest.approx(30 * M)
    assert doc["wasted"]["checkpoint_blocking"] == pytest.approx(6 * M)
    assert doc["l1"]["tts_s"] == pytest.approx(52.4 * M) and doc["l1"]["nof"] == 0
    assert doc["gpu_hours_lost"] == round(61.5 / 60 * 128, 3) == 131.2
    assert doc["phases"]["trainer_init"] == {"total_s": 900.0, "exposed_s": 900.0}
    comps = [iv["component"] for iv in doc["intervals"]]
    assert comps[:4] == ["scheduling", "hardware_setup", "trainer_init", "pt2_compile"]
    assert doc["intervals"][0]["start"] == doc["submitted_at"]
    assert doc["intervals"][-1]["end"] == doc["ended_at"]


def test_the_answer_says_how_many_events_it_was_computed_from(client, post):
    """`events` counts distinct events: a re-sent batch adds none, a new event one."""
    j = fig1_job()
    ok(post(j.events))
    assert client.get("/api/v1/jobs/fig1/ett").json()["events"] == len(j.events)
    ok(post(j.events[:3]))  # duplicates: stored once
    assert client.get("/api/v1/jobs/fig1/ett").json()["events"] == len(j.events)
    late = {**j.events[-1], "event_id": "fig1-late-heartbeat", "type": "heartbeat", "attempt": 0}
    late.pop("status", None)
    ok(post([late]))
    assert client.get("/api/v1/jobs/fig1/ett").json()["events"] == len(j.events) + 1


def test_unknown_job_is_404_with_a_message(client):
    r = client.get("/api/v1/jobs/nope/ett")
    assert r.status_code == 404
    assert "nope" in r.json()["detail"]


def test_materialized_rows_and_derived_job_fields(database, post):
    ok(post(fig1_job().events))
    with database.session() as s:
        job = s.get(Job, "fig1")
        assert job is not None and job.dirty is False
        assert (job.gpus, job.status, job.model) == (128, "succeeded", "ranker")
        assert job.labels == {"owner": "ads"}
        assert job.submitted_at == T0 and job.ended_at == pytest.approx(T0 + 151.5 * M)
        res = s.get(JobResult, "fig1")
        assert res is not None and res.effective_s == pytest.approx(90 * M)
        assert "intervals" not in res.result
        ivs = s.scalars(
            select(JobInterval).where(JobInterval.job_id == "fig1").order_by(JobInterval.start)
        ).all()
        assert sum(iv.end - iv.start for iv in ivs) == pytest.approx(151.5 * M)
        (att,) = s.scalars(select(Attempt).where(Attempt.job_id == "fig1")).all()
        assert (att.attempt, att.reason, att.host) == (0, "completed", "h1")


def test_recompute_is_idempotent_and_follows_new_events(database, post):
    j = short_job("j1", "m", 40)
    ok(post(j.events))
    with database.session() as s:
        assert recompute.recompute_all(db_session=s, progress=False) == 1
        assert recompute.recompute_all(db_session=s, progress=False) == 1
        n = s.scalar(
            select(func.count()).select_from(JobInterval).where(JobInterval.job_id == "j1")
        )
        assert n == 2  # effective, then unattributed to the attempt's end
    late = {
        "event_id": "j1-late",
        "job_id": "j1",
        "type": "progress",
        "attempt": 0,
        "start": T0 + 1040,
        "end": T0 + 1060,
        "cursor_start": 40,
        "cursor_end": 60,
        "steps": 20,
    }
    ok(post([late]))
    with database.session() as s:
        assert s.get(JobResult, "j1").effective_s == pytest.approx(60)


def test_recompute_dirty_drains_marks(database, post):
    ok(post(short_job("a", "m", 10).events))
    with database.session() as s:
        s.execute(update(Job).values(dirty=True))
        s.execute(update(JobResult).values(effective_s=-1.0))
        s.commit()
        assert recompute.count_dirty(db_session=s) == 1
        assert recompute.recompute_dirty(db_session=s, limit=10) == 1
        assert recompute.count_dirty(db_session=s) == 0
        assert s.get(JobResult, "a").effective_s == pytest.approx(10)


def test_job_list_filters_sorts_and_pages(client, post):
    ok(post(fig1_job("f1", model="ranker").events))
    ok(post(short_job("s1", "ranker", 80).events))
    ok(post(short_job("s2", "other", 20, status="failed").events))
    body = client.get("/api/v1/jobs", params={"sort": "-ett_pct"}).json()
    assert body["total"] == 3
    assert [j["job_id"] for j in body["jobs"]] == ["s1", "f1", "s2"]
    assert body["jobs"][0]["ett_pct"] == pytest.approx(80)
    body = client.get("/api/v1/jobs", params={"sort": "gpu_hours_lost", "limit": 1}).json()
    assert body["total"] == 3 and [j["job_id"] for j in body["jobs"]] == ["s1"]
    page2 = client.get("/api/v1/jobs", params={"sort": "gpu_hours_lost", "limit": 1, "offset": 1})
    assert [j["job_id"] for j in page2.json()["jobs"]] == ["s2"]
    by_model = client.get("/api/v1/jobs", params={"model": "ranker"}).json()
    assert {j["job_id"] for j in by_model["jobs"]} == {"f1", "s1"}
    failed = client.get("/api/v1/jobs", params={"status": "failed"}).json()
    assert [j["job_id"] for j in failed["jobs"]] == ["s2"]
    owned = client.get("/api/v1/jobs", params={"owner": "ads"}).json()
    # s1 has no owner label: its model's owner (from f1's submission) answers for it
    assert {j["job_id"] for j in owned["jobs"]} == {"f1", "s1"}
    assert {j["owner"] for j in owned["jobs"]} == {"ads"}
    labelled = client.get("/api/v1/jobs", params={"label": "owner=ads"}).json()
    assert [j["job_id"] for j in labelled["jobs"]] == ["f1"]
    early = client.get("/api/v1/jobs", params={"end": T0 + 500}).json()
    assert [j["job_id"] for j in early["jobs"]] == ["f1"]
    assert client.get("/api/v1/jobs", params={"label": "nokey"}).status_code == 422
    assert client.get("/api/v1/jobs", params={"sort": "bogus"}).status_code == 422


def test_open_job_is_provisional_and_live(client, post):
    j = JobEvents("live")
    now = time.time()
    j.submitted(now - 100)
    j.started(0, now - 90)
    j.phase_started(0, "pt2_compile", now - 80)
    ok(post(j.events))
    doc = client.get("/api/v1/jobs/live/ett").json()
    assert doc["provisional"] is True and doc["status"] == "running"
    assert doc["e2e_s"] >= 100
    assert doc["components"]["pt2_compile"] >= 80


def test_worker_drains_in_the_background(database, settings):
    ok_job = short_job("bg", "m", 30)
    with database.session() as s:
        from ingest import service as ingest_service

        ingest_service.ingest_batch(db_session=s, events=ok_job.events, token=None)
        s.commit()
        assert recompute.count_dirty(db_session=s) == 1
    worker = recompute.make_recompute_worker(settings, database)
    worker.interval_s = 0.05
    assert worker.name == "recompute"
    worker.start()
    try:
        deadline = time.time() + 20
        while time.time() < deadline:
            with database.session() as s:
                if s.get(JobResult, "bg") is not None:
                    break
            time.sleep(0.05)
    finally:
        worker.stop()
    assert not worker.is_alive()
    with database.session() as s:
        assert s.get(JobResult, "bg").effective_s == pytest.approx(30)
        assert recompute.count_dirty(db_session=s) == 0


def test_cli_recompute(database, post, monkeypatch):
    ok(post(short_job("c1", "m", 50).events))
    with database.session() as s:
        s.execute(update(JobResult).values(effective_s=0.0))
        s.commit()
    from backend.cli import app

    monkeypatch.setenv("ETT_DATABASE_URL", database.url)
    get_settings.cache_clear()
    try:
        runner = CliRunner()
        result = runner.invoke(app, ["recompute", "--all", "--no-progress"])
        assert result.exit_code == 0, result.output
        assert "recomputed 1 job" in result.output
        result = runner.invoke(app, ["recompute", "--job", "c1", "--job", "ghost"])
        assert result.exit_code == 1
        assert "recomputed 1 job(s)" in result.output
        assert "error: 1 job id(s) have no events" in result.output
        result = runner.invoke(app, ["recompute"])
        assert result.exit_code == 0
        assert "recomputed 0 job(s)" in result.output
    finally:
        get_settings.cache_clear()
    with database.session() as s:
        assert s.get(JobResult, "c1").effective_s == pytest.approx(50)


def test_stored_answer_equals_live_computation(client, post, database, settings):
    j = fig1_job("twin")
    j.failure(0, T0 + 150 * M, kind="infra")  # gives l1.failures a timestamp to format
    ok(post(j.events))
    stored = client.get("/api/v1/jobs/twin/ett").json()
    assert stored.pop("quarantine") is None  # the REST answer's own field (issue 12)
    with database.session() as s:
        assert s.get(Job, "twin").dirty is False
        live = recompute.compute(db_session=s, job_id="twin", settings=settings)
    assert live is not None
    # The same answer, rounded as the REST answer is (docs/API.md "Units and rounding").
    assert stored == rounded(live.to_dict(time_format=rfc3339), by_key=JOB_ETT_ROUNDING)
    assert stored["l1"]["failures"][0]["ts"] == rfc3339(T0 + 150 * M)


def test_stale_open_jobs_are_marked_for_refresh(database, post):
    j = JobEvents("open")
    recent = time.time() - 100  # open and alive: well inside the abandon timeout
    j.submitted(recent)
    j.started(0, recent + 10)
    ok(post(j.events))
    with database.session() as s:
        assert s.get(JobResult, "open").provisional is True
        assert recompute.mark_stale_open_jobs(db_session=s, older_than_s=60, now=time.time()) == 0
        marked = recompute.mark_stale_open_jobs(
            db_session=s, older_than_s=60, now=time.time() + 120
        )
        s.commit()
        assert marked == 1 and recompute.count_dirty(db_session=s) == 1
        assert recompute.recompute_dirty(db_session=s) == 1
        assert recompute.count_dirty(db_session=s) == 0


def test_job_ids_with_slashes_are_reachable(client, post):
    ok(post(short_job("team/run-7", "m", 25).events))
    r = client.get("/api/v1/jobs/team/run-7/ett")
    assert r.status_code == 200, r.text
    assert r.json()["job_id"] == "team/run-7" and r.json()["effective_s"] == pytest.approx(25)


def test_dead_trainer_job_is_abandoned_by_the_open_job_sweep(client, post, database, settings):
    """No new events: the periodic refresh of open jobs ends the job at its last event."""
    short = settings.model_copy(update={"abandon_timeout_s": 150.0})
    last = time.time() - 100
    j = JobEvents("dead")
    j.submitted(last - 400, model="m", gpus=4)
    j.started(0, last - 400)
    j.progress(0, last - 300, last, 0, 300)
    ok(post(j.events))
    with database.session() as s:
        assert s.get(JobResult, "dead").provisional is True
        later = time.time() + 120  # the trainer has now been silent 220 s > 150 s
        assert recompute.mark_stale_open_jobs(db_session=s, older_than_s=60, now=later) == 1
        s.commit()
        assert recompute.recompute_dirty(db_session=s, settings=short, now=later) == 1
        row = s.get(JobResult, "dead")
        assert row.provisional is False and row.status == "abandoned"
        assert row.ended_at == pytest.approx(last) and row.ett_pct == pytest.approx(75)
        assert row.result["abandoned"] is True
        assert "abandoned" in {w["code"] for w in row.result["warnings"]}
        # no longer provisional: the sweep leaves it alone, so its ETT% stops moving
        assert recompute.mark_stale_open_jobs(db_session=s, older_than_s=60, now=later + 3600) == 0
    # a later event reopens it
    j.heartbeat(0, time.time())
    ok(post(j.events[-1:]))
    with database.session() as s:
        row = s.get(JobResult, "dead")
        assert row.provisional is True and row.status == "running"


def test_recompute_all_brings_an_old_rule_answer_to_revision_2(database, post, monkeypatch):
    """A job stored under the old rules (failure before progress kept as sent) is rebuilt."""
    j = JobEvents("skew")
    j.submitted(T0, model="m", gpus=1)
    j.started(0, T0)
    j.progress(0, T0, T0 + 1000, 0, 1000)
    j.failure(0, T0 + 999)
    j.started(1, T0 + 1010)
    j.progress(1, T0 + 1020, T0 + 1030, 900, 1000)
    j.progress(1, T0 + 1030, T0 + 1040, 1000, 1010)
    j.job_ended(T0 + 1040)
    ok(post(j.events))
    with database.session() as s:
        fresh = s.get(JobResult, "skew").recovery_s
        # what the engine before revision 2 stored for this job: TTR 0 s
        s.execute(update(JobResult).where(JobResult.job_id == "skew").values(recovery_s=0.0))
        s.commit()
    from backend.cli import app

    monkeypatch.setenv("ETT_DATABASE_URL", database.url)
    get_settings.cache_clear()
    try:
        result = CliRunner().invoke(app, ["recompute", "--all"])
    finally:
        get_settings.cache_clear()
    assert result.exit_code == 0, result.output
    assert "recompute: 100%" in result.output  # the progress bar
    with database.session() as s:
        assert s.get(JobResult, "skew").recovery_s == pytest.approx(fresh) == pytest.approx(30)
