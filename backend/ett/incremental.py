"""Incremental accounting of an open job: its settled prefix kept as state, extended per batch.

Pure and database-free. After a full compute (backend.ett.engine.compute_parts), `settle` keeps
what the accounting before the job's settled point S is, when the job is of the shape whose
accounting after S is known: an open job whose last attempt is live, with no open span in it,
no overlapping progress windows and no event after "now". docs/ACCOUNTING.md "Incremental
accounting" names S and proves that no event at or after S changes the accounting before it.

`extend` then accounts a batch of new events with that state alone, in time linear in the
batch and the job's pieces (never its events). It accepts only the batch it can account
exactly: progress windows, checkpoint saves and heartbeats of the live attempt, at or after S, clean (the
engine's fast path, no warning), each window after the last one. Anything else (a late event
inside the prefix, another type, an event that ends the attempt or the job, a silent or
abandoned job) raises NeedsFull, and the caller recomputes the job from all its raw events,
which stays the ground truth. The answer equals the full compute's, every field, to the bit:
the same engine functions (progress_layer, account) run on the same pieces and timeline
facts (tests/backend/ett/test_incremental.py).
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from typing import Any

import orjson

from backend.ett.catalogue import COMPONENTS, WASTE_KINDS
from backend.ett.engine import Interval, JobETT, account, job_answer
from backend.ett.level1 import FailureL1, Level1, level1, split_final_shutdown
from backend.ett.livefacts import live_facts, loop_facts
from backend.ett.partition import (
    EFFECTIVE,
    WASTED,
    Partition,
    PhaseTime,
    Piece,
    checkpoint_layer,
    clip,
    merge_adjacent,
    piece_gpus,
    progress_layer,
    subtract,
)
from backend.ett.timeline import (
    MAX_TIME,
    AttemptInfo,
    Checkpoint,
    Failure,
    Span,
    Timeline,
    WarningLog,
    Window,
    window_fields,
)

# Bumped whenever the engine or this state changes meaning: older states are then recomputed.
STATE_VERSION = 1

UNATTRIBUTED = "unattributed"
BLOCKING = "checkpoint_blocking"

# Pieces are folded into sums whole days at a time: those ending by 00:00 UTC of the day of the
# last final effective piece. The pieces kept are then at most about a day's, and an
# extension's fleet rollup (which rewrites the job's days from the one its intervals changed
# in) finds every interval of those days among them.
FOLD_GRAIN_S = 86_400.0


class NeedsFull(Exception):
    """The batch cannot be accounted from the settled state: recompute the job in full."""


class FrozenWarnings(WarningLog):
    """The warnings of a stored state: its list as it was (a clean batch adds none)."""

    def __init__(self, items: list[dict[str, Any]]) -> None:
        super().__init__()
        self._items = items

    def to_list(self) -> list[dict[str, Any]]:
        """The stored warnings, unchanged."""
        return [dict(w, event_ids=list(w["event_ids"])) for w in self._items]


def rules_key(
    *,
    heartbeat_timeout_s: float,
    abandon_timeout_s: float,
    custom_phases: Mapping[str, str] | None,
) -> str:
    """What an answer depends on besides the events: a state made under other rules is void."""
    mapping = orjson.dumps(dict(custom_phases or {}), option=orjson.OPT_SORT_KEYS)
    digest = hashlib.sha256(
        b"%r|%r|%s" % (float(heartbeat_timeout_s), float(abandon_timeout_s), mapping)
    ).hexdigest()
    return f"v{STATE_VERSION}:{digest[:40]}"


def _enc(x: float | None) -> Any:
    if x is None or math.isfinite(x):
        return x
    return "inf" if x > 0 else "-inf"


def _dec(x: Any) -> Any:
    return float(x) if type(x) is str else x


_ATTEMPT_FLOATS = frozenset(
    f.name
    for f in fields(AttemptInfo)
    if f.name
    in ("start", "ended_at", "first_span", "last_event", "earliest_event", "busy_end", "end")
)


def _failure_doc(f: Failure) -> dict[str, Any]:
    return {
        "ts": f.ts,
        "kind": f.kind,
        "attempt": f.attempt,
        "inferred": f.inferred,
        "event_id": f.event_id,
        "message": f.message,
    }


def _attempt_doc(info: AttemptInfo) -> dict[str, Any]:
    doc: dict[str, Any] = {}
    for f in fields(AttemptInfo):
        v = getattr(info, f.name)
        if f.name == "failure":
            doc[f.name] = None if v is None else _failure_doc(v)
        elif f.name in _ATTEMPT_FLOATS:
            doc[f.name] = _enc(v)
        else:
            doc[f.name] = v
    return doc


def _attempt(doc: Mapping[str, Any]) -> AttemptInfo:
    kw = {k: (_dec(v) if k in _ATTEMPT_FLOATS else v) for k, v in doc.items()}
    failure = kw.pop("failure")
    return AttemptInfo(**kw, failure=None if failure is None else Failure(**failure))


@dataclass(slots=True)
class AccountState:
    """An open job's accounting up to its settled point, and what extending it needs."""

    job_id: str
    model: str | None
    gpus: int
    labels: dict[str, Any]
    config: dict[str, Any]
    submitted_at: float
    # The settled point S: the accounting of [submission, S) is final (docs/ACCOUNTING.md).
    settled_at: float
    # The live (last) attempt's number.
    attempt: int
    # The progress layer's high-water mark after every window (None: no window yet), the end
    # of the last window in the engine's order and the latest window start.
    hwm: float | None
    last_window_end: float | None
    last_window_start: float | None
    # max(latest instant any event speaks about, submission): the timeline's last_event_at.
    last_event_at: float
    events: int
    attempts: list[dict[str, Any]]
    spans: list[list[Any]]
    failures: list[dict[str, Any]]
    warnings: list[dict[str, Any]]
    phases: dict[str, list[float]]
    loops: dict[int, dict[str, Any]]
    # The pieces of [submission, S), the last one cut at S.
    pieces: list[Piece] = field(default_factory=list)
    # The accounting of the pieces folded away (before `pieces`), as running sums in the order
    # the engine adds them (None: `pieces` starts at submission). See _fold.
    fold: dict[str, Any] | None = None
    # The store's bookkeeping of the raw rows read (backend.results.recompute), carried along
    # unchanged: the engine never reads it.
    marks: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> str:
        """The state as JSON text (exact floats: orjson writes the shortest round-trip form)."""
        doc = {f.name: getattr(self, f.name) for f in fields(AccountState)}
        doc["loops"] = {str(k): v for k, v in self.loops.items()}
        return orjson.dumps(doc).decode()

    @classmethod
    def from_json(cls, text: str) -> AccountState:
        """The state back from to_json's text."""
        doc = orjson.loads(text)
        doc["loops"] = {int(k): v for k, v in doc["loops"].items()}
        doc["pieces"] = [tuple(p) for p in doc["pieces"]]
        return cls(**doc)


