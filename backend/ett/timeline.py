"""Turn one job's raw events into a repaired, ordered timeline (the engine's input).

Every repair is a documented rule (see WARNING_RULES) and is reported with the ids of the
events it touched. Nothing here raises on bad data: a malformed event is repaired or set aside.
The result depends only on the set of events, never on their arrival order or duplicates.
"""

from __future__ import annotations

import bisect
import json
import math
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import repeat
from operator import attrgetter
from typing import Any, overload

import numpy as np

from backend.ett.catalogue import (
    CAUSES,
    FAILURE_DOMAINS,
    FAILURE_KINDS,
    JOB_ENDS,
    MAX_HOSTS,
    JobEnd,
    failure_cause,
)
from backend.liveness import ABANDON_TIMEOUT_S, HEARTBEAT_TIMEOUT_S

# Rank of each type among events at the same instant (part of the total sort key).
TYPE_RANK: dict[str, int] = {
    "job_submitted": 0,
    "attempt_started": 1,
    "phase_started": 2,
    "phase": 3,
    "progress": 4,
    "checkpoint": 5,
    "heartbeat": 6,
    "failure": 7,
    "attempt_ended": 8,
    "job_ended": 9,
}
_TIME_FIELD: dict[str, str] = {
    "job_submitted": "ts",
    "attempt_started": "ts",
    "phase_started": "start",
    "phase": "start",
    "progress": "start",
    "checkpoint": "start",
    "heartbeat": "ts",
    "failure": "ts",
    "attempt_ended": "ts",
    "job_ended": "ts",
}
_FAILURE_KINDS = frozenset(FAILURE_KINDS)
_ENDED_FAILURE_KIND = {"failure": "app_error", "preempted": "preemption"}
# An allocation-scoped end (a scheduler's) ends the latest in-place restart started before it,
# within this slack: schedulers record times in whole seconds, truncated.
ALLOCATION_SLACK_S = 1.0
# Failures of one attempt this close to its earliest are taken as simultaneous (clock skew
# between hosts): among them one that names its cause initiates (docs/ACCOUNTING.md).
SKEW_TOLERANCE_S = 2.0
# A phase_started without a span_id match is closed by the `phase` of the same attempt and name
# whose start is nearest, within this many seconds.
MATCH_TOLERANCE_S = 1.0

# Epoch seconds beyond this (year 5138) or below 0 are not times: floats lose the millisecond there.
MAX_TIME = 1e11

# A warning names at most this many event ids (its `count` says how many it touched).
MAX_WARNING_IDS = 1000

WARNING_RULES: dict[str, str] = {
    "invalid_event": "event set aside: a required field is missing or has the wrong type",
    "unknown_type": "event set aside: unknown event type",
    "time_out_of_range": "event set aside: its time is negative or beyond 1e11 epoch seconds",
    "conflicting_duplicate": "several copies of one (job_id, event_id) with different contents: the one with the smallest canonical JSON was kept",
    "no_job_submitted": "no job_submitted event: submission taken as the earliest event time",
    "multiple_job_submitted": "several job_submitted events: the earliest was kept",
    "multiple_job_ended": "several job_ended events: the latest was kept",
    "job_ended_before_submitted": "job_ended precedes job_submitted: the job's end was moved to its submission",
    "before_submission": "event times before job_submitted were clipped to the submission",
    "after_job_end": "event times after job_ended were clipped to the job's end",
    "after_now": "event times after 'now' on an open job: the job's end was moved to the latest event",
    "end_before_start": "span set aside: its end precedes its start",
    "cursor_backwards": "progress window whose cursor goes backwards: treated as not advancing (stalled)",
    "overlapping_progress": "progress windows overlap in time: one window classifies each instant (latest attempt, then later start, then smaller event_id); every window raises the high-water mark",
    "progress_after_next_attempt": "progress or checkpoint reported past the next attempt's start (a leftover process): cut off at that start",
    "failure_after_attempt_end": "failure stamped after its attempt's attempt_ended (a scheduler's report at the process exit): moved to the attempt's end",
    "failure_before_progress": "failure stamped before its attempt's last progress window or checkpoint ended (clock skew): moved to that end",
    "inferred_failure_job_failed": "job_ended says the job failed (failed, preempted, timeout, node_failure, out_of_memory) but its last attempt reported no failure: a failure of that status's kind was placed at that attempt's last event",
    "abandoned": "open job silent longer than the abandon timeout: it ends at its last event",
    "missing_attempt_started": "attempt without attempt_started: its start taken as its earliest event",
    "multiple_attempt_started": "several attempt_started events for one attempt: the earliest was kept",
    "multiple_attempt_ended": "several attempt_ended events for one attempt: the earliest was kept",
    "attempt_ended_before_start": "attempt_ended precedes the attempt's start: the attempt ends at its start",
    "attempts_out_of_order": "attempt numbers are not in time order: attempts were ordered by start time",
    "overlapping_attempts": "an attempt runs past the start of the next one: it was cut at the next attempt's start",
    "phase_never_ended": "phase_started without a matching phase: the span was closed at its attempt's end",
    "unknown_failure_kind": "failure with an unknown kind: counted as kind 'unknown'",
    "unknown_phase": "phase not in the catalogue nor mapped by configuration: counted as unattributed under its own name",
    "cursor_missing": "progress window without numeric cursors: treated as not advancing (stalled)",
}


class WarningLog:
    """Data-quality warnings, one per rule, each with the sorted ids of the events it touched."""

    def __init__(self) -> None:
        self._ids: dict[str, set[str]] = {}

    def add(self, code: str, *event_ids: str | None) -> None:
        """Record that rule `code` was applied to these events."""
        bucket = self._ids.setdefault(code, set())
        for eid in event_ids:
            if eid is not None:
                bucket.add(eid)

    def to_list(self) -> list[dict[str, Any]]:
        """Warnings as {code, message, count, event_ids}, in code order (at most 1,000 ids each)."""
        return [
            {
                "code": code,
                "message": WARNING_RULES[code],
                "count": len(ids),
                "event_ids": sorted(ids)[:MAX_WARNING_IDS],
            }
            for code, ids in sorted(self._ids.items())
        ]


