"""SPEC section 4 "Partition": every instant of [submission, end] lands in exactly one component.

Each rule builds one layer of sorted, disjoint pieces; the layers are then overlaid in rule order
(checkpoint blocking over progress over phase spans over the implicit rules), so the result is a
sweep over sorted boundaries and costs O(n log n) in the job's events.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from operator import itemgetter

from backend.ett.catalogue import Resolution, catalogue_rank, resolve_phase
from backend.ett.timeline import (
    AttemptInfo,
    Checkpoint,
    Span,
    Timeline,
    WarningLog,
    Window,
    window_fields,
)

# A piece: (start, end, attempt, component, phase).
Piece = tuple[float, float, int | None, str, str | None]

EFFECTIVE = "effective_training"
WASTED = "wasted_training"
_start_key = itemgetter(0)


@dataclass(slots=True)
class PhaseTime:
    """One phase's union of spans (total) and the time rule 3 or 4 actually gave it (exposed)."""

    total_s: float = 0.0
    exposed_s: float = 0.0


@dataclass(slots=True)
class Partition:
    """The attributed pieces covering [submission, end] and the per-phase times."""

    pieces: list[Piece]
    phases: dict[str, PhaseTime]


def checkpoint_layer(checkpoints: list[Checkpoint]) -> list[Piece]:
    """Rule 1: the union of checkpoints' blocking parts (earlier-starting save keeps overlap)."""
    out: list[Piece] = []
    cur = -math.inf
    for c in sorted(checkpoints, key=lambda c: (c.start, c.event_id)):
        s = c.start if c.start > cur else cur
        if c.end > s:
            out.append((s, c.end, c.attempt, WASTED, "checkpoint_blocking"))
            cur = c.end
    return out


def progress_layer(windows: Sequence[Window], warnings: WarningLog) -> list[Piece]:
    """Rule 2: progress windows split into replay / effective by the cursor high-water mark."""
    out: list[Piece] = []
    prev_end = -math.inf
    hwm = -math.inf
    put = _putter(out)
    rows = window_fields(windows, "start", "end", "cursor_start", "cursor_end", "attempt")
    for s, e, cs, ce, a in rows:
        if s < prev_end:
            # Rare (a resent window, two processes reporting as rank 0): the general sweep.
            return overlapping_progress_layer(windows, warnings)
        prev_end = e
        if ce <= cs:
            if e > s:
                put(s, e, a, WASTED, "stalled")
            if cs > hwm:
                hwm = cs
            continue
        if e > s:
            if hwm >= ce:
                put(s, e, a, WASTED, "replay")
            elif hwm <= cs:
                put(s, e, a, EFFECTIVE, None)
            else:
                cut = s + (hwm - cs) / (ce - cs) * (e - s)
                if cut > s:
                    put(s, cut, a, WASTED, "replay")
                if e > cut:
                    put(cut, e, a, EFFECTIVE, None)
        if ce > hwm:  # a replayed window never lowers the mark
            hwm = ce
    return out


def _putter(out: list[Piece]) -> Callable[[float, float, int, str, str | None], None]:
    def put(s: float, e: float, a: int, comp: str, kind: str | None) -> None:
        # Back-to-back pieces with the same label become one piece: fewer pieces downstream.
        if out:
            last = out[-1]
            if last[1] == s and last[2] == a and last[3] == comp and last[4] == kind:
                out[-1] = (last[0], e, a, comp, kind)
                return
        out.append((s, e, a, comp, kind))

    return put


def _cursor_at(w: Window, t: float) -> float:
    if w.end <= w.start or w.cursor_end <= w.cursor_start:
        return w.cursor_start
    return w.cursor_start + (w.cursor_end - w.cursor_start) * (t - w.start) / (w.end - w.start)


