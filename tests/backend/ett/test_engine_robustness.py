"""Malformed timelines: each is repaired by a documented rule and reported, never raised."""

from __future__ import annotations

import pytest

from backend.ett.engine import compute_job
from backend.ett.timeline import WARNING_RULES
from tests.backend.ett.builders import JobEvents, assert_consistent

NOW = 1_000_000.0


def run(job: JobEvents | list, **kw: object):
    """compute_job, checked for the identities."""
    events = job.events if isinstance(job, JobEvents) else job
    result = compute_job(events, now=kw.pop("now", NOW), **kw)  # type: ignore[arg-type]
    assert_consistent(result)
    return result


def codes(result) -> dict[str, list[str]]:
    """warning code -> event ids."""
    for w in result.warnings:
        assert w["message"] == WARNING_RULES[w["code"]]
    return {w["code"]: w["event_ids"] for w in result.warnings}


def simple_job() -> JobEvents:
    """A clean one-attempt job on [0, 100]."""
    j = JobEvents()
    j.submitted(0)
    j.started(0, 0)
    j.progress(0, 10, 90, 0, 80)
    j.ended(0, 90)
    j.job_ended(100)
    return j


def test_span_ending_before_it_starts_is_set_aside():
    j = simple_job()
    bad = j.phase(0, "pt2_compile", 50, 40)
    bad2 = j.progress(0, 95, 91, 80, 81)
    r = run(j)
    assert codes(r) == {"end_before_start": sorted([bad, bad2])}
    assert r.components["pt2_compile"] == 0 and r.effective_s == 80


def test_events_after_job_ended_are_clipped():
    j = simple_job()
    late = j.progress(0, 95, 120, 80, 100)
    r = run(j)
    assert codes(r) == {"after_job_end": [late]}
    assert r.e2e_s == 100 and r.effective_s == 85


def test_events_before_submission_are_clipped():
    j = JobEvents()
    j.submitted(10)
    early = j.started(0, 0)
    j.progress(0, 5, 20, 0, 15)
    j.ended(0, 20)
    j.job_ended(20)
    r = run(j)
    assert set(codes(r)["before_submission"]) >= {early}
    assert r.effective_s == 10 and r.e2e_s == 10


def test_cursor_going_backwards_is_stalled():
    j = simple_job()
    back = j.progress(0, 90, 95, 80, 70)
    r = run(j)
    assert codes(r) == {"cursor_backwards": [back]}
    assert r.wasted["stalled"] == 5


def test_overlapping_progress_windows_one_classifies_all_raise_the_mark():
    j = JobEvents()
    j.submitted(0)
    j.started(0, 0)
    a = j.progress(0, 0, 50, 0, 50)
    b = j.progress(0, 40, 60, 40, 60)  # classifies 40..60 (later start), same cursor line as a
    c = j.progress(0, 10, 20, 10, 20)  # inside a: classifies 10..20, changes nothing
    j.ended(0, 60)
    j.job_ended(60)
    r = run(j)
    assert codes(r) == {"overlapping_progress": sorted([a, b, c])}
    assert r.effective_s == 60


def test_job_without_job_submitted_starts_at_its_earliest_event():
    j = simple_job()
    j.events.pop(0)
    r = run(j)
    assert "no_job_submitted" in codes(r)
    assert r.submitted_at == 0 and r.e2e_s == 100 and r.model is None


def test_attempts_out_of_order_are_ordered_by_time():
    j = JobEvents()
    j.submitted(0)
    s1 = j.started(1, 10)
    j.progress(1, 10, 20, 0, 10)
    j.ended(1, 20, reason="failure")
    s0 = j.started(0, 30)
    j.progress(0, 30, 40, 10, 20)
    j.ended(0, 40)
    j.job_ended(40)
    r = run(j)
    assert codes(r) == {"attempts_out_of_order": sorted([s0, s1])}
    assert r.effective_s == 20 and r.l1.nof == 1 and r.l1.failures[0].attempt == 1


def test_overlapping_attempts_cut_at_next_start():
    j = JobEvents()
    j.submitted(0)
    s0 = j.started(0, 0)
    j.progress(0, 0, 10, 0, 10)
    j.ended(0, 30)
    s1 = j.started(1, 20)
    j.progress(1, 20, 30, 10, 20)
    j.ended(1, 30)
    j.job_ended(30)
    r = run(j)
    assert codes(r)["overlapping_attempts"] == sorted([s0, s1])
    assert r.components["unattributed"] == 10