@dataclass(slots=True)
class Span:
    """A named phase span of one attempt (closed, or closed by its attempt's end)."""

    start: float
    end: float
    attempt: int
    phase: str
    event_id: str
    span_id: str | None = None
    # A phase_started no phase closed: it ends at its attempt's stop, or is still open "now"
    # while the attempt is live (read by the live state, backend/ett/livefacts.py).
    unmatched: bool = False


@dataclass(slots=True)
class Window:
    """One progress window: cursor moves linearly from cursor_start to cursor_end."""

    start: float
    end: float
    attempt: int
    cursor_start: float
    cursor_end: float
    event_id: str

    def cut(self, at: float) -> None:
        """End the window at `at` (start < at < end), its cursor moved linearly to that instant."""
        self.cursor_end = self.cursor_start + (self.cursor_end - self.cursor_start) * (
            (at - self.start) / (self.end - self.start)
        )
        self.end = at


class WindowColumns(Sequence[Window]):
    """Clean progress windows in time order, a list per field; a Window is built only on request.

    The progress layer and the loop facts read the lists (window_fields); an event id stays an
    index into the job's ids in arrival order, resolved only where one is asked for (warnings,
    ties). Not a dataclass: its `index` field would take Sequence.index as its default.
    """

    __slots__ = ("attempt", "cursor_end", "cursor_start", "end", "ids", "index", "start")

    def __init__(
        self,
        start: Sequence[float],
        end: Sequence[float],
        attempt: Sequence[int],
        cursor_start: Sequence[float],
        cursor_end: Sequence[float],
        index: Sequence[int],
        ids: list[str],
    ) -> None:
        self.start = start
        self.end = end
        self.attempt = attempt
        self.cursor_start = cursor_start
        self.cursor_end = cursor_end
        self.index = index
        self.ids = ids

    def __len__(self) -> int:
        return len(self.start)

    @overload
    def __getitem__(self, i: int) -> Window: ...

    @overload
    def __getitem__(self, i: slice) -> list[Window]: ...

    def __getitem__(self, i: int | slice) -> Window | list[Window]:
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self.start)))]
        return Window(
            self.start[i],
            self.end[i],
            self.attempt[i],
            self.cursor_start[i],
            self.cursor_end[i],
            self.ids[self.index[i]],
        )

    def __iter__(self) -> Iterator[Window]:
        return map(
            Window,
            self.start,
            self.end,
            self.attempt,
            self.cursor_start,
            self.cursor_end,
            map(self.ids.__getitem__, self.index),
        )


def window_fields(windows: Sequence[Window], *names: str) -> Iterable[tuple[Any, ...]]:
    """The named fields (two or more) of each window in order: the columns zipped when the
    windows are WindowColumns (no Window built), else read from each Window."""
    if isinstance(windows, WindowColumns):
        return zip(*(getattr(windows, name) for name in names), strict=True)
    return map(attrgetter(*names), windows)


@dataclass(slots=True)
class Checkpoint:
    """The blocking part of one checkpoint save."""

    start: float
    end: float
    attempt: int
    event_id: str


@dataclass(slots=True)
class Failure:
    """One failure: at most one per attempt, the initiating one; the others it kept as cascade."""

    ts: float
    kind: str
    attempt: int
    inferred: bool
    event_id: str | None
    message: str | None = None
    cause: str | None = None
    domain: str | None = None
    planned: bool | None = None
    rank: int | None = None
    # The attempt's other reported failures (other ranks, the scheduler's), by time.
    cascade: list[Failure] = field(default_factory=list)


@dataclass(slots=True)
class AttemptInfo:
    """What the events say about one attempt, after repairs."""

    attempt: int
    start: float = math.inf
    start_event: str | None = None
    ended_at: float | None = None
    end_event: str | None = None
    reason: str | None = None
    host: str | None = None
    gpus: int | None = None
    first_span: float = math.inf
    last_event: float = -math.inf
    earliest_event: float = math.inf
    earliest_event_id: str | None = None
    failure: Failure | None = None
    # The latest end of the attempt's progress windows and checkpoint blocking parts (as sent).
    busy_end: float = -math.inf
    busy_event: str | None = None
    # Where the attempt stops holding its allocation for the partition (failure or end, else job end).
    end: float = 0.0
    # Still running: an open job's attempt with no end, no failure and not yet silent too long.
    live: bool = False
    # An in-place restart (attempt_started.in_place): it holds the previous attempt's capacity.
    in_place: bool = False
    # The hosts it ran on (attempt_started host/hosts, heartbeat host), in first-seen order, at
    # most catalogue.MAX_HOSTS; hosts_total counts them all (a sender's hosts_total included).
    hosts: list[str] = field(default_factory=list)
    hosts_total: int = 0


@dataclass(slots=True)
class Timeline:
    """One job's repaired timeline."""

    job_id: str | None
    submitted_at: float
    ended_at: float
    provisional: bool
    status: str | None
    model: str | None
    gpus: int
    labels: dict[str, Any]
    config: dict[str, Any]
    attempts: list[AttemptInfo]
    spans: list[Span]
    # A list, or (the common case: every progress event clean) the columns of WindowColumns.
    windows: Sequence[Window]
    checkpoints: list[Checkpoint]
    failures: list[Failure]
    warnings: WarningLog = field(default_factory=WarningLog)
    # Open job silent past the abandon timeout: it ended at its last event.
    abandoned: bool = False
    # The latest instant any event of the job speaks about (-inf without events).
    last_event_at: float = -math.inf
    # Distinct events (by event_id) the timeline was built from.
    events: int = 0


def _num(value: Any) -> float | None:
    """A finite float from an int or float (bools and strings are not numbers here)."""
    tv = type(value)
    if tv is float:
        return value if math.isfinite(value) else None
    if tv is int:
        try:
            return float(value)
        except OverflowError:
            return None
    return None


def _time(value: Any) -> float | None:
    """An epoch time in [0, MAX_TIME] seconds, else None."""
    t = _num(value)
    return t if t is not None and 0.0 <= t <= MAX_TIME else None


