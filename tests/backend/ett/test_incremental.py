"""Incremental accounting equals the full recompute: any split into batches, any arrival order,
duplicates and conflicting copies, batches landing inside the settled prefix (issue 29 item 2)."""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from backend.ett import incremental
from backend.ett.engine import JobETT, account, compute_job, compute_parts
from backend.ett.incremental import AccountState, NeedsFull, extend, settle
from backend.ett.timeline import canonical_json
from tests.backend.ett.test_engine_properties import CUSTOM, job

HEARTBEAT_S = 300.0
ABANDON_S = 3_600.0
ENGINE = {"heartbeat_timeout_s": HEARTBEAT_S, "abandon_timeout_s": ABANDON_S}


class Replay:
    """The worker's path over one job, in memory: the store's dedupe, then extend or full."""

    def __init__(self, custom: dict[str, str] | None = None) -> None:
        self.stored: dict[str, dict[str, Any]] = {}
        self.state: AccountState | None = None
        self.custom = custom
        self.extended = 0
        self.full = 0

    def batch(self, events: Iterable[dict[str, Any]], now: float) -> tuple[JobETT, JobETT]:
        """(incremental answer, full answer) after this batch arrives at `now`."""
        new: list[dict[str, Any]] = []
        conflict = False
        for ev in events:
            eid = ev["event_id"]
            old = self.stored.get(eid)
            if old is None:
                self.stored[eid] = ev
                new.append(ev)
            elif old != ev:
                conflict = True  # ingest settles it by canonical JSON and drops the state
                if canonical_json(ev) < canonical_json(old):
                    self.stored[eid] = ev
        full = compute_job(list(self.stored.values()), now=now, custom_phases=self.custom, **ENGINE)
        result: JobETT | None = None
        if self.state is not None and not conflict:
            try:
                result, state = extend(self.state, new, now=now, **ENGINE)
                self.state = state
                self.extended += 1
            except NeedsFull:
                result = None
        if result is None:
            self.full += 1
            # A fresh list: the state must come from a compute of its own, as in the worker.
            tl, part = compute_parts(
                copy.deepcopy(list(self.stored.values())),
                now=now,
                custom_phases=self.custom,
                **ENGINE,
            )
            self.state = settle(tl, part)
            if self.state is not None:
                # Through its JSON text, as the worker stores it.
                self.state = AccountState.from_json(self.state.to_json())
            result = account(tl, part.pieces, part.phases)
        return result, full


def assert_same(inc: JobETT, full: JobETT) -> None:
    """Every field, to the bit: the dataclasses and their stored and REST documents.

    An answer extended from a folded state has the intervals after the fold only (the worker
    keeps the earlier ones stored): they are the full answer's last ones.
    """
    if len(inc.intervals) < len(full.intervals):
        assert inc.intervals == full.intervals[len(full.intervals) - len(inc.intervals) :]
        full = dataclasses.replace(full, intervals=inc.intervals)
    assert inc.to_dict(with_spans=True) == full.to_dict(with_spans=True)
    assert inc == full


def replay(batches: Sequence[Sequence[dict[str, Any]]], nows: Sequence[float]) -> Replay:
    """Feed the batches in order and check incremental == full after each."""
    r = Replay(CUSTOM)
    for batch, now in zip(batches, nows, strict=True):
        inc, full = r.batch(batch, now)
        assert_same(inc, full)
    return r


def _ev(eid: str, etype: str, **kw: Any) -> dict[str, Any]:
    return {"event_id": eid, "job_id": "j", "type": etype, **kw}