def _rows(windows: Sequence[Window]) -> Iterable[tuple[float, float, float, float]]:
    """(start, end, cursor_start, cursor_end) of each window."""
    return window_fields(windows, "start", "end", "cursor_start", "cursor_end")


def _no_overlap(windows: Sequence[Window]) -> bool:
    prev_end = -math.inf
    for start, end, _cs, _ce in _rows(windows):
        if start < prev_end:
            return False
        prev_end = end
    return True


def _hwm(windows: Sequence[Window]) -> float | None:
    # progress_layer's mark after every window: a stalled one raises it to its cursor_start.
    hwm = -math.inf
    for _s, _e, cs, ce in _rows(windows):
        c = cs if ce <= cs else ce
        if c > hwm:
            hwm = c
    return hwm if hwm > -math.inf else None


def settled_point(tl: Timeline) -> float:
    """S: the latest instant any span, window, checkpoint, attempt start or stop speaks about."""
    s = tl.submitted_at
    for _start, end, _cs, _ce in _rows(tl.windows):
        if end > s:
            s = end
    for group in (tl.spans, tl.checkpoints):
        for item in group:
            if item.end > s:
                s = item.end
    for info in tl.attempts:
        s = max(s, info.start, info.first_span if math.isfinite(info.first_span) else s)
        if not info.live:
            s = max(s, info.end)
    for f in tl.failures:
        s = max(s, f.ts)
    return s