def canonical_json(event: Mapping[str, Any]) -> str:
    """An event's canonical JSON: sorted keys, no spaces (the smallest copy of a duplicate wins)."""
    return json.dumps(event, sort_keys=True, separators=(",", ":"), default=str)


def _progress(ev: Mapping[str, Any], eid: str, t: float) -> tuple[Window | None, tuple[str, ...]]:
    """A progress event as a Window (None when set aside) and the warning codes it earns."""
    a = ev.get("attempt")
    end = _time(ev.get("end"))
    if type(a) is not int or a < 0 or end is None:
        return None, ("invalid_event",)
    if end < t:
        return None, ("end_before_start",)
    cs = _num(ev.get("cursor_start"))
    ce = _num(ev.get("cursor_end"))
    codes: tuple[str, ...] = ()
    if cs is None or ce is None:
        codes = ("cursor_missing",)
        cs = ce = cs if cs is not None else (ce if ce is not None else 0.0)
    elif ce < cs:
        codes = ("cursor_backwards",)
        ce = cs
    return Window(t, end, a, cs, ce, eid), codes


_TYPE_SPEC: dict[str, tuple[int, str]] = {t: (r, _TIME_FIELD[t]) for t, r in TYPE_RANK.items()}
# From this many events on, the columns are sorted by numpy (below, Python's sort is faster).
NUMPY_SORT_MIN = 256
# From this many events on, repeated ids are looked for by sorting their hashes (below, a set
# is faster; above, its random inserts grow the cost per event).
HASH_SORT_MIN = 131072


def _key(ev: Mapping[str, Any], eid: str) -> tuple[float, int] | str:
    """The time and type rank of an event, or the warning code that sets it aside."""
    etype = ev.get("type")
    spec = _TYPE_SPEC.get(etype) if type(etype) is str else None
    if spec is None:
        return "unknown_type"
    t = ev.get(spec[1])
    if type(t) is not float or not math.isfinite(t):
        t = _num(t)
        if t is None:
            return "invalid_event"
    if not 0.0 <= t <= MAX_TIME:
        return "time_out_of_range"
    return (t, spec[0])


@dataclass(slots=True)
class Columns:
    """One job's distinct, valid events, a list per field.

    Clean progress windows, heartbeats and checkpoints (nearly all of a job) are read into the
    columns once, in arrival order, and their dicts are not read again: `attempt` is theirs
    (>= 0), `end` a window's end or a save's blocking end (else the time), the cursors a
    window's, and `payload` a heartbeat's host (or None). Every other event has attempt -1
    and its dict as payload.

    After `sorted_columns`, the numeric columns are in (time, type rank, event_id) order and
    `index` gives each row's place in arrival order, where `event_id`, `payload` and `source`
    stay: a row's id is `event_id[index[row]]`, read only where it is needed.
    """

    t: list[float]
    rank: list[int]
    attempt: list[int]
    end: list[float]
    # None once `windows` holds the windows' cursors (no other row needs them).
    cursor_start: list[float] | None
    cursor_end: list[float] | None
    event_id: list[str]
    payload: list[Any]
    # Each event's dict, in arrival order (not sorted).
    source: list[Mapping[str, Any]]
    # Distinct event ids, set-aside events included.
    distinct: int = 0
    # The job_id of the earliest event that names one (a string).
    job_id: str | None = None
    # Sorted row -> arrival position (a range while the rows are in arrival order).
    index: Sequence[int] = ()
    # The progress windows in time order when every progress event is clean, else None.
    windows: WindowColumns | None = None


# An attempt number numpy's int64 holds; a larger one takes the checking path with its dict.
_MAX_COLUMN_ATTEMPT = 2**62
# The fields of one event in _parse's flat list, in the order of Columns' first nine fields.
_FIELDS = 9
# Events _parse reads into its flat list before moving them to the columns.
_PARSE_CHUNK = 65536


def _parse(events: Sequence[Any], warnings: WarningLog) -> tuple[Columns, list[tuple[str, str]]]:
    """One pass in arrival order: the columns, unsorted, and the set-aside (code, event_id)."""
    # One flat list, extended once per event, then sliced into columns: cheaper than an
    # append per field.
    flat: list[Any] = []
    put = flat.extend
    set_aside: list[tuple[str, str]] = []
    hosts: dict[str, str] = {}
    spec_of = _TYPE_SPEC.get
    inf = math.inf
    max_time = MAX_TIME
    columns: list[list[Any]] = [[] for _ in range(_FIELDS)]
    for lo in range(0, len(events), _PARSE_CHUNK):
        # in chunks: the flat list and its slices never both hold a whole large job
        flat.clear()
        for ev in events[lo : lo + _PARSE_CHUNK]:
            if type(ev) is not dict and not isinstance(ev, Mapping):
                warnings.add("invalid_event")
                continue
            eid = ev.get("event_id")
            if type(eid) is not str:
                warnings.add("invalid_event")
                continue
            etype = ev.get("type")
            spec = spec_of(etype) if type(etype) is str else None
            if spec is not None:
                t = ev.get(spec[1])
                if type(t) is float and 0.0 <= t <= max_time:
                    rank = spec[0]
                    a = ev.get("attempt")
                    if type(a) is not int or not 0 <= a <= _MAX_COLUMN_ATTEMPT:
                        put((t, rank, -1, t, 0.0, 0.0, eid, ev, ev))
                    elif rank == 4:
                        end = ev.get("end")
                        cs = ev.get("cursor_start")
                        ce = ev.get("cursor_end")
                        if (
                            type(end) is float
                            and t <= end <= max_time
                            and type(cs) is float
                            and type(ce) is float
                            and -inf < cs <= ce < inf
                        ):
                            put((t, 4, a, end, cs, ce, eid, None, ev))
                        else:
                            put((t, 4, -1, t, 0.0, 0.0, eid, ev, ev))
                    elif rank == 6:
                        host = ev.get("host")
                        # one str per host name: the loop then touches a few hot objects
                        host = hosts.setdefault(host, host) if type(host) is str and host else None
                        put((t, 6, a, t, 0.0, 0.0, eid, host, ev))
                    elif rank == 5:
                        bend = ev.get("blocking_end")
                        if type(bend) is float and t <= bend <= max_time:
                            put((t, 5, a, bend, 0.0, 0.0, eid, None, ev))
                        else:
                            put((t, 5, -1, t, 0.0, 0.0, eid, ev, ev))
                    else:
                        put((t, rank, -1, t, 0.0, 0.0, eid, ev, ev))
                    continue
            k = _key(ev, eid)
            if type(k) is tuple:
                put((k[0], k[1], -1, k[0], 0.0, 0.0, eid, ev, ev))
            else:
                set_aside.append((k, eid))
        for i, column in enumerate(columns):
            column += flat[i::_FIELDS]
    cols = Columns(*columns)
    return cols, set_aside