@st.composite
def live_job(draw: st.DrawFn) -> list[tuple[float, dict[str, Any]]]:
    """An agent-like open job, (time it speaks about, event): progress every window, heartbeats,
    checkpoints, phases that cut the loop, stalls, replays after a restart, sometimes a restart."""
    out: list[tuple[float, dict[str, Any]]] = []
    t = float(draw(st.integers(0, 20)))
    out.append((0.0, _ev("sub", "job_submitted", ts=0.0, model="m", gpus=8)))
    attempt = 0
    out.append(
        (t, _ev("a0", "attempt_started", attempt=0, ts=t, gpus=draw(st.sampled_from([4, 8]))))
    )
    if draw(st.booleans()):
        d = float(draw(st.integers(1, 30)))
        out.append((t, _ev("init0", "phase", attempt=0, phase="trainer_init", start=t, end=t + d)))
        t += d
    cursor = 0.0
    for i in range(draw(st.integers(0, 30))):
        t += draw(st.sampled_from([0.0, 0.0, 0.0, 2.5, 30.0]))
        kind = draw(
            st.sampled_from(["advance"] * 6 + ["stall", "replay", "checkpoint", "phase", "open"])
        )
        if kind == "checkpoint":
            out.append(
                (t, _ev(f"c{i}", "checkpoint", attempt=attempt, start=t, blocking_end=t + 3.0))
            )
            t += 3.0
            continue
        if kind in ("phase", "open"):
            out.append(
                (
                    t,
                    _ev(
                        f"ps{i}",
                        "phase_started",
                        attempt=attempt,
                        phase="evaluation",
                        start=t,
                        span_id=f"s{i}",
                    ),
                )
            )
            if kind == "phase" or draw(st.booleans()):
                out.append(
                    (
                        t + 7.0,
                        _ev(
                            f"pe{i}",
                            "phase",
                            attempt=attempt,
                            phase="evaluation",
                            start=t,
                            end=t + 7.0,
                            span_id=f"s{i}",
                        ),
                    )
                )
                t += 7.0
            continue
        dur = draw(st.sampled_from([30.0, 30.0, 10.0, 0.0]))
        cs = cursor - 5.0 if kind == "replay" else cursor
        ce = cs if kind == "stall" else cs + draw(st.sampled_from([10.0, 25.0, 0.5]))
        out.append(
            (
                t + dur,
                _ev(
                    f"p{i}",
                    "progress",
                    attempt=attempt,
                    start=t,
                    end=t + dur,
                    cursor_start=cs,
                    cursor_end=ce,
                    steps=1,
                ),
            )
        )
        cursor = max(cursor, ce)
        t += dur
        if draw(st.integers(0, 2)) == 0:
            out.append((t, _ev(f"h{i}", "heartbeat", attempt=attempt, ts=t)))
        if draw(st.integers(0, 25)) == 0:
            out.append((t, _ev(f"f{i}", "failure", attempt=attempt, ts=t, kind="app_error")))
            attempt += 1
            t += 20.0
            out.append((t, _ev(f"a{attempt}", "attempt_started", attempt=attempt, ts=t)))
            out.append(
                (
                    t,
                    _ev(
                        f"r{attempt}",
                        "phase",
                        attempt=attempt,
                        phase="checkpoint_restore",
                        start=t,
                        end=t + 5.0,
                    ),
                )
            )
            t += 5.0
    return out


@st.composite
def arrivals(draw: st.DrawFn) -> tuple[list[list[dict[str, Any]]], list[float]]:
    """A live job split into batches by arrival: most events on time, some late (inside the
    settled prefix), resent copies and the odd conflicting copy; each batch at its own now."""
    timed = draw(live_job())
    end = max(t for t, _ in timed)
    arrived: list[tuple[float, int, dict[str, Any]]] = []
    for k, (t, ev) in enumerate(timed):
        delay = draw(st.sampled_from([0.0] * 8 + [45.0, 400.0]))
        arrived.append((t + delay, k, ev))
        if draw(st.integers(0, 9)) == 0:  # a resent copy, later
            arrived.append((t + delay + 60.0, k, copy.deepcopy(ev)))
        if draw(st.integers(0, 40)) == 0:  # a conflicting copy
            arrived.append((t + delay + 30.0, k, {**ev, "extra": "x"}))
    arrived.sort(key=lambda x: (x[0], x[1]))
    cuts = sorted(draw(st.lists(st.floats(0.0, end + 500.0), max_size=12)))
    cuts.append(max(end, arrived[-1][0]) + draw(st.sampled_from([0.0, 1.0, 200.0, 5_000.0])))
    batches: list[list[dict[str, Any]]] = []
    nows: list[float] = []
    i = 0
    for cut in cuts:
        batch = []
        while i < len(arrived) and arrived[i][0] <= cut:
            batch.append(arrived[i][2])
            i += 1
        if draw(st.booleans()):
            draw(st.randoms()).shuffle(batch)
        batches.append(batch)
        nows.append(cut + draw(st.sampled_from([0.0, 0.0, 15.0])))
    return batches, nows


