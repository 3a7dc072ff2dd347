"""The worker's incremental path over the demo fleet, on both databases: after every batch the
stored answer equals the full recompute from all raw events, every field (issue 29 item 2)."""

from __future__ import annotations

import time
from typing import Any

import pytest
from sqlalchemy import insert, select

from backend.demo.fleet import FleetSpec, plans
from backend.demo.simulator import cut_at, job_events
from backend.ett.engine import compute_job
from backend.ett.incremental import AccountState
from backend.ett.models import JobAccountingState, JobInterval, JobResult
from backend.events.models import RawEvent
from backend.events.retention import month_of
from backend.events.store import count_rows_up_to, load_events
from backend.fleet.models import FleetDayTotal, FleetJobDay
from backend.results import recompute
from ingest import service as ingest_service
from tests.backend.ett.builders import JobEvents

NOW = 1_780_000_000.0
STEP_S = 1_800.0  # the worker sees each job every 30 min of its life: 5+ windows a batch


def _open_jobs(n: int) -> list[list[dict[str, Any]]]:
    """Events of the first n demo jobs that run several hours, with restarts among them."""
    spec = FleetSpec(seed=3, models=4, days=3.0, now=NOW, benchmarks=False)
    out = []
    for plan in plans(spec):
        events = job_events(plan)
        span = max(ev.get("end", ev.get("ts", 0.0)) for ev in events) - plan.submitted_at
        if span > 4 * 3_600:
            out.append(events)
        if len(out) == n:
            break
    return out


def _rows(s: Any, job_id: str) -> tuple[dict[str, Any], list[tuple[Any, ...]]]:
    row = s.get(JobResult, job_id)
    ivs = s.execute(
        select(
            JobInterval.start,
            JobInterval.end,
            JobInterval.attempt,
            JobInterval.component,
            JobInterval.phase,
            JobInterval.gpus,
        )
        .where(JobInterval.job_id == job_id)
        .order_by(JobInterval.start)
    )
    return row.result, [tuple(iv) for iv in ivs]


def _job_days(s: Any, job_id: str) -> list[tuple[Any, ...]]:
    rows = s.execute(
        select(
            FleetJobDay.day,
            FleetJobDay.component,
            FleetJobDay.phase,
            FleetJobDay.model,
            FleetJobDay.wall_s,
            FleetJobDay.gpu_s,
        ).where(FleetJobDay.job_id == job_id)
    )
    return sorted(tuple(r) for r in rows)


def test_the_demo_fleet_extends_to_the_full_answer(database, settings, monkeypatch):
    extended: list[str] = []
    real = recompute.extend

    def counting(*args: Any, **kwargs: Any) -> Any:
        out = real(*args, **kwargs)
        extended.append(out[0].job_id or "")
        return out

    monkeypatch.setattr(recompute, "extend", counting)
    jobs = _open_jobs(3)
    assert len(jobs) == 3
    checked = 0
    for events in jobs:
        job_id = events[0]["job_id"]
        start = min(ev.get("ts", ev.get("start", NOW)) for ev in events)
        last = max(ev.get("end", ev.get("ts", 0.0)) for ev in events)
        sent: set[str] = set()
        t = start + STEP_S
        while t < last + 2 * STEP_S:
            batch = [ev for ev in cut_at(events, t) if ev["event_id"] not in sent]
            sent.update(ev["event_id"] for ev in batch)
            with database.session() as s:
                if batch:
                    ingest_service.ingest_batch(db_session=s, events=batch, token=None, now=t)
                recompute.recompute_job(db_session=s, job_id=job_id, settings=settings, now=t)
                s.commit()
            with database.session() as s:
                kept, kept_ivs = _rows(s, job_id)
                kept_days = _job_days(s, job_id)
                full = compute_job(
                    load_events(db_session=s, job_id=job_id),
                    now=t,
                    heartbeat_timeout_s=settings.heartbeat_timeout_s,
                    abandon_timeout_s=settings.abandon_timeout_s,
                    custom_phases=recompute.custom_phases_for(db_session=s, settings=settings),
                )
                # The full recompute stored afresh, in the same database, is the reference.
                recompute.recompute_job(
                    db_session=s, job_id=job_id, settings=settings, now=t, incremental=False
                )
                again, again_ivs = _rows(s, job_id)
                again_days = _job_days(s, job_id)
                s.rollback()
            assert kept == again, (job_id, t)
            assert kept_ivs == again_ivs, (job_id, t)
            # The fleet rows an extension rewrites (its last days only) are the full refresh's.
            assert kept_days == again_days, (job_id, t)
            assert len(kept_ivs) == len(full.intervals)
            assert kept["ett_pct"] == full.ett_pct and kept["events"] == full.events
            checked += 1
            t += STEP_S
    assert checked > 20
    # Most batches of a running job were extensions, not recomputes.
    assert len(extended) > checked / 2, (len(extended), checked)
    with database.session() as s:  # ended jobs keep no state
        assert list(s.scalars(select(JobAccountingState.job_id))) == []