def _may_repeat(ids: list[str]) -> bool:
    """Whether two of these event ids may be equal (equal hashes; rarely a false alarm)."""
    n = len(ids)
    if n < HASH_SORT_MIN:
        return len(set(ids)) != n
    h = np.fromiter(map(hash, ids), dtype=np.int64, count=n)
    h.sort()
    return bool((h[1:] == h[:-1]).any())


def _distinct(events: Iterable[Any], warnings: WarningLog) -> list[Mapping[str, Any]]:
    """One event per event_id; of conflicting copies the one with the smallest canonical JSON."""
    by_id: dict[str, Mapping[str, Any]] = {}
    conflicted: set[str] = set()
    for ev in events:
        if type(ev) is not dict and not isinstance(ev, Mapping):
            continue
        eid = ev.get("event_id")
        if type(eid) is not str:
            continue
        prev = by_id.get(eid)
        if prev is None:
            by_id[eid] = ev
        elif prev is not ev and prev != ev:
            conflicted.add(eid)
            if canonical_json(ev) < canonical_json(prev):
                by_id[eid] = ev
    if conflicted:
        warnings.add("conflicting_duplicate", *conflicted)
    return list(by_id.values())


def _sort_python(cols: Columns) -> None:
    """Sort the numeric columns with Python's sort (small jobs: no numpy call overhead)."""
    n = len(cols.t)
    ts, ranks, ids = cols.t, cols.rank, cols.event_id
    order = sorted(range(n), key=lambda i: (ts[i], ranks[i], ids[i]))
    if all(i == k for i, k in enumerate(order)):
        cols.index = range(n)
    else:
        cols.index = order
        for name in ("t", "rank", "attempt", "end", "cursor_start", "cursor_end"):
            values: list[Any] = getattr(cols, name)
            setattr(cols, name, list(map(values.__getitem__, order)))
    rank, attempt = cols.rank, cols.attempt
    rows = [j for j in range(n) if rank[j] == 4]
    if all(attempt[j] >= 0 for j in rows):
        _take_windows(cols, rows)


def _take_windows(cols: Columns, rows: list[int]) -> None:
    """The sorted rows `rows` (every progress event, all clean) as the job's WindowColumns."""
    assert cols.cursor_start is not None and cols.cursor_end is not None
    cols.windows = WindowColumns(
        *(
            list(map(col.__getitem__, rows))
            for col in (
                cols.t,
                cols.end,
                cols.attempt,
                cols.cursor_start,
                cols.cursor_end,
                cols.index,
            )
        ),
        cols.event_id,
    )
    cols.cursor_start = cols.cursor_end = None


def _sort_numpy(cols: Columns) -> None:
    """Sort the numeric columns with numpy, into arrays read through memoryviews (8 bytes a
    value, a float or int object made only when the engine reads one)."""
    n = len(cols.t)
    ids = cols.event_id
    ts_np = np.array(cols.t, dtype=np.float64)
    ranks_np = np.array(cols.rank, dtype=np.int8)
    perm = np.lexsort((ranks_np, ts_np))
    ts_np = ts_np[perm]
    ranks_np = ranks_np[perm]
    ties = np.flatnonzero((ts_np[1:] == ts_np[:-1]) & (ranks_np[1:] == ranks_np[:-1])).tolist()
    k = 0
    while k < len(ties):
        # a run of equal (time, rank), rare outside tests: ordered by event_id
        lo = ties[k]
        while k + 1 < len(ties) and ties[k + 1] == ties[k] + 1:
            k += 1
        hi = ties[k] + 2
        perm[lo:hi] = sorted(perm[lo:hi].tolist(), key=ids.__getitem__)
        k += 1
    attempt_np = np.array(cols.attempt, dtype=np.int64)
    end_np = np.array(cols.end, dtype=np.float64)
    if bool((perm[1:] > perm[:-1]).all()):
        cols.index = range(n)
    else:
        attempt_np = attempt_np[perm]
        end_np = end_np[perm]
        cols.index = memoryview(perm)
        cols.t = memoryview(ts_np)
        cols.rank = memoryview(ranks_np)
        cols.attempt = memoryview(attempt_np)
        cols.end = memoryview(end_np)
    rows = np.flatnonzero(ranks_np == 4)
    if not bool((attempt_np[rows] >= 0).all()):
        if type(cols.index) is not range:
            for name in ("cursor_start", "cursor_end"):
                values = np.array(getattr(cols, name), dtype=np.float64)
                setattr(cols, name, memoryview(values[perm]))
        return
    at = perm[rows]
    cols.windows = WindowColumns(
        memoryview(ts_np[rows]),
        memoryview(end_np[rows]),
        memoryview(attempt_np[rows]),
        memoryview(np.array(cols.cursor_start, dtype=np.float64)[at]),
        memoryview(np.array(cols.cursor_end, dtype=np.float64)[at]),
        memoryview(at),
        ids,
    )
    cols.cursor_start = cols.cursor_end = None