BOUNDED = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@BOUNDED
@given(arrivals())
def test_incremental_equals_full_for_any_arrival(case: tuple[list[list[dict]], list[float]]):
    batches, nows = case
    replay(batches, nows)


@BOUNDED
@given(job(), st.data())
def test_incremental_equals_full_on_any_generated_job(events: list[dict[str, Any]], data: Any):
    """The engine's own random jobs (malformed events included), split and shuffled anyhow."""
    order = data.draw(st.permutations(events))
    dups = data.draw(st.lists(st.sampled_from(events), max_size=5)) if events else []
    arrived = list(order) + [copy.deepcopy(d) for d in dups]
    cuts = sorted(data.draw(st.lists(st.integers(0, len(arrived)), max_size=6)))
    nows = sorted(
        data.draw(st.lists(st.floats(0, 3_000), min_size=len(cuts) + 1, max_size=len(cuts) + 1))
    )
    batches = [arrived[a:b] for a, b in zip([0, *cuts], [*cuts, len(arrived)], strict=True)]
    replay(batches, nows)


def test_an_agent_like_job_extends_every_batch():
    """The ordinary traffic (a window every 30 s, a heartbeat every 60 s) never recomputes:
    after the first full compute every batch, and every idle minute, extends the state."""
    events = [_ev("sub", "job_submitted", ts=0.0, model="m", gpus=8)]
    events.append(_ev("a0", "attempt_started", attempt=0, ts=10.0))
    events.append(_ev("i0", "phase", attempt=0, phase="trainer_init", start=10.0, end=40.0))
    r = Replay()
    inc, full = r.batch(events, now=40.0)
    assert_same(inc, full)
    t, cursor = 40.0, 0.0
    for k in range(120):
        batch = [
            _ev(
                f"p{k}",
                "progress",
                attempt=0,
                start=t,
                end=t + 30.0,
                cursor_start=cursor,
                cursor_end=cursor + 30.0,
                steps=30,
            )
        ]
        t, cursor = t + 30.0, cursor + 30.0
        if k % 2:
            batch.append(_ev(f"h{k}", "heartbeat", attempt=0, ts=t))
        if k % 40 == 39:
            batch.append(_ev(f"c{k}", "checkpoint", attempt=0, start=t, blocking_end=t + 4.0))
            t += 4.0  # sent once committed; the loop resumes after the blocking part
        inc, full = r.batch(batch, now=t + 1.0)
        assert_same(inc, full)
        if k % 10 == 0:  # an idle refresh: no new event, a later now
            inc, full = r.batch([], now=t + 50.0)
            assert_same(inc, full)
    # Only the first compute is full: windows, heartbeats, saves and idle minutes extend it.
    assert r.full == 1
    assert r.extended == 120 + 12
    assert full.effective_s > 0 and full.provisional


@contextmanager
def folding_every(grain_s: float) -> Iterator[None]:
    """Fold the settled pieces at `grain_s` instead of whole days, so small jobs fold too."""
    kept = incremental.FOLD_GRAIN_S
    incremental.FOLD_GRAIN_S = grain_s
    try:
        yield
    finally:
        incremental.FOLD_GRAIN_S = kept