def _open_job(job_id: str, now: float) -> list[dict[str, Any]]:
    """A running job: init, then 30 s windows up to `now`, a heartbeat every minute."""
    j = JobEvents(job_id)
    j.submitted(now - 3_600, model="m", gpus=8)
    j.started(0, now - 3_600)
    j.phase(0, "trainer_init", now - 3_600, now - 3_000)
    t, c = now - 3_000, 0.0
    while t + 30 < now:
        j.progress(0, t, t + 30, c, c + 30)
        t, c = t + 30, c + 30
        j.heartbeat(0, t)
    return j.events


def test_an_open_job_s_answer_is_served_stored_with_no_raw_read(client, post, monkeypatch):
    """GET /jobs/{id}/ett of an open job is its stored provisional answer (issue 28 item 2)."""
    now = time.time()
    ok = post(_open_job("open-1", now))
    assert ok.status_code == 200, ok.text
    from backend.events import store as event_store
    from backend.results import read

    def no_raw_read(**_: Any) -> Any:
        raise AssertionError("the job read path read raw events")

    for name in ("load_events", "load_events_after"):
        monkeypatch.setattr(event_store, name, no_raw_read)
        monkeypatch.setattr(recompute, name, no_raw_read)
    assert not hasattr(read, "compute")
    r = client.get("/api/v1/jobs/open-1/ett")
    assert r.status_code == 200, r.text
    doc = r.json()
    assert doc["provisional"] is True and doc["status"] == "running"
    assert doc["effective_s"] > 2_900 and doc["intervals"]


def test_a_conflicting_copy_drops_the_state_and_the_next_compute_is_full(database, settings):
    now = time.time()
    events = _open_job("open-2", now)
    with database.session() as s:
        ingest_service.ingest_batch(db_session=s, events=events, token=None, now=now)
        recompute.recompute_job(db_session=s, job_id="open-2", settings=settings, now=now)
        s.commit()
        assert s.get(JobAccountingState, "open-2") is not None
    # A smaller copy of a window in the middle: the stored row is replaced in place.
    window = next(ev for ev in events if ev["type"] == "progress")
    smaller = {**window, "steps": 0}  # canonical JSON "steps":0 < "steps":1
    with database.session() as s:
        ingest_service.ingest_batch(db_session=s, events=[smaller], token=None, now=now)
        s.commit()
        assert s.get(JobAccountingState, "open-2") is None
        result = recompute.recompute_job(db_session=s, job_id="open-2", settings=settings, now=now)
        s.commit()
        assert s.get(JobAccountingState, "open-2") is not None  # kept again, from the full
    full = compute_job(
        [smaller if ev["event_id"] == window["event_id"] else ev for ev in events],
        now=now,
        heartbeat_timeout_s=settings.heartbeat_timeout_s,
        abandon_timeout_s=settings.abandon_timeout_s,
    )
    assert result is not None and result.to_dict(with_spans=True) == full.to_dict(with_spans=True)


def test_ett_recompute_is_always_full(database, settings, monkeypatch):
    now = time.time()
    with database.session() as s:
        ingest_service.ingest_batch(
            db_session=s, events=_open_job("open-3", now), token=None, now=now
        )
        recompute.recompute_job(db_session=s, job_id="open-3", settings=settings, now=now)
        s.commit()

    def never(*_: Any, **__: Any) -> Any:
        raise AssertionError("ett recompute extended a state")

    monkeypatch.setattr(recompute, "extend", never)
    with database.session() as s:
        assert (
            recompute.recompute_all(db_session=s, settings=settings, progress=False, now=now + 30)
            == 1
        )


def _fleet_rows(s: Any) -> list[tuple[Any, ...]]:
    rows = s.execute(
        select(
            FleetDayTotal.day, FleetDayTotal.component, FleetDayTotal.phase, FleetDayTotal.wall_s
        )
    )
    return sorted(tuple(r) for r in rows)