def sorted_columns(events: Iterable[Any], warnings: WarningLog) -> Columns:
    """One event per event_id, in (time, type rank, event_id) order: never by arrival order."""
    evs: Sequence[Any] = events if isinstance(events, (list, tuple)) else list(events)
    cols, set_aside = _parse(evs, warnings)
    ids = cols.event_id
    if _may_repeat(ids + [eid for _code, eid in set_aside] if set_aside else ids):
        cols, set_aside = _parse(_distinct(evs, warnings), warnings)
    for code, eid in set_aside:
        warnings.add(code, eid)
    cols.distinct = len(cols.event_id) + len(set_aside)
    if len(cols.t) < NUMPY_SORT_MIN:
        _sort_python(cols)
    else:
        _sort_numpy(cols)
    src = cols.source
    for i in cols.index:
        candidate = src[i].get("job_id")
        if type(candidate) is str:
            cols.job_id = candidate
            break
    return cols


def sorted_ids(cols: Columns) -> list[str]:
    """The sorted rows' event ids (for tests and tools: the engine reads them one by one)."""
    return list(map(cols.event_id.__getitem__, cols.index))


def _clipping_warnings(
    cols: Columns,
    windows: Sequence[Window],
    spans: list[Span],
    checkpoints: list[Checkpoint],
    lo: float,
    hi: float,
    warnings: WarningLog,
) -> None:
    # the times are sorted: early ones are a prefix, late starts a suffix
    ts, ids, index = cols.t, cols.event_id, cols.index
    for t, k in zip(ts, index, strict=True):
        if t >= lo:
            break
        warnings.add("before_submission", ids[k])
    for t, k in zip(reversed(ts), reversed(index), strict=True):
        if t <= hi:
            break
        warnings.add("after_job_end", ids[k])
    if isinstance(windows, WindowColumns) and (not windows.end or max(windows.end) <= hi):
        windows = ()
    for group in (windows, spans, checkpoints):
        for item in group:
            if item.end > hi:
                warnings.add("after_job_end", item.event_id)