def overlapping_progress_layer(windows: Sequence[Window], warnings: WarningLog) -> list[Piece]:
    """Rule 2 where windows overlap: one window classifies each instant (latest attempt, then
    later start, then smaller event_id); every window raises the high-water mark as it goes."""
    windows = list(windows)
    out: list[Piece] = []
    put = _putter(out)
    live = [w for w in windows if w.end > w.start]
    # Zero-length windows classify nothing but still report a cursor the job reached.
    zero = sorted((w for w in windows if w.end <= w.start), key=lambda w: w.start)
    bounds = sorted({t for w in windows for t in (w.start, w.end)})
    by_start = sorted(live, key=lambda w: w.start)
    zi = 0
    active: list[Window] = []
    overlapped: set[str] = set()
    k = 0
    hwm = -math.inf
    for i in range(len(bounds) - 1):
        a, b = bounds[i], bounds[i + 1]
        while zi < len(zero) and zero[zi].start <= a:
            z = zero[zi]
            hwm = max(hwm, z.cursor_start, z.cursor_end)
            zi += 1
        active = [w for w in active if w.end > a]
        while k < len(by_start) and by_start[k].start <= a:
            active.append(by_start[k])
            k += 1
        if not active:
            continue
        if len(active) > 1:
            overlapped.update(w.event_id for w in active)
        win = min(active, key=lambda w: (-w.attempt, -w.start, w.event_id))
        if win.cursor_end <= win.cursor_start:
            put(a, b, win.attempt, WASTED, "stalled")
        else:
            _classify(put, win, [w for w in active if w is not win], hwm, a, b)
        for w in active:
            c = _cursor_at(w, b)
            if c > hwm:
                hwm = c
    if overlapped:
        warnings.add("overlapping_progress", *overlapped)
    return out


def _classify(
    put: Callable[[float, float, int, str, str | None], None],
    win: Window,
    others: list[Window],
    hwm: float,
    a: float,
    b: float,
) -> None:
    """Effective where the winner's cursor exceeds every cursor reached at an earlier instant.

    Against the mark and stalled windows that means strictly above; against another advancing
    window, at or above its cursor at the same instant (its earlier instants are lower), so a
    resent copy of a window changes nothing.
    """
    c0 = _cursor_at(win, a)
    rate = (win.cursor_end - win.cursor_start) / (win.end - win.start)
    fixed = hwm
    lines: list[tuple[float, float]] = []
    for o in others:
        if o.cursor_end <= o.cursor_start:
            fixed = max(fixed, o.cursor_start)
        else:
            lines.append((_cursor_at(o, a), (o.cursor_end - o.cursor_start) / (o.end - o.start)))
    cuts = [a, b]
    for v0, vr in [*lines, (fixed, 0.0)]:
        if vr != rate and math.isfinite(v0):
            t = a + (v0 - c0) / (rate - vr)
            if a < t < b:
                cuts.append(t)
    cuts.sort()
    for p, q in zip(cuts, cuts[1:], strict=False):
        if q <= p:
            continue
        dt = (p + q) / 2 - a
        mine = c0 + rate * dt
        ahead = mine > fixed and all(
            mine >= v0 + vr * dt - 1e-9 * max(1.0, abs(v0)) for v0, vr in lines
        )
        if ahead:
            put(p, q, win.attempt, EFFECTIVE, None)
        else:
            put(p, q, win.attempt, WASTED, "replay")


def _ancestors(name: str) -> list[str]:
    parts = name.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts))]