def test_phase_that_never_ends_on_a_closed_job():
    j = JobEvents()
    j.submitted(0)
    j.started(0, 0)
    p = j.phase_started(0, "pt2_compile", 5)
    j.job_ended(50, status="failed")
    r = run(j, heartbeat_timeout_s=10)
    assert codes(r) == {"phase_never_ended": [p]}
    # the silent attempt fails at its last event (5), so the open span is empty
    assert r.l1.failures[0].inferred and r.l1.failures[0].ts == 5


def test_missing_attempt_started_uses_earliest_event():
    j = JobEvents()
    j.submitted(0)
    first = j.progress(0, 10, 20, 0, 10)
    j.ended(0, 20)
    j.job_ended(20)
    r = run(j)
    assert codes(r) == {"missing_attempt_started": [first]}
    assert r.components["scheduling"] == 10 and r.effective_s == 10


def test_conflicting_duplicates_keep_one_deterministically():
    j = simple_job()
    twin = dict(j.events[2])
    twin["cursor_end"] = 40
    r1 = run(j.events + [twin])
    r2 = run([twin] + j.events)
    assert codes(r1) == {"conflicting_duplicate": [twin["event_id"]]}
    assert r1.to_dict() == r2.to_dict()


def test_garbage_never_raises():
    j = simple_job()
    garbage = [
        None,
        42,
        "x",
        {},
        {"event_id": 7, "type": "heartbeat"},
        {"event_id": "g1", "type": "nope", "ts": 1},
        {"event_id": "g2", "type": "heartbeat", "ts": "soon", "attempt": 0},
        {"event_id": "g3", "type": "progress", "attempt": -1, "start": 1, "end": 2},
        {"event_id": "g4", "type": "progress", "attempt": 0, "start": 1, "end": 2},
        {"event_id": "g5", "type": "phase", "attempt": 0, "phase": 3, "start": 1, "end": 2},
        {"event_id": "g6", "type": "checkpoint", "attempt": 0, "start": 1},
        {"event_id": "g7", "type": "failure", "attempt": 0, "ts": 50, "kind": "gremlins"},
        {"event_id": "g8", "type": "heartbeat", "attempt": True, "ts": 3},
        {"event_id": "g9", "type": "heartbeat", "attempt": 0, "ts": float("nan")},
        {"event_id": "g10", "type": "job_submitted", "ts": 1e308, "gpus": "many"},
        {"event_id": "g11", "type": "attempt_ended", "attempt": 0, "ts": -5},
        {"event_id": "g12", "type": "heartbeat", "attempt": 0, "ts": 10**400},
        {
            "event_id": "g13",
            "type": "progress",
            "attempt": 0,
            "start": 1.0,
            "end": 2.0,
            "cursor_start": 10**500,
            "cursor_end": 1,
        },
        {"event_id": "g14", "type": ["list"], "ts": 1.0},
        {"event_id": "g15", "type": "failure", "attempt": 0, "ts": 2.0, "kind": ["x"]},
        {"event_id": "g16", "type": "attempt_ended", "attempt": 0, "ts": 3.0, "reason": {}},
        {"event_id": "g17", "type": "job_ended", "ts": 99.0, "status": ["no"]},
        {"event_id": "g18", "type": "job_submitted", "ts": 0.0, "labels": [1], "config": 3},
    ]
    r = run(j.events + garbage)
    found = codes(r)
    assert {"invalid_event", "unknown_type", "unknown_failure_kind"} <= set(found)
    assert {"g2", "g12"} <= set(found["invalid_event"]) and "g1" in found["unknown_type"]
    assert "g13" in found["cursor_missing"] and "g14" in found["unknown_type"]
    assert {"g10", "g11"} <= set(found["time_out_of_range"])


def test_job_ended_before_submission():
    j = JobEvents()
    j.submitted(100)
    e = j.job_ended(50)
    r = run(j)
    assert codes(r)["job_ended_before_submitted"] == [e]
    assert r.e2e_s == 0 and r.ett_pct == 0


def test_events_after_now_on_open_job_extend_it():
    j = JobEvents()
    j.submitted(0)
    j.started(0, 0)
    j.progress(0, 0, 200, 0, 10)
    r = run(j, now=100)
    assert "after_now" in codes(r) and r.ended_at == 200


@pytest.mark.parametrize("heartbeat_timeout_s", [0.0, 1e9])
def test_only_heartbeats(heartbeat_timeout_s: float):
    j = JobEvents()
    j.heartbeat(0, 5)
    j.heartbeat(0, 9)
    r = run(j, now=20, heartbeat_timeout_s=heartbeat_timeout_s)
    assert r.e2e_s == 15
