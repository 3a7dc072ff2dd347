"""The demo fleet through the real pipeline (ingest, then the ETT engine's recompute), per dialect."""

from __future__ import annotations

import time
from typing import Any

import pytest
from sqlalchemy import func, select

from backend.demo.fleet import DAY, REGRESSION, FleetSpec, fleet_events
from backend.demo.live import LiveFeed, read_spec, save_spec
from backend.demo.loader import IngestRefused, batches, load_in_process, send_over_http
from backend.ett.models import JobInterval, JobResult
from backend.events.models import RawEvent, RejectedEvent
from backend.jobs.models import Job
from tests.backend.demo.helpers import PAPER_BASELINE, PAPER_OPTIMIZED, share


def count(database: Any, column: Any) -> int:
    with database.session() as s:
        return int(s.scalar(select(func.count(column))) or 0)


def test_batches_respect_the_wire_limit():
    sizes = [len(b) for b in batches(range(25_001))]
    assert sizes == [10_000, 10_000, 5_001]
    with pytest.raises(ValueError):
        list(batches([], 10_001))


def test_fleet_goes_through_ingest_and_the_engine(database, settings):
    days = 30.0
    spec = FleetSpec(seed=7, models=20, days=days, now=time.time())
    events = list(fleet_events(spec))
    report = load_in_process(
        database, settings, iter(events), total_events=len(events), now=spec.now, progress=False
    )
    # Events sent = events stored, none refused, none lost.
    assert report.sent == len(events) == report.accepted
    assert report.rejected == [] and report.duplicates == 0
    assert count(database, RawEvent.event_id) == len(events)
    assert count(database, RejectedEvent.id) == 0
    job_ids = {e["job_id"] for e in events}
    assert report.jobs == len(job_ids) == count(database, Job.job_id)
    assert count(database, JobResult.job_id) == len(job_ids)

    with database.session() as s:
        rows = {r.job_id: r for r in s.scalars(select(JobResult))}
        gpus = {r.job_id: r.gpus for r in rows.values()}
        intervals = [
            (iv.start, iv.end, iv.component, gpus[iv.job_id])
            for iv in s.scalars(select(JobInterval))
        ]
    # The six benchmark pairs, as the engine stored them, in the paper's ranges.
    for letter in "abcdef":
        base, opt = rows[f"model-{letter}-baseline"], rows[f"model-{letter}-optimized"]
        assert PAPER_BASELINE[0] <= base.ett_pct <= PAPER_BASELINE[1]
        assert PAPER_OPTIMIZED[0] <= opt.ett_pct <= PAPER_OPTIMIZED[1]
        assert base.nof == opt.nof == 2
        assert base.result["labels"]["pair"] == opt.result["labels"]["pair"]
    # Some jobs still run at "now".
    assert any(r.provisional for r in rows.values())
    # The fleet trend: about 80% at the start, above 90% at the end, a regression in between.
    start, span = spec.start, days * DAY
    first = share(intervals, start, start + 0.2 * span, {"effective_training"})
    last = share(intervals, start + 0.8 * span, spec.now, {"effective_training"})
    assert 72.0 <= first <= 86.0 and last > 90.0, (first, last)
    during = share(
        intervals, start + REGRESSION[0] * span, start + REGRESSION[1] * span, {"scheduling"}
    )
    after = share(intervals, start + (REGRESSION[1] + 0.02) * span, spec.now, {"scheduling"})
    assert during > 1.8 * after

    # Loading the same fleet again stores nothing new: ingest is idempotent by event id.
    again = load_in_process(database, settings, iter(events), recompute=False, progress=False)
    assert again.accepted == 0 and again.duplicates == len(events)
    assert count(database, RawEvent.event_id) == len(events)


def test_fleet_over_http_is_stored_as_sent(client, ingest_token, database):
    spec = FleetSpec(seed=3, models=3, days=4, now=time.time(), benchmarks=False)
    events = list(fleet_events(spec))
    report = send_over_http(
        "http://testserver",
        ingest_token,
        iter(events),
        client=client,
        batch_size=500,
        progress=False,
    )
    assert report.sent == report.accepted == len(events) == count(database, RawEvent.event_id)
    assert report.rejected == []
    # The test app recomputes inline, so every job has its result.
    assert count(database, JobResult.job_id) == len({e["job_id"] for e in events})
    with pytest.raises(IngestRefused, match="401"):
        send_over_http(
            "http://testserver", "wrong", iter(events[:3]), client=client, progress=False
        )


def test_live_feed_sends_what_became_due_once(database, tmp_path):
    now = time.time()
    spec = FleetSpec(seed=5, models=8, days=5, now=now - 2 * 3600, benchmarks=False)
    loaded = list(fleet_events(spec))
    with database.session() as s:
        from ingest.service import ingest_batch

        ingest_batch(db_session=s, events=loaded, token=None)
        s.commit()
    feed = LiveFeed(database, spec)
    pending = feed.pending_jobs
    assert pending > 0
    first = feed.tick(now)
    assert first > 0  # two hours of the running jobs' events
    assert feed.tick(now) == 0  # nothing new at the same instant
    assert count(database, RawEvent.event_id) == len(loaded) + first
    # Ticking past a running job's job_ended sends it and stops following that job.
    ends = {job_id: events[-1]["ts"] for job_id, (_plan, events) in feed._jobs.items()}
    later = min(ends.values())
    ended = {job_id for job_id, ts in ends.items() if ts <= later}
    before = feed.pending_jobs
    assert feed.tick(later) > 0
    assert ended and not ended & set(feed._jobs)
    assert feed.pending_jobs == before - len(ended)
    assert read_spec(save_spec(tmp_path, spec, database_url="x").parent, "x") == spec
    assert read_spec(tmp_path, "another database") is None