@BOUNDED
@given(arrivals(), st.sampled_from([5.0, 20.0, 60.0, 250.0]))
def test_a_folded_state_equals_full_for_any_arrival(
    case: tuple[list[list[dict]], list[float]], grain_s: float
):
    """The same, with the settled pieces folded into sums as they age (docs/ACCOUNTING.md)."""
    batches, nows = case
    with folding_every(grain_s):
        replay(batches, nows)


@BOUNDED
@given(job(), st.data(), st.sampled_from([5.0, 60.0, 600.0]))
def test_a_folded_state_equals_full_on_any_generated_job(
    events: list[dict[str, Any]], data: Any, grain_s: float
):
    with folding_every(grain_s):
        test_incremental_equals_full_on_any_generated_job.hypothesis.inner_test(events, data)


def test_an_agent_like_job_folds_its_pieces_and_keeps_a_bounded_state():
    """Saves cut the loop into pieces; with folding the state keeps only the recent ones."""
    with folding_every(300.0):
        events = [_ev("sub", "job_submitted", ts=0.0, model="m", gpus=8)]
        events.append(_ev("a0", "attempt_started", attempt=0, ts=10.0))
        events.append(_ev("i0", "phase", attempt=0, phase="trainer_init", start=10.0, end=40.0))
        r = Replay()
        inc, full = r.batch(events, now=40.0)
        t, cursor = 40.0, 0.0
        sizes = []
        for k in range(200):
            batch = [
                _ev(
                    f"p{k}",
                    "progress",
                    attempt=0,
                    start=t,
                    end=t + 30.0,
                    cursor_start=cursor,
                    cursor_end=cursor + 30.0,
                    steps=30,
                )
            ]
            t, cursor = t + 30.0, cursor + 30.0
            if k % 3 == 2:
                batch.append(_ev(f"c{k}", "checkpoint", attempt=0, start=t, blocking_end=t + 4.0))
                t += 4.0
            inc, full = r.batch(batch, now=t + 1.0)
            assert_same(inc, full)
            assert r.state is not None
            sizes.append(len(r.state.pieces))
        assert r.full == 1 and r.state.fold is not None
        assert len(full.intervals) > 100
        assert max(sizes[50:]) < 30  # about 300 s of pieces, not the job's 130


def test_a_window_from_the_save_s_start_extends_the_state():
    """An agent whose next window starts when the save starts (bench_load's), so the window
    overlaps the save's blocking time before S: rule 1 keeps that time blocking, and the batch
    extends the state instead of recomputing the job, folded or not."""
    for grain_s in (86_400.0, 200.0):
        with folding_every(grain_s):
            events = [_ev("sub", "job_submitted", ts=0.0, model="m", gpus=8)]
            events.append(_ev("a0", "attempt_started", attempt=0, ts=10.0))
            events.append(_ev("i0", "phase", attempt=0, phase="trainer_init", start=10.0, end=40.0))
            r = Replay()
            r.batch(events, now=40.0)
            t, cursor = 40.0, 0.0
            for k in range(60):
                batch = [
                    _ev(
                        f"p{k}",
                        "progress",
                        attempt=0,
                        start=t,
                        end=t + 30.0,
                        cursor_start=cursor,
                        cursor_end=cursor + 30.0,
                        steps=30,
                    )
                ]
                t, cursor = t + 30.0, cursor + 30.0
                if k % 5 == 4:  # the save blocks 20 s; the next window starts at its start
                    batch.append(
                        _ev(f"c{k}", "checkpoint", attempt=0, start=t, blocking_end=t + 20.0)
                    )
                inc, full = r.batch(batch, now=t + 21.0)
                assert_same(inc, full)
            assert r.full == 1, grain_s
            assert full.wasted["checkpoint_blocking"] == 12 * 20.0
            # A window starting before the save is inside the prefix: recomputed in full.
            early = _ev(
                "late",
                "progress",
                attempt=0,
                start=t - 25.0,
                end=t + 40.0,
                cursor_start=cursor,
                cursor_end=cursor + 10.0,
                steps=10,
            )
            inc, full = r.batch([early], now=t + 41.0)
            assert_same(inc, full)
            assert r.full == 2