def settle(tl: Timeline, part: Partition) -> AccountState | None:
    """The state of a fully computed open job, or None when its shape is not extendable."""
    if not tl.provisional or tl.abandoned or not tl.attempts or tl.job_id is None:
        return None
    last = tl.attempts[-1]
    if not last.live or any(info.live for info in tl.attempts[:-1]):
        return None
    if not math.isfinite(last.first_span) or last.start_event is None:
        return None
    if any(sp.unmatched and sp.attempt == last.attempt for sp in tl.spans):
        return None
    warnings = tl.warnings.to_list()
    # An event after "now" moved the job's end to it: "now" no longer decides the end.
    if any(w["code"] == "after_now" for w in warnings) or not _no_overlap(tl.windows):
        return None
    s = settled_point(tl)
    if s > tl.ended_at:
        return None
    # What the proof says the accounting after S is, checked: the live attempt's unattributed
    # time, up to the job's end ("now").
    tail = [p for p in part.pieces if p[1] > s]
    if tail and (
        len(tail) != 1
        or tail[0][1] != tl.ended_at
        or tail[0][2] != last.attempt
        or tail[0][3] != UNATTRIBUTED
        or tail[0][4] is not None
    ):
        return None
    fold, pieces = _fold(None, tl, clip(part.pieces, tl.submitted_at, s), s)
    return AccountState(
        job_id=tl.job_id,
        model=tl.model,
        gpus=tl.gpus,
        labels=tl.labels,
        config=tl.config,
        submitted_at=tl.submitted_at,
        settled_at=s,
        attempt=last.attempt,
        hwm=_hwm(tl.windows),
        last_window_end=tl.windows[-1].end if tl.windows else None,
        last_window_start=max((row[0] for row in _rows(tl.windows)), default=None),
        last_event_at=tl.last_event_at,
        events=tl.events,
        attempts=[_attempt_doc(info) for info in tl.attempts],
        spans=[
            [sp.start, sp.end, sp.attempt, sp.phase, sp.event_id, sp.span_id, sp.unmatched]
            for sp in tl.spans
        ],
        failures=[_failure_doc(f) for f in tl.failures],
        warnings=warnings,
        phases={name: [pt.total_s, pt.exposed_s] for name, pt in part.phases.items()},
        loops=loop_facts(tl),
        pieces=pieces,
        fold=fold,
    )


def _fold_point(tl: Timeline, pieces: Sequence[Piece]) -> int:
    """How many leading pieces may be folded into sums: 0 unless the accounting of each is
    final (docs/ACCOUNTING.md "Folding the settled prefix").

    K is the last effective piece before the last one (which an extension may still grow).
    Every failure lies before K's end, so each failure's recovery, the TTS and the TTR
    windows are decided by pieces up to K; every folded piece ends before K, so none of it is
    final shutdown; the live state's current piece is found from K on. The pieces folded end
    by 00:00 UTC of the day K starts in.
    """
    k = next((i for i in range(len(pieces) - 2, -1, -1) if pieces[i][3] == EFFECTIVE), None)
    if k is None:
        return 0
    pk = pieces[k]
    if k > 0:
        q = pieces[k - 1]
        if q[3] == EFFECTIVE and q[2] == pk[2] and q[1] == pk[0]:
            return 0
    if not (tl.last_event_at > pk[0] and tl.ended_at > pk[0]):
        return 0
    if any(max(f.ts, tl.submitted_at) >= pk[1] for f in tl.failures):
        return 0
    horizon = math.floor(pk[0] / FOLD_GRAIN_S) * FOLD_GRAIN_S
    n = 0
    while n < k and pieces[n][1] <= horizon:
        n += 1
    return n


def _first_fold(tl: Timeline, pieces: list[Piece], settled_at: float) -> dict[str, Any]:
    """The fold's fixed Level-1 facts (from every piece since submission) and zero sums."""
    l1 = level1(pieces, tl.failures, tl.submitted_at, settled_at)
    first_eff = next(p[0] for p in pieces if p[3] == EFFECTIVE)
    first_fail = l1.failures[0].ts if l1.failures else None
    tts_end = min(x for x in (first_eff, first_fail, settled_at) if x is not None)
    windows = [[tl.submitted_at, tts_end, None, "tts", None]]
    windows += [
        [f.ts, f.recovered_at, None, "ttr", None] for f in l1.failures if f.recovered_at > f.ts
    ]
    return {
        "tts": [l1.tts_s, l1.tts_interrupted, l1.tts_censored],
        "failures": [_failure_l1_doc(f) for f in l1.failures],
        "windows": windows,
        "components": dict.fromkeys(COMPONENTS, 0.0),
        "wasted": dict.fromkeys(WASTE_KINDS, 0.0),
        "effective_s": 0.0,
        "waste_s": 0.0,
        "shutdown_s": 0.0,
        "e2e_gpu_s": 0.0,
        "effective_gpu_s": 0.0,
        "attempt_effective": [],
    }


