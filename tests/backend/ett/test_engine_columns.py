"""The column layout's two sorts agree: numpy's (large jobs) and Python's (small ones).

`timeline.NUMPY_SORT_MIN` picks the sort by a job's size (`HASH_SORT_MIN` the duplicate check);
the generated jobs here are small, so each is accounted twice, once with both thresholds
lowered so numpy sorts it and hashes its ids, and the answers
must be equal, every field. Conflicting duplicates, ties of time and type, malformed fields and
arbitrary arrival orders are all in the generators.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from backend.ett import timeline
from backend.ett.engine import compute_job
from tests.backend.ett.test_engine_properties import (
    COMMON,
    CUSTOM,
    NOW,
    field_job,
    fuzzed_event,
    job,
)


def _both(events: list[Any], now: float) -> tuple[dict[str, Any], dict[str, Any]]:
    python = compute_job(events, now=now, custom_phases=CUSTOM).to_dict(with_spans=True)
    saved = timeline.NUMPY_SORT_MIN, timeline.HASH_SORT_MIN
    timeline.NUMPY_SORT_MIN = timeline.HASH_SORT_MIN = 2
    try:
        numpy = compute_job(events, now=now, custom_phases=CUSTOM).to_dict(with_spans=True)
    finally:
        timeline.NUMPY_SORT_MIN, timeline.HASH_SORT_MIN = saved
    return python, numpy


@COMMON
@given(job(), st.data())
def test_numpy_sort_equals_python_sort(events: list[dict[str, Any]], data: Any):
    shuffled = list(data.draw(st.permutations(events)))
    dups = data.draw(st.lists(st.sampled_from(events), max_size=5)) if events else []
    python, numpy = _both(shuffled + [copy.deepcopy(d) for d in dups], NOW)
    assert numpy == python


@COMMON
@given(field_job(), st.data())
def test_numpy_sort_equals_python_sort_on_field_jobs(case: tuple[list[dict], float], data: Any):
    events, now = case
    python, numpy = _both(list(data.draw(st.permutations(events))), now)
    assert numpy == python


@COMMON
@given(st.integers(0, 15).flatmap(lambda n: st.tuples(*[fuzzed_event(f"e{i}") for i in range(n)])))
def test_numpy_sort_equals_python_sort_on_fuzzed_fields(events: tuple[dict[str, Any], ...]):
    python, numpy = _both(list(events), NOW)
    assert numpy == python


def test_ties_of_time_and_type_are_ordered_by_event_id():
    # Three heartbeats and two windows at one instant, arriving in reverse id order: the sort
    # key is (time, type rank, event_id) whichever sort runs.
    events: list[dict[str, Any]] = [
        {"event_id": "sub", "job_id": "j", "type": "job_submitted", "ts": 0.0},
        {"event_id": "a0", "type": "attempt_started", "attempt": 0, "ts": 1.0},
    ]
    for eid in ("w9", "w1"):
        events.append(
            {"event_id": eid, "type": "progress", "attempt": 0, "start": 5.0, "end": 9.0,
             "cursor_start": 0.0, "cursor_end": 4.0}
        )  # fmt: skip
    for eid, host in (("h3", "c"), ("h2", "b"), ("h1", "a")):
        events.append({"event_id": eid, "type": "heartbeat", "attempt": 0, "ts": 5.0, "host": host})
    for limit in (2, 10**9):
        saved = timeline.NUMPY_SORT_MIN
        timeline.NUMPY_SORT_MIN = limit
        try:
            cols = timeline.sorted_columns(list(reversed(events)), timeline.WarningLog())
            tl = timeline.build_timeline(list(reversed(events)), now=NOW)
        finally:
            timeline.NUMPY_SORT_MIN = saved
        assert timeline.sorted_ids(cols) == ["sub", "a0", "w1", "w9", "h1", "h2", "h3"]
        assert [w.event_id for w in tl.windows] == ["w1", "w9"]
        assert tl.attempts[0].hosts == ["a", "b", "c"]


@pytest.mark.parametrize("limit", [2, 10**9])
def test_a_generator_is_read_once(limit: int, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(timeline, "NUMPY_SORT_MIN", limit)
    events = [
        {"event_id": "sub", "job_id": "j", "type": "job_submitted", "ts": 0.0},
        {"event_id": "x", "type": "heartbeat", "attempt": 0, "ts": 3.0},
        {"event_id": "x", "type": "heartbeat", "attempt": 0, "ts": 2.0},  # conflicting copy
    ]
    r = compute_job((e for e in events), now=NOW)
    assert r.events == 2
    assert [w["code"] for w in r.warnings if w["code"] == "conflicting_duplicate"]
    assert r.to_dict() == compute_job(events, now=NOW).to_dict()