def build_timeline(
    events: Iterable[Any],
    *,
    now: float,
    heartbeat_timeout_s: float = HEARTBEAT_TIMEOUT_S,
    abandon_timeout_s: float = ABANDON_TIMEOUT_S,
) -> Timeline:
    """Dedupe, order by (time, type rank, event_id), validate and repair one job's events."""
    warnings = WarningLog()
    cols = sorted_columns(events, warnings)

    submitted: Mapping[str, Any] | None = None
    submitted_at: float | None = None
    ended: Mapping[str, Any] | None = None
    ended_at: float | None = None
    job_id = cols.job_id
    attempts: dict[int, AttemptInfo] = {}
    raw_spans: list[Span] = []
    open_spans: list[Span] = []
    windows: list[Window] = []
    checkpoints: list[Checkpoint] = []
    explicit_failures: dict[int, Failure] = {}
    reported: dict[int, list[Failure]] = {}
    allocation_ends: list[tuple[float, int, str, Mapping[str, Any], int]] = []
    times_max = -math.inf
    add_window = windows.append
    add_checkpoint = checkpoints.append
    info = AttemptInfo(attempt=-1)
    cur_a = -1
    # Per attempt, the hosts named, in first-seen order (a dict keeps that order).
    hosts_seen: dict[int, dict[str, None]] = {}
    # Per attempt, the arrival position of the event that set its busy_end.
    busy_at: dict[int, int] = {}
    ids, payload = cols.event_id, cols.payload
    column_windows = cols.windows
    n = len(cols.t)
    eid = ""

    ev: Mapping[str, Any] = {}
    for t, rank, a, end, cs, ce, k in zip(
        cols.t,
        cols.rank,
        cols.attempt,
        cols.end,
        cols.cursor_start if cols.cursor_start is not None else repeat(0.0, n),
        cols.cursor_end if cols.cursor_end is not None else repeat(0.0, n),
        cols.index,
        strict=True,
    ):
        if a >= 0:  # read into the columns: a clean window, heartbeat or checkpoint
            if rank == 4:
                if column_windows is None:
                    add_window(Window(t, end, a, cs, ce, ids[k]))
            elif rank == 6:  # heartbeat: one from each host's first process names its host
                p = payload[k]
                if p is not None:
                    seen = hosts_seen.get(a)
                    if seen is None:
                        seen = hosts_seen[a] = {}
                    seen[p] = None
            else:
                add_checkpoint(Checkpoint(t, end, a, ids[k]))
            if a != cur_a:
                eid = ids[k]
        elif rank == 4:  # a progress event the columns did not take: checked here
            eid = ids[k]
            p = payload[k]
            w, codes = _progress(p, eid, t)
            for code in codes:
                warnings.add(code, eid)
            if w is None:
                continue
            add_window(w)
            a = w.attempt
            end = w.end
        elif rank == 0 or rank == 9:
            eid = ids[k]
            ev = payload[k]
            if rank == 0:
                if submitted is None:
                    submitted, submitted_at = ev, t
                else:
                    warnings.add("multiple_job_submitted", submitted.get("event_id"), eid)
            else:
                if ended is not None:
                    warnings.add("multiple_job_ended", ended.get("event_id"), eid)
                ended, ended_at = ev, t  # sorted by time: the last one seen is the latest
            continue
        else:
            eid = ids[k]
            ev = payload[k]
            a = ev.get("attempt")
            if type(a) is not int or a < 0:
                warnings.add("invalid_event", eid)
                continue
            end = t
            if rank == 6:  # heartbeat
                host = ev.get("host")
                if type(host) is str and host:
                    hosts_seen.setdefault(a, {})[host] = None
            elif rank == 3 or rank == 2:  # phase, phase_started
                phase = ev.get("phase")
                if type(phase) is not str or not phase:
                    warnings.add("invalid_event", eid)
                    continue
                if rank == 3:
                    pend = _time(ev.get("end"))
                    if pend is None:
                        warnings.add("invalid_event", eid)
                        continue
                    if pend < t:
                        warnings.add("end_before_start", eid)
                        continue
                    end = pend
                    sid = ev.get("span_id")
                    raw_spans.append(
                        Span(t, pend, a, phase, eid, sid if type(sid) is str else None)
                    )
                else:
                    sid = ev.get("span_id")
                    open_spans.append(Span(t, t, a, phase, eid, sid if type(sid) is str else None))
            elif rank == 5:  # checkpoint
                bend = _time(ev.get("blocking_end"))
                if bend is None:
                    warnings.add("invalid_event", eid)
                    continue
                if bend < t:
                    warnings.add("end_before_start", eid)
                    continue
                end = bend
                add_checkpoint(Checkpoint(t, bend, a, eid))
            elif (rank == 7 or rank == 8) and ev.get("scope") == "allocation":
                # A scheduler's end of the allocation: its attempt is known once every start is.
                allocation_ends.append((t, rank, eid, ev, a))
                if t > times_max:
                    times_max = t
                continue
            elif rank == 7:  # failure: the earliest explicit one of an attempt wins
                kind = _failure_kind(ev, eid, warnings)
                report = _explicit_failure(ev, t, kind, a, eid)
                reported.setdefault(a, []).append(report)
                if a not in explicit_failures:
                    explicit_failures[a] = report
        if a != cur_a:
            cur_a = a
            found = attempts.get(a)
            if found is None:
                # events come in time order, so the first one seen is the attempt's earliest
                found = attempts[a] = AttemptInfo(
                    attempt=a, earliest_event=t, earliest_event_id=eid
                )
            info = found
        if rank == 1:  # attempt_started
            if info.start_event is None:
                info.start, info.start_event = t, eid
                host = ev.get("host")
                info.host = host if type(host) is str else None
                named = ev.get("hosts")
                total = ev.get("hosts_total")
                if type(total) is int and total > 0:
                    info.hosts_total = total
                seen = hosts_seen.setdefault(a, {})
                if info.host:
                    seen[info.host] = None
                if type(named) is list:
                    for h in named:
                        if type(h) is str and h:
                            seen[h] = None
                gpus = ev.get("gpus")
                info.gpus = gpus if type(gpus) is int and gpus >= 1 else None
            else:
                warnings.add("multiple_attempt_started", info.start_event, eid)
            if ev.get("in_place") is True:
                info.in_place = True
        elif rank == 8:  # attempt_ended
            if info.ended_at is None:
                reason = ev.get("reason")
                info.ended_at = t
                info.reason = reason if type(reason) is str else None
                info.end_event = eid
            else:
                warnings.add("multiple_attempt_ended", info.end_event, eid)
        elif 2 <= rank <= 5 and info.first_span == math.inf:
            info.first_span = t
        if end > info.last_event:
            info.last_event = end
        if (rank == 4 or rank == 5) and end > info.busy_end:
            info.busy_end = end
            busy_at[a] = k
        if end > times_max:
            times_max = end

    for a, k in busy_at.items():
        attempts[a].busy_event = ids[k]

    for a, names in hosts_seen.items():
        found = attempts.get(a)
        if found is not None:
            distinct = list(names)
            found.hosts = distinct[:MAX_HOSTS]
            found.hosts_total = max(found.hosts_total, len(distinct))

    # -- the job's own boundaries ------------------------------------------------------------
    meta: Mapping[str, Any] = submitted or {}
    if submitted_at is None:
        warnings.add("no_job_submitted")
        submitted_at = cols.t[0] if cols.t else float(now)
    provisional = ended_at is None
    abandoned = False
    # Silence of an attempt is measured against 'now' while the job is open, else its end.
    silence_ref = float(now)
    if ended is not None and ended_at is not None:
        job_end = ended_at
        silence_ref = job_end
        if job_end < submitted_at:
            warnings.add("job_ended_before_submitted", ended.get("event_id"))
            job_end = submitted_at
    else:
        job_end = max(float(now), submitted_at)
        if times_max > job_end:
            warnings.add("after_now")
            job_end = times_max
        elif cols.t and float(now) - max(times_max, submitted_at) > abandon_timeout_s:
            abandoned, provisional = True, False
            warnings.add("abandoned")
            job_end = max(times_max, submitted_at)
    timeline_windows: Sequence[Window] = column_windows if column_windows is not None else windows
    _clipping_warnings(
        cols, timeline_windows, raw_spans, checkpoints, submitted_at, job_end, warnings
    )

    # -- attempts: starts, ends, failures ------------------------------------------------------
    for info in attempts.values():
        if info.start_event is None:
            warnings.add("missing_attempt_started", info.earliest_event_id)
            info.start = info.earliest_event if math.isfinite(info.earliest_event) else job_end
    if allocation_ends:
        route_allocation_ends(allocation_ends, attempts, explicit_failures, warnings, reported)
    for info in attempts.values():
        if info.ended_at is not None and info.ended_at < info.start:
            warnings.add("attempt_ended_before_start", info.end_event)
            info.ended_at = info.start
    ordered = sorted(attempts.values(), key=lambda x: (x.start, x.attempt))
    if any(ordered[i].attempt > ordered[i + 1].attempt for i in range(len(ordered) - 1)):
        warnings.add("attempts_out_of_order", *(x.start_event for x in ordered))
    timeline_windows, checkpoints, busy_until = cut_at_next_attempt(
        ordered, timeline_windows, checkpoints, warnings
    )

    failures: list[Failure] = []
    last_info = ordered[-1] if ordered else None
    job_end_kind = _job_end(ended)
    for i, info in enumerate(ordered):
        later_start = ordered[i + 1].start if i + 1 < len(ordered) else None
        failure = explicit_failures.get(info.attempt)
        reports = reported.get(info.attempt)
        if reports is not None and len(reports) > 1:
            failure = initiating_failure(reports)
        if (
            failure is not None
            and info is last_info
            and ended is not None
            and ended.get("status") == "cancelled"
            and all(_symptom(f) for f in (failure, *failure.cascade))
        ):
            # a SIGTERM the scheduler says was a cancel (scancel): not a failure
            failure = None
            info.reason = "cancelled"
        if failure is None and info.reason in _ENDED_FAILURE_KIND and info.ended_at is not None:
            failure = Failure(
                info.ended_at,
                _ENDED_FAILURE_KIND[info.reason],
                info.attempt,
                False,
                info.end_event,
            )
        last = max(info.last_event, info.start)
        if later_start is not None and last > later_start:
            last = max(later_start, info.start)  # a leftover process's events are cut off
        silent = later_start is not None or silence_ref - last > heartbeat_timeout_s
        if failure is None and info.ended_at is None and silent:
            failure = Failure(last, "unknown", info.attempt, True, None)
        if failure is None and job_end_kind is not None and info is last_info:
            warnings.add("inferred_failure_job_failed", ended.get("event_id") if ended else None)
            kind = job_end_kind.failure_kind or "unknown"
            failure = Failure(
                last, kind, info.attempt, job_end_kind.inferred, None, cause=job_end_kind.cause
            )
        if failure is not None:
            failure_after_attempt_end(failure, info, warnings)
            blocked = busy_until.get(info.attempt)
            if blocked is not None and failure.ts < blocked[0]:
                warnings.add("failure_before_progress", failure.event_id, blocked[1])
                failure.ts = blocked[0]
        info.failure = failure
        stops = [x.ts for x in (failure,) if x is not None]
        if info.ended_at is not None:
            stops.append(info.ended_at)
        if stops:
            info.end = max(min(stops), info.start)
        else:
            info.end = max(job_end, info.start)
            info.live = provisional
        if failure is not None:
            failures.append(failure)

    spans = close_open_spans(raw_spans, open_spans, attempts, warnings)

    status = ended.get("status") if ended is not None else None
    if ended is not None:
        status = status if type(status) is str else "unknown"
    elif abandoned:
        status = "abandoned"
    else:
        status = "running" if ordered else "pending"
    gpus = meta.get("gpus")
    if not (type(gpus) is int and gpus >= 1):
        gpus = max((x.gpus for x in ordered if x.gpus), default=1)
    model = meta.get("model")
    labels = meta.get("labels")
    config = meta.get("config")
    return Timeline(
        job_id=job_id,
        submitted_at=submitted_at,
        ended_at=job_end,
        provisional=provisional,
        status=status,
        model=model if type(model) is str else None,
        gpus=gpus,
        labels=dict(labels) if isinstance(labels, Mapping) else {},
        config=dict(config) if isinstance(config, Mapping) else {},
        attempts=ordered,
        spans=spans,
        windows=timeline_windows,
        checkpoints=checkpoints,
        failures=sorted(failures, key=lambda f: (f.ts, f.attempt)),
        warnings=warnings,
        abandoned=abandoned,
        last_event_at=max(times_max, submitted_at),
        events=cols.distinct,
    )


