"""What a live state needs to know about a job, kept with its stored result (SPEC 4, "Live state").

Pure and database-free, like the rest of the engine. The live state of an open job
(backend.live.state) is a function of these facts, the learned bounds and "now", so every
replica that reads the stored result answers the same, and no raw event is read again. The
same facts of finished jobs are the samples the bounds are learned from (backend.live.bounds).

All times are epoch seconds; `None` where the job has no such instant.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from operator import sub
from typing import Any

from backend.ett.partition import EFFECTIVE, Piece
from backend.ett.timeline import Timeline, window_fields


def _finite(t: float) -> float | None:
    return t if math.isfinite(t) else None


def loop_facts(tl: Timeline) -> dict[int, dict[str, Any]]:
    """Per attempt: loop start, last cursor advance, high-water cursor, longest advance gap.

    The gap is the longest time between the ends of two consecutive windows whose cursor
    advanced (replay included: the loop moved), the quantity a live check of "no advance for
    longer than the bound" measures. Only gaps closed by a later advance count, so a loop that
    hung and was then killed adds no sample.
    """
    # One pass with locals (the bulk of a job is its windows): per attempt, the loop's start,
    # the high-water cursor and the ends of the advancing windows.
    starts: dict[int, float] = {}
    highs: dict[int, float] = {}
    ends: dict[int, list[float]] = {}
    cur: int | None = None
    lo = hi = 0.0
    put: Any = None
    rows = window_fields(tl.windows, "attempt", "start", "end", "cursor_start", "cursor_end")
    for a, start, end, cs, ce in rows:
        if a != cur:
            if cur is not None:
                starts[cur], highs[cur] = lo, hi
            cur = a
            if a in starts:
                lo, hi = starts[a], highs[a]
            else:
                lo, hi = start, ce
            put = ends.setdefault(a, []).append
        if start < lo:
            lo = start
        if ce > hi:
            hi = ce
        if ce > cs and end > start:
            put(end)
    if cur is not None:
        starts[cur], highs[cur] = lo, hi
    out: dict[int, dict[str, Any]] = {}
    for attempt, start in starts.items():
        xs = ends.get(attempt) or []
        xs.sort()  # nearly always in order already: linear
        gap = max(map(sub, xs[1:], xs[:-1])) if len(xs) > 1 else None
        out[attempt] = {
            "loop_started_at": start,
            "last_advance_at": xs[-1] if xs else None,
            "cursor_high": highs[attempt],
            "max_advance_gap_s": gap,
        }
    return out


def _current(pieces: list[Piece], at: float) -> dict[str, Any] | None:
    """The component (and phase) the partition gives the instant just before `at`, since when."""
    i = len(pieces) - 1
    while i >= 0 and pieces[i][0] >= at:
        i -= 1
    if i < 0:
        if not pieces:
            return None
        i = 0
    _s, _e, attempt, component, phase = pieces[i]
    since = pieces[i][0]
    j = i - 1
    while j >= 0 and pieces[j][3] == component and pieces[j][2] == attempt:
        if pieces[j][1] != since:
            break
        since = pieces[j][0]
        j -= 1
    return {"component": component, "phase": phase, "attempt": attempt, "since": since}


def live_facts(
    tl: Timeline, pieces: list[Piece], *, loops: Mapping[int, Mapping[str, Any]] | None = None
) -> dict[str, Any]:
    """The facts of one job's live state: attempts, open spans, last advance, current piece.

    `loops` are the timeline's loop_facts when the caller keeps them (its windows unread).
    """
    if loops is None:
        loops = loop_facts(tl)
    effective: dict[int | None, list[float]] = {}
    last_effective: float | None = None
    for s, e, attempt, component, _phase in pieces:
        if component != EFFECTIVE:
            continue
        acc = effective.get(attempt)
        if acc is None:
            effective[attempt] = [s, e - s]
        else:
            acc[1] += e - s
        last_effective = e
    restores: dict[int, float] = {}
    for sp in tl.spans:
        if sp.phase == "checkpoint_restore" and sp.start < restores.get(sp.attempt, math.inf):
            restores[sp.attempt] = sp.start
    attempts = []
    for info in tl.attempts:
        loop = loops.get(info.attempt, {})
        eff = effective.get(info.attempt)
        attempts.append(
            {
                "attempt": info.attempt,
                "started_at": info.start,
                "stopped_at": None if info.live else info.end,
                "failed_at": info.failure.ts if info.failure is not None else None,
                # an inferred failure: the attempt stopped sending (silent), it did not say so
                "failure_inferred": info.failure.inferred if info.failure is not None else None,
                "ended_at": info.ended_at,
                "restore_started_at": restores.get(info.attempt),
                "first_span_at": _finite(info.first_span),
                "loop_started_at": loop.get("loop_started_at"),
                "last_advance_at": loop.get("last_advance_at"),
                "cursor_high": loop.get("cursor_high"),
                "max_advance_gap_s": loop.get("max_advance_gap_s"),
                "first_effective_at": eff[0] if eff else None,
                "effective_s": eff[1] if eff else 0.0,
            }
        )
    live = {info.attempt for info in tl.attempts if info.live}
    last_event = min(tl.last_event_at, tl.ended_at)
    return {
        "last_event_at": _finite(tl.last_event_at),
        "last_effective_at": last_effective,
        "attempts": attempts,
        # phase_started spans no phase closed: still open (a live attempt), or cut at their
        # attempt's stop (a hang the failure ended: no sample of the phase's duration).
        "open_spans": [
            [sp.attempt, sp.phase, sp.start]
            for sp in tl.spans
            if sp.unmatched and sp.attempt in live
        ],
        "unended_spans": [
            [sp.attempt, sp.phase, sp.start]
            for sp in tl.spans
            if sp.unmatched and sp.attempt not in live
        ],
        "current": _current(pieces, last_event if math.isfinite(last_event) else tl.ended_at),
    }