def phase_layer(spans: list[Span], resolve: Mapping[str, Resolution]) -> list[Piece]:
    """Rule 3: among active spans, ancestors yield to descendants; the latest end wins."""
    keys: list[tuple[float, float, int, str, str]] = []
    bounds: list[tuple[float, int, int]] = []
    for i, sp in enumerate(spans):
        # min-heap key: latest end, then later start, then catalogue order, then name, then id
        keys.append((-sp.end, -sp.start, catalogue_rank(sp.phase), sp.phase, sp.event_id))
        if sp.end > sp.start:
            bounds.append((sp.start, 1, i))
            bounds.append((sp.end, 0, i))
    if not bounds:
        return []
    bounds.sort()
    ancestors: dict[str, list[str]] = {}
    name_heaps: dict[str, list[tuple[tuple[float, float, int, str, str], int]]] = {}
    descendants: dict[str, int] = {}
    ended = bytearray(len(spans))
    eligible: list[tuple[tuple[float, float, int, str, str], str]] = []

    def top(name: str) -> tuple[tuple[float, float, int, str, str], int] | None:
        heap = name_heaps.get(name)
        while heap and ended[heap[0][1]]:
            heapq.heappop(heap)
        return heap[0] if heap else None

    def offer(name: str) -> None:
        if descendants.get(name, 0) == 0:
            best = top(name)
            if best is not None:
                heapq.heappush(eligible, (best[0], name))

    def winner() -> int | None:
        while eligible:
            key, name = eligible[0]
            best = top(name)
            if best is not None and best[0] == key and descendants.get(name, 0) == 0:
                return best[1]
            heapq.heappop(eligible)
        return None

    out: list[Piece] = []
    n = len(bounds)
    k = 0
    while k < n:
        t = bounds[k][0]
        while k < n and bounds[k][0] == t:
            _, is_start, i = bounds[k]
            k += 1
            name = spans[i].phase
            anc = ancestors.get(name)
            if anc is None:
                anc = ancestors[name] = _ancestors(name)
            if is_start:
                heapq.heappush(name_heaps.setdefault(name, []), (keys[i], i))
                for q in anc:
                    descendants[q] = descendants.get(q, 0) + 1
                offer(name)
            else:
                ended[i] = 1
                for q in anc:
                    descendants[q] -= 1
                    if descendants[q] == 0:
                        offer(q)
                offer(name)
        if k < n:
            w = winner()
            if w is not None:
                sp = spans[w]
                out.append((t, bounds[k][0], sp.attempt, resolve[sp.phase].component, sp.phase))
    return out


def in_place_gap(info: AttemptInfo, i: int) -> str:
    """Rule 4 between attempts: the wait for the next `attempt_started` is scheduling (queue
    time), unless that attempt restarts in place (`in_place`): it got its capacity when the
    previous attempt stopped, since that capacity was never released, so the wait is inside an
    attempt before its first span, which is hardware_setup."""
    return "hardware_setup" if info.in_place and i > 0 else "scheduling"


def implicit_layer(tl: Timeline) -> list[Piece]:
    """Rule 4 (and 5 inside attempts): scheduling, hardware_setup, shutdown; a full cover."""
    out: list[Piece] = []
    cur = tl.submitted_at
    attempts = tl.attempts
    warnings = tl.warnings
    for i, info in enumerate(attempts):
        start = max(info.start, cur)
        end = info.end
        if i + 1 < len(attempts) and end > attempts[i + 1].start:
            warnings.add("overlapping_attempts", info.start_event, attempts[i + 1].start_event)
            end = attempts[i + 1].start
        end = max(end, start)
        if start > cur:
            gap = in_place_gap(info, i)
            out.append((cur, start, info.attempt, gap, gap))
        setup_end = min(max(info.first_span, start), end)
        if setup_end > start:
            out.append((start, setup_end, info.attempt, "hardware_setup", "hardware_setup"))
        if end > setup_end:
            out.append((setup_end, end, info.attempt, "unattributed", None))
        cur = max(cur, end)
    if tl.ended_at > cur:
        if not attempts:
            out.append((cur, tl.ended_at, None, "scheduling", "scheduling"))
        else:
            # After the last attempt stopped: shutdown once the job ended; while it is open the
            # job may be queued again, so the time is scheduling.
            last = attempts[-1]
            comp = "scheduling" if tl.provisional else "shutdown"
            out.append((cur, tl.ended_at, last.attempt, comp, comp))
    return out


def piece_gpus(tl: Timeline, pieces: list[Piece]) -> list[int]:
    """The GPUs each piece's seconds are charged at: inside an attempt (from its start to its
    stop, and an in-place restart's wait, whose capacity it holds) that attempt's
    `attempt_started.gpus`, else the job's; outside every attempt (queued before the first,
    between attempts, after the last) the job's requested count (`job_submitted.gpus`)."""
    job = tl.gpus
    spans = {
        info.attempt: (info.start, info.end, info.gpus or job, info.in_place and i > 0)
        for i, info in enumerate(tl.attempts)
    }
    out: list[int] = []
    for s, e, a, _comp, _phase in pieces:
        span = spans.get(a) if a is not None else None
        if span is None:
            out.append(job)
            continue
        start, stop, gpus, in_place = span
        inside = s >= start and e <= max(stop, start)
        out.append(gpus if inside or (in_place and e <= start) else job)
    return out