def _failure_l1_doc(f: FailureL1) -> dict[str, Any]:
    doc = {x.name: getattr(f, x.name) for x in fields(FailureL1)}
    doc["cascade"] = [dict(c) for c in f.cascade]
    return doc


def _fold(
    fold: dict[str, Any] | None, tl: Timeline, pieces: list[Piece], settled_at: float
) -> tuple[dict[str, Any] | None, list[Piece]]:
    """Fold what _fold_point allows of `pieces` into the sums: (the fold, the pieces kept)."""
    n = _fold_point(tl, pieces)
    if n == 0:
        return fold, pieces
    out = _first_fold(tl, pieces, settled_at) if fold is None else _copy_fold(fold)
    head = pieces[:n]
    _add_pieces(out, head, piece_gpus(tl, head))
    last_effective = next(p[1] for p in pieces[n:] if p[3] == EFFECTIVE)
    waste, shutdown = out["waste_s"], out["shutdown_s"]
    for q in subtract([p for p in head if p[3] != EFFECTIVE], out["windows"]):
        w, sh = split_final_shutdown(q, last_effective)
        waste += w
        shutdown += sh
    out["waste_s"], out["shutdown_s"] = waste, shutdown
    return out, pieces[n:]


def _copy_fold(fold: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(fold)
    out["components"] = dict(fold["components"])
    out["wasted"] = dict(fold["wasted"])
    out["attempt_effective"] = [list(x) for x in fold["attempt_effective"]]
    return out


def _add_pieces(fold: dict[str, Any], pieces: Sequence[Piece], gpus: Sequence[int]) -> None:
    """Add pieces to the fold's running sums, in the order the engine adds them."""
    components, wasted = fold["components"], fold["wasted"]
    eff_s, e2e_gpu, eff_gpu = fold["effective_s"], fold["e2e_gpu_s"], fold["effective_gpu_s"]
    per_attempt = {x[0]: x for x in fold["attempt_effective"]}
    for (s, e, attempt, component, phase), g in zip(pieces, gpus, strict=True):
        components[component] += e - s
        gpu_s = (e - s) * g
        e2e_gpu += gpu_s
        if component == EFFECTIVE:
            eff_s += e - s
            eff_gpu += gpu_s
            acc = per_attempt.get(attempt)
            if acc is None:
                acc = per_attempt[attempt] = [attempt, s, e - s]
                fold["attempt_effective"].append(acc)
            else:
                acc[2] += e - s
        elif component == WASTED and phase is not None:
            wasted[phase] += e - s
    fold["effective_s"], fold["e2e_gpu_s"], fold["effective_gpu_s"] = eff_s, e2e_gpu, eff_gpu


def _account_folded(
    tl: Timeline,
    pieces: list[Piece],
    phases: dict[str, PhaseTime],
    loops: Mapping[int, Mapping[str, Any]],
    fold: Mapping[str, Any],
) -> JobETT:
    """engine.account over the folded pieces (as the fold's sums) and `pieces`, the rest.

    The same sums in the same order, so the same floats; the answer's intervals are those of
    `pieces` only (the folded ones are stored already and never change).
    """
    gpus = piece_gpus(tl, pieces)
    acc = _copy_fold(fold)
    _add_pieces(acc, pieces, gpus)
    last_effective = next(p[1] for p in reversed(pieces) if p[3] == EFFECTIVE)
    tts_s, tts_interrupted, tts_censored = fold["tts"]
    l1 = Level1(
        effective_s=acc["effective_s"],
        tts_s=tts_s,
        tts_interrupted=tts_interrupted,
        tts_censored=tts_censored,
        failures=[
            FailureL1(**{**f, "cascade": [dict(c) for c in f["cascade"]]}) for f in fold["failures"]
        ],
        in_loop_waste_s=fold["waste_s"],
        final_shutdown_s=fold["shutdown_s"],
    )
    for q in subtract([p for p in pieces if p[3] != EFFECTIVE], fold["windows"]):
        w, sh = split_final_shutdown(q, last_effective)
        l1.in_loop_waste_s += w
        l1.final_shutdown_s += sh
    live = live_facts(tl, pieces, loops=loops)
    per_attempt = {x[0]: x for x in acc["attempt_effective"]}
    for entry in live["attempts"]:
        eff = per_attempt.get(entry["attempt"])
        entry["first_effective_at"] = eff[1] if eff else None
        entry["effective_s"] = eff[2] if eff else 0.0
    intervals = [Interval(*p, g) for p, g in zip(pieces, gpus, strict=True)]
    return job_answer(
        tl,
        components=acc["components"],
        wasted=acc["wasted"],
        l1=l1,
        phases=phases,
        intervals=intervals,
        live=live,
        e2e_gpu_s=acc["e2e_gpu_s"],
        effective_gpu_s=acc["effective_gpu_s"],
    )


def _window(ev: Mapping[str, Any], eid: str, attempt: int) -> Window:
    """A clean progress window (the engine's fast path: no warning), else NeedsFull."""
    t = ev.get("start")
    end = ev.get("end")
    cs = ev.get("cursor_start")
    ce = ev.get("cursor_end")
    if not (
        type(t) is float
        and type(end) is float
        and type(cs) is float
        and type(ce) is float
        and 0.0 <= t <= end <= MAX_TIME
        and -math.inf < cs <= ce < math.inf
    ):
        raise NeedsFull(f"progress {eid!r} is not a clean window")
    return Window(t, end, attempt, cs, ce, eid)


def _extend_loop(loop: Mapping[str, Any] | None, windows: list[Window]) -> dict[str, Any]:
    """livefacts.loop_facts of one attempt, from its old facts and its newer windows."""
    if loop is None:
        out: dict[str, Any] = {
            "loop_started_at": windows[0].start,
            "last_advance_at": None,
            "cursor_high": windows[0].cursor_end,
            "max_advance_gap_s": None,
        }
    else:
        out = dict(loop)
    lo, hi = out["loop_started_at"], out["cursor_high"]
    ends: list[float] = []
    for w in windows:
        if w.start < lo:
            lo = w.start
        if w.cursor_end > hi:
            hi = w.cursor_end
        if w.cursor_end > w.cursor_start and w.end > w.start:
            ends.append(w.end)
    ends.sort()
    gap = out["max_advance_gap_s"]
    prev = out["last_advance_at"]
    for e in ends:
        if prev is not None:
            d = e - prev
            gap = d if gap is None or d > gap else gap
        prev = e
    out.update(loop_started_at=lo, cursor_high=hi, last_advance_at=prev, max_advance_gap_s=gap)
    return out


def extend(
    state: AccountState,
    events: Sequence[Any],
    *,
    now: float,
    heartbeat_timeout_s: float,
    abandon_timeout_s: float,
) -> tuple[JobETT, AccountState]:
    """The job's answer at `now` with these new events (ids new to the job), and the next state.

    Raises NeedsFull when the batch is not one the state can account exactly.
    """
    a = state.attempt
    s = state.settled_at
    # A window may start before S inside the last save's blocking time, which ends at S (an
    # agent whose window runs from the save's start): rule 1 keeps that time blocking.
    last = state.pieces[-1] if state.pieces else None
    blocked_from = (
        last[0]
        if last is not None and last[1] == s and last[3] == WASTED and last[4] == BLOCKING
        else s
    )
    windows: list[Window] = []
    saves: list[Checkpoint] = []
    latest = state.last_event_at
    ids: set[str] = set()
    for ev in events:
        if type(ev) is not dict:
            raise NeedsFull("an event that is not an object")
        eid = ev.get("event_id")
        etype = ev.get("type")
        if type(eid) is not str or eid in ids:
            raise NeedsFull("an event without a new event_id")
        ids.add(eid)
        if ev.get("attempt") != a or type(ev.get("attempt")) is not int:
            raise NeedsFull(f"{etype} {eid!r} is not of the live attempt {a}")
        if etype == "progress":
            w = _window(ev, eid, a)
            if w.start < blocked_from or (
                state.last_window_start is not None and w.start <= state.last_window_start
            ):
                raise NeedsFull(f"progress {eid!r} lands inside the settled prefix")
            windows.append(w)
            end = w.end
        elif etype == "checkpoint":
            t, end = ev.get("start"), ev.get("blocking_end")
            if not (type(t) is float and type(end) is float and 0.0 <= t <= end <= MAX_TIME):
                raise NeedsFull(f"checkpoint {eid!r} is not a clean save")
            if t < s:
                raise NeedsFull(f"checkpoint {eid!r} lands inside the settled prefix")
            saves.append(Checkpoint(t, end, a, eid))
        elif etype == "heartbeat":
            if ev.get("host") is not None:  # names a host of the attempt: its hosts change
                raise NeedsFull(f"heartbeat {eid!r} names a host")
            end = ev.get("ts")
            if type(end) is not float or not s <= end <= MAX_TIME:
                raise NeedsFull(f"heartbeat {eid!r} lands inside the settled prefix")
        else:
            raise NeedsFull(f"a {etype} event")
        if end > latest:
            latest = end

    windows.sort(key=lambda w: (w.start, w.event_id))  # the engine's order: (time, rank, id)
    prev_end = state.last_window_end if state.last_window_end is not None else -math.inf
    for w in windows:
        if w.start < prev_end:
            raise NeedsFull("overlapping progress windows")
        prev_end = w.end

    job_end = max(float(now), state.submitted_at)
    if latest > job_end:
        raise NeedsFull("an event after now")
    if float(now) - latest > abandon_timeout_s:
        raise NeedsFull("abandoned")
    attempts = [_attempt(doc) for doc in state.attempts]
    live = attempts[-1]
    for w in windows:
        if w.end > live.last_event:
            live.last_event = w.end
    for c in saves:
        if c.end > live.last_event:
            live.last_event = c.end
    for ev in events:
        if ev["type"] == "heartbeat" and ev["ts"] > live.last_event:
            live.last_event = ev["ts"]
    if float(now) - max(live.last_event, live.start) > heartbeat_timeout_s:
        raise NeedsFull("the live attempt went silent")
    live.end = max(job_end, live.start)

    # The progress layer after S, from the mark reached before it (a zero-length seed window).
    at = min(s, windows[0].start) if windows else s
    seed = [] if state.hwm is None else [Window(at, at, a, state.hwm, state.hwm, "")]
    layer = progress_layer(seed + windows, WarningLog())
    if at < s:  # [at, S) is the old save's blocking time
        layer = clip(layer, s, MAX_TIME)
    # Rule 1 over rule 2, as partition() overlays them (old saves all end by S).
    blocking = checkpoint_layer(saves)
    if blocking:
        layer = sorted(blocking + subtract(layer, blocking), key=lambda p: p[0])
    tail: list[Piece] = []
    cur = s
    for p in layer:
        if p[0] > cur:
            tail.append((cur, p[0], a, UNATTRIBUTED, None))
        tail.append(p)
        cur = p[1]
    if job_end > cur:
        tail.append((cur, job_end, a, UNATTRIBUTED, None))
    prefix = state.pieces
    junction = merge_adjacent(prefix[-1:] + tail)
    pieces = prefix[:-1] + junction

    spans = [
        Span(st, en, at, ph, eid, sid, unmatched)
        for st, en, at, ph, eid, sid, unmatched in state.spans
    ]
    tl = Timeline(
        job_id=state.job_id,
        submitted_at=state.submitted_at,
        ended_at=job_end,
        provisional=True,
        status="running",
        model=state.model,
        gpus=state.gpus,
        labels=dict(state.labels),
        config=dict(state.config),
        attempts=attempts,
        spans=spans,
        windows=[],
        checkpoints=[],
        failures=[Failure(**f) for f in state.failures],
        warnings=FrozenWarnings(state.warnings),
        abandoned=False,
        last_event_at=latest,
        events=state.events + len(ids),
    )
    loops = dict(state.loops)
    if windows:
        loops[a] = _extend_loop(loops.get(a), windows)
    phases = {name: PhaseTime(total, exposed) for name, (total, exposed) in state.phases.items()}
    if state.fold is None:
        result = account(tl, pieces, phases, loops=loops)
    else:
        result = _account_folded(tl, pieces, phases, loops, state.fold)

    new_s = max([s] + [w.end for w in windows[-1:]] + [c.end for c in saves])
    if windows:
        hwm = state.hwm
        for w in windows:
            c = w.cursor_start if w.cursor_end <= w.cursor_start else w.cursor_end
            if hwm is None or c > hwm:
                hwm = c
    else:
        hwm = state.hwm
    docs = list(state.attempts)
    docs[-1] = _attempt_doc(live)
    # The pieces before the old S are final: only the junction is cut at the new S.
    fold, kept = _fold(
        state.fold, tl, prefix[:-1] + clip(junction, state.submitted_at, new_s), new_s
    )
    nxt = replace(
        state,
        settled_at=new_s,
        attempt=a,
        hwm=hwm,
        last_window_end=windows[-1].end if windows else state.last_window_end,
        last_window_start=windows[-1].start if windows else state.last_window_start,
        last_event_at=latest,
        events=tl.events,
        attempts=docs,
        loops=loops,
        pieces=kept,
        fold=fold,
    )
    return result, nxt