def failure_after_attempt_end(failure: Failure, info: AttemptInfo, warnings: WarningLog) -> None:
    """A failure stamped after its attempt ended stopped the attempt at that end.

    A scheduler integration reports a crash when the process has exited, which comes after the
    trainer's own record of its end (OneLogger's application span, say) by the teardown.
    """
    if info.ended_at is not None and failure.ts > info.ended_at:
        warnings.add("failure_after_attempt_end", failure.event_id, info.end_event)
        failure.ts = max(info.ended_at, info.start)


def _failure_kind(ev: Mapping[str, Any], eid: str, warnings: WarningLog) -> str:
    kind = ev.get("kind")
    if type(kind) is not str or kind not in _FAILURE_KINDS:
        warnings.add("unknown_failure_kind", eid)
        return "unknown"
    return kind


def _explicit_failure(ev: Mapping[str, Any], t: float, kind: str, a: int, eid: str) -> Failure:
    msg, cause, domain = ev.get("message"), ev.get("cause"), ev.get("domain")
    planned, rank = ev.get("planned"), ev.get("rank")
    return Failure(
        t,
        kind,
        a,
        False,
        eid,
        msg if type(msg) is str else None,
        cause=cause if type(cause) is str and cause in CAUSES else None,
        domain=domain if type(domain) is str and domain in FAILURE_DOMAINS else None,
        planned=planned if type(planned) is bool else None,
        rank=rank if type(rank) is int and rank >= 0 else None,
    )


def _symptom(failure: Failure) -> bool:
    row = CAUSES.get(failure.cause) if failure.cause is not None else None
    return row is not None and row.symptom


def initiating_failure(reports: list[Failure]) -> Failure:
    """The initiating failure of one attempt's reports; the others become its cascade.

    A symptom (a SIGTERM of unknown sender) yields to any other report. Of the rest, those
    within SKEW_TOLERANCE_S of the earliest are simultaneous: one naming a cause wins over an
    unknown one, then the earliest, then the smaller event id. The attempt still stops at its
    earliest report (the time is that of the first sign, whoever sent it).
    """
    pool = [f for f in reports if not _symptom(f)] or reports
    first = min(f.ts for f in pool)
    chosen = min(
        (f for f in pool if f.ts <= first + SKEW_TOLERANCE_S),
        key=lambda f: (failure_cause(f.kind, f.cause) == "unknown", f.ts, f.event_id or ""),
    )
    cascade = sorted(
        (f for f in reports if f is not chosen), key=lambda f: (f.ts, f.event_id or "")
    )
    return Failure(
        min(f.ts for f in reports),
        chosen.kind,
        chosen.attempt,
        chosen.inferred,
        chosen.event_id,
        chosen.message,
        cause=chosen.cause,
        domain=chosen.domain,
        planned=chosen.planned,
        rank=chosen.rank,
        cascade=cascade,
    )


def _job_end(ended: Mapping[str, Any] | None) -> JobEnd | None:
    """The JOB_ENDS row of a job_ended whose status implies a failure (else None)."""
    status = ended.get("status") if ended is not None else None
    row = JOB_ENDS.get(status) if type(status) is str else None
    return row if row is not None and row.failure_kind is not None else None