def clip(pieces: list[Piece], lo: float, hi: float) -> list[Piece]:
    """Pieces cut to [lo, hi]; empty ones dropped."""
    out: list[Piece] = []
    for p in pieces:
        s, e = p[0], p[1]
        if s >= lo and e <= hi:
            out.append(p)
            continue
        s = max(s, lo)
        e = min(e, hi)
        if e > s:
            out.append((s, e, p[2], p[3], p[4]))
    return out


def subtract(lower: list[Piece], upper: list[Piece]) -> list[Piece]:
    """The parts of `lower` not covered by `upper` (both sorted and disjoint)."""
    if not upper:
        return lower
    out: list[Piece] = []
    i = 0
    n = len(upper)
    for p in lower:
        s, e = p[0], p[1]
        while i < n and upper[i][1] <= s:
            i += 1
        k = i
        cur = s
        while k < n and upper[k][0] < e:
            us, ue = upper[k][0], upper[k][1]
            if us > cur:
                out.append((cur, us, p[2], p[3], p[4]))
            if ue > cur:
                cur = ue
            k += 1
        if cur < e:
            out.append(p if cur == s else (cur, e, p[2], p[3], p[4]))
    return out


def merge_adjacent(pieces: list[Piece]) -> list[Piece]:
    """Join touching pieces with the same (attempt, component, phase)."""
    out: list[Piece] = []
    for p in pieces:
        if out:
            q = out[-1]
            if q[1] == p[0] and q[2] == p[2] and q[3] == p[3] and q[4] == p[4]:
                out[-1] = (q[0], p[1], q[2], q[3], q[4])
                continue
        out.append(p)
    return out


def _union_length(intervals: list[tuple[float, float]]) -> float:
    total = 0.0
    cur_s = cur_e = -math.inf
    for s, e in sorted(intervals):
        if s > cur_e:
            total += cur_e - cur_s if cur_e > cur_s else 0.0
            cur_s, cur_e = s, e
        elif e > cur_e:
            cur_e = e
    if cur_e > cur_s:
        total += cur_e - cur_s
    return total


def partition(tl: Timeline, custom_phases: Mapping[str, str] | None = None) -> Partition:
    """Apply rules 1-5 in order and return the attributed pieces and per-phase times."""
    lo, hi = tl.submitted_at, tl.ended_at
    resolve: dict[str, Resolution] = {}
    for sp in tl.spans:
        if sp.phase not in resolve:
            resolve[sp.phase] = resolve_phase(sp.phase, custom_phases)
        if not resolve[sp.phase].known:
            tl.warnings.add("unknown_phase", sp.event_id)

    acc = clip(checkpoint_layer(tl.checkpoints), lo, hi)
    for layer in (
        clip(progress_layer(tl.windows, tl.warnings), lo, hi),
        clip(phase_layer(tl.spans, resolve), lo, hi),
    ):
        extra = subtract(layer, acc)
        if extra:
            acc = sorted(acc + extra, key=_start_key) if acc else extra
    implicit = subtract(clip(implicit_layer(tl), lo, hi), acc)
    pieces = merge_adjacent(sorted(acc + implicit, key=_start_key))

    phases: dict[str, PhaseTime] = {}
    by_name: dict[str, list[tuple[float, float]]] = {}
    for sp in tl.spans:
        s, e = max(sp.start, lo), min(sp.end, hi)
        by_name.setdefault(sp.phase, []).append((s, e) if e > s else (s, s))
    for name, ivs in by_name.items():
        phases[name] = PhaseTime(total_s=_union_length(ivs))
    for s, e, _a, _comp, phase in implicit:
        if phase is not None:
            pt = phases.setdefault(phase, PhaseTime())
            pt.total_s += e - s
    for s, e, _a, comp, phase in pieces:
        if phase is not None and comp != EFFECTIVE and comp != WASTED:
            phases.setdefault(phase, PhaseTime()).exposed_s += e - s
    return Partition(pieces=pieces, phases=phases)
