"""A large job's answer does not depend on how its events are sorted (array or list sort)."""

from __future__ import annotations

import random

import pytest

from backend.ett import timeline
from backend.ett.engine import compute_job
from benchmarks.bench_engine import synthetic_job


def _job_with_ties(n: int) -> list[dict]:
    """bench_engine's long job, plus heartbeats sharing instants with other events."""
    events = synthetic_job(n, shuffled=False)
    extra = [
        {"event_id": f"tie{i}", "job_id": "bench", "type": "heartbeat", "attempt": 0, "ts": ev[k]}
        for i, ev in enumerate(events[:: max(1, n // 500)])
        if ev.get("attempt") == 0 and (k := "ts" if "ts" in ev else "start")
    ]
    out = events + extra
    random.Random(3).shuffle(out)
    return out


@pytest.mark.parametrize("n", [6_000, 30_000])
def test_array_sort_gives_the_list_sorts_answer_bit_for_bit(
    n: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every field of the result, with the events ordered by numpy's argsort (large jobs) and
    by sorting the key tuples, is the same: ties of time resolved by type rank and event_id."""
    events = _job_with_ties(n)
    keyed, _ = timeline._dedupe_and_sort(events, timeline.WarningLog())
    assert len(keyed) >= timeline._ARRAY_SORT_MIN
    assert keyed == sorted(keyed, key=lambda k: k[:3])
    fast = compute_job(events, now=1e12).to_dict(with_spans=True)
    monkeypatch.setattr(timeline, "_ARRAY_SORT_MIN", 10**9)
    slow = compute_job(events, now=1e12).to_dict(with_spans=True)
    assert fast == slow
    assert fast["events"] == len(events)