def route_allocation_ends(
    ends: list[tuple[float, int, str, Mapping[str, Any], int]],
    attempts: dict[int, AttemptInfo],
    explicit_failures: dict[int, Failure],
    warnings: WarningLog,
    reported: dict[int, list[Failure]] | None = None,
) -> None:
    """Allocation-scoped failures and attempt_ended (a scheduler's) end the allocation's latest
    attempt: the one named, or the last of the in-place restarts that follow it and started
    before the end (within ALLOCATION_SLACK_S). Such an end is never earlier than that attempt's
    start, nor than its last event within ALLOCATION_SLACK_S after it (schedulers truncate to
    whole seconds). The earliest failure or end still wins."""
    ordered = sorted(attempts.values(), key=lambda x: (x.start, x.attempt))
    index = {info.attempt: i for i, info in enumerate(ordered)}
    for t, rank, eid, ev, a in sorted(ends, key=lambda x: (x[0], x[1], x[2])):
        i = index.get(a)
        if i is None:  # nothing else of the attempt: it starts at this event
            target = attempts[a] = AttemptInfo(
                attempt=a, start=t, earliest_event=t, earliest_event_id=eid
            )
            warnings.add("missing_attempt_started", eid)
            ordered.append(target)
            ordered.sort(key=lambda x: (x.start, x.attempt))
            index = {info.attempt: k for k, info in enumerate(ordered)}
        else:
            while (
                i + 1 < len(ordered)
                and ordered[i + 1].in_place
                and ordered[i + 1].start < t + ALLOCATION_SLACK_S
            ):
                i += 1
            target = ordered[i]
        # The scheduler's whole second holds the end: no earlier than the attempt's own events
        # of that second (a restart or a last window inside it).
        t = max(t, min(target.last_event, t + ALLOCATION_SLACK_S), target.start)
        if t > target.last_event:
            target.last_event = t
        b = target.attempt
        if rank == 7:
            kind = _failure_kind(ev, eid, warnings)
            known = explicit_failures.get(b)
            report = _explicit_failure(ev, t, kind, b, eid)
            if reported is not None:
                reported.setdefault(b, []).append(report)
            if known is None or t < known.ts:
                explicit_failures[b] = report
        elif target.ended_at is None or t < target.ended_at:
            if target.ended_at is not None:
                warnings.add("multiple_attempt_ended", target.end_event, eid)
            reason = ev.get("reason")
            target.ended_at, target.end_event = t, eid
            target.reason = reason if type(reason) is str else None
        else:
            warnings.add("multiple_attempt_ended", target.end_event, eid)


def cut_at_next_attempt(
    ordered: list[AttemptInfo],
    windows: Sequence[Window],
    checkpoints: list[Checkpoint],
    warnings: WarningLog,
) -> tuple[Sequence[Window], list[Checkpoint], dict[int, tuple[float, str]]]:
    """Cut each attempt's windows and checkpoints at the next attempt's start (leftover processes).

    Also returns, per attempt, where its last (cut) window or checkpoint blocking part ends and
    the id of that event: a failure of the attempt is never earlier (clock skew between ranks).
    """
    next_start = {info.attempt: ordered[i + 1].start for i, info in enumerate(ordered[:-1])}
    if not any(info.busy_end > next_start.get(info.attempt, math.inf) for info in ordered):
        # The common case: nothing to cut, and the main pass already found each last end.
        return (
            windows,
            checkpoints,
            {x.attempt: (x.busy_end, x.busy_event) for x in ordered if x.busy_event is not None},
        )
    busy_until: dict[int, tuple[float, str]] = {}
    kept_windows = _cut_items(windows, next_start, busy_until, warnings)
    kept_checkpoints = _cut_items(checkpoints, next_start, busy_until, warnings)
    return kept_windows, kept_checkpoints, busy_until


def _cut_items(
    items: Sequence[Any],
    next_start: Mapping[int, float],
    busy_until: dict[int, tuple[float, str]],
    warnings: WarningLog,
) -> list[Any]:
    """Windows or checkpoints cut at their attempt's cut-off; records each attempt's last end."""
    inf = math.inf
    kept: list[Any] = []
    append = kept.append
    cur_a: int | None = None
    limit = inf
    best_end = -inf
    best_id = ""
    for item in items:
        a = item.attempt
        if a != cur_a:
            if cur_a is not None and best_end > -inf:
                busy_until[cur_a] = (best_end, best_id)
            cur_a = a
            limit = next_start.get(a, inf)
            best_end, best_id = busy_until.get(a, (-inf, ""))
        end = item.end
        if end > limit:
            warnings.add("progress_after_next_attempt", item.event_id)
            if item.start >= limit:
                continue
            if type(item) is Window:
                item.cut(limit)
            else:
                item.end = limit
            end = limit
        append(item)
        if end > best_end:
            best_end, best_id = end, item.event_id
    if cur_a is not None and best_end > -inf:
        busy_until[cur_a] = (best_end, best_id)
    return kept


def close_open_spans(
    closed: list[Span],
    open_spans: list[Span],
    attempts: Mapping[int, AttemptInfo],
    warnings: WarningLog,
) -> list[Span]:
    """phase_started spans: matched by span_id, else by the nearest start within 1 s; else closed
    at the attempt's end (the earlier of its failure and its attempt_ended)."""
    by_span_id = {sp.span_id for sp in closed if sp.span_id is not None}
    starts_by_key: dict[tuple[int, str], list[tuple[float, str | None]]] = {}
    for sp in closed:
        starts_by_key.setdefault((sp.attempt, sp.phase), []).append((sp.start, sp.span_id))
    for lst in starts_by_key.values():
        lst.sort(key=lambda x: x[0])
    spans = closed
    for sp in open_spans:
        if sp.span_id is not None and sp.span_id in by_span_id:
            continue
        if _nearest_match(starts_by_key.get((sp.attempt, sp.phase)), sp):
            continue
        info = attempts[sp.attempt]
        if not info.live:
            warnings.add("phase_never_ended", sp.event_id)
        sp.unmatched = True
        sp.end = max(info.end, sp.start)
        spans.append(sp)
    return spans


def _nearest_match(candidates: list[tuple[float, str | None]] | None, sp: Span) -> bool:
    """A closed span of the same attempt and phase starting within 1 s of `sp`; a span_id on
    both sides that differs rules the pair out (two concurrent spans of one phase)."""
    if not candidates:
        return False
    starts = [c[0] for c in candidates]
    k = bisect.bisect_left(starts, sp.start - MATCH_TOLERANCE_S)
    while k < len(candidates) and candidates[k][0] <= sp.start + MATCH_TOLERANCE_S:
        other = candidates[k][1]
        if sp.span_id is None or other is None or other == sp.span_id:
            return True
        k += 1
    return False