def test_an_extension_across_midnight_rewrites_only_its_last_days(database, settings, monkeypatch):
    """The fleet rows of an open job extended past midnight equal the full refresh's, and the
    extension's refresh touches only the days from its settled point on."""
    midnight = 1_780_012_800.0  # a UTC midnight
    assert midnight % 86_400 == 0
    j = JobEvents("cross")
    j.submitted(midnight - 7_200, model="m", gpus=8)
    j.started(0, midnight - 7_200)
    j.phase(0, "trainer_init", midnight - 7_200, midnight - 6_600)
    t, c = midnight - 6_600, 0.0
    while t < midnight + 7_200:
        j.progress(0, t, t + 30, c, c + 30)
        t, c = t + 30, c + 30
        j.heartbeat(0, t)
        if int(c) % 1_800 == 0:  # a save every 30 min cuts the effective time into pieces
            j.checkpoint(0, t, t + 4)
            t += 4
    events = j.events
    days_from: list[float] = []
    real = recompute.refresh_extended_rollups

    def spying(**kwargs: Any) -> None:
        days_from.append(kwargs["since"])
        real(**kwargs)

    monkeypatch.setattr(recompute, "refresh_extended_rollups", spying)
    sent: set[str] = set()
    folds: list[bool] = []
    cut = midnight - 5_400
    while cut <= midnight + 7_200:
        batch = [
            ev
            for ev in events
            if ev["event_id"] not in sent
            and max(ev.get("end", 0.0), ev.get("ts", 0.0), ev.get("blocking_end", 0.0)) <= cut
        ]
        sent.update(ev["event_id"] for ev in batch)
        with database.session() as s:
            ingest_service.ingest_batch(db_session=s, events=batch, token=None, now=cut)
            recompute.recompute_job(db_session=s, job_id="cross", settings=settings, now=cut)
            s.commit()
        with database.session() as s:
            kept_days, kept_fleet = _job_days(s, "cross"), _fleet_rows(s)
            kept, kept_ivs = _rows(s, "cross")
            state = s.get(JobAccountingState, "cross")
            folds.append(state is not None and AccountState.from_json(state.state).fold is not None)
            recompute.recompute_job(
                db_session=s, job_id="cross", settings=settings, now=cut, incremental=False
            )
            again_days, again_fleet = _job_days(s, "cross"), _fleet_rows(s)
            again, again_ivs = _rows(s, "cross")
            s.rollback()
        assert kept == again and kept_ivs == again_ivs, cut
        assert kept_days == again_days, cut
        assert [r[:3] for r in kept_fleet] == [r[:3] for r in again_fleet], cut
        for a, b in zip(kept_fleet, again_fleet, strict=True):
            assert abs(a[3] - b[3]) < 1e-6, (cut, a, b)
        cut += 1_800
    assert len({r[0] for r in kept_days}) == 2  # the job's two days
    assert len(days_from) >= 6
    # After midnight the extensions start within the second day: the first is left alone.
    assert days_from[-1] >= midnight
    # Past midnight the first day's pieces were folded into sums (the state keeps the second's).
    assert folds[-1] and not folds[0]


def _window(job_id: str, n: int, t: float) -> dict[str, Any]:
    return {
        "event_id": f"{job_id}-late-{n}",
        "job_id": job_id,
        "type": "progress",
        "attempt": 0,
        "start": t,
        "end": t + 30.0,
        "cursor_start": 1e6 + n * 30.0,
        "cursor_end": 1e6 + n * 30.0 + 30.0,
        "steps": 30,
    }


def test_the_mark_check_reads_only_recent_rows_and_still_sees_a_late_commit(database, settings):
    """A row numbered below the mark but committed after the read (Postgres numbers rows at
    insert) sends the job to the full recompute, while the check itself counts only the rows
    read since the marks were last known final."""
    if database.engine.dialect.name != "postgresql":
        pytest.skip("SQLite has one writer: no row commits below a committed one")
    now = time.time()
    events = _open_job("late", now - 120)
    with database.session() as s:
        ingest_service.ingest_batch(db_session=s, events=events, token=None, now=now - 120)
        recompute.recompute_job(db_session=s, job_id="late", settings=settings, now=now - 120)
        s.commit()
    t = events[-1]["ts"]
    # Two quiet extensions: the rows read by the first are final by the second.
    for i, at in enumerate((now - 90, now - 60)):
        with database.session() as s:
            ingest_service.ingest_batch(
                db_session=s, events=[_window("late", i, t + 30 * i)], token=None, now=at
            )
            recompute.recompute_job(db_session=s, job_id="late", settings=settings, now=at)
            s.commit()
    with database.session() as s:
        row = s.get(JobAccountingState, "late")
        marks = AccountState.from_json(row.state).marks
        assert marks["final_row"] is not None and marks["final_row"] < row.last_event_row
        assert marks["final_rows"] == count_rows_up_to(
            db_session=s, job_id="late", row=marks["final_row"]
        )
    # An ingest that has numbered its row but not committed it, while a later one commits.
    late = database.session()
    late.execute(
        insert(RawEvent).values(
            event_id="late-late-2",
            job_id="late",
            type="progress",
            attempt=0,
            ts=t + 60,
            received_at=now,
            payload=_window("late", 2, t + 60),
            job_month=month_of(now - 3_600),
        )
    )
    with database.session() as s:
        ingest_service.ingest_batch(
            db_session=s, events=[_window("late", 3, t + 90)], token=None, now=now - 30
        )
        s.commit()
        # Extended without the uncommitted window (the engine sees a gap).
        recompute.recompute_job(db_session=s, job_id="late", settings=settings, now=now - 30)
        s.commit()
    late.commit()
    late.close()
    with database.session() as s:
        result = recompute.recompute_job(db_session=s, job_id="late", settings=settings, now=now)
        s.commit()
        full = recompute.compute(db_session=s, job_id="late", settings=settings, now=now)
    assert result is not None and full is not None
    assert result.events == len(events) + 4
    assert result.to_dict(with_spans=True) == full.to_dict(with_spans=True)
