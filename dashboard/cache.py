"""A short-lived memo for the reads a page makes twice in one load (its layout, then its
deferred part below the first screen), so each read runs once per load.

Keyed by the request's database, the read and the filters it depends on; an answer lives
TTL_S seconds, so new events show on the next load after at most that long. Concurrent loads
of the same view wait for one computation rather than each running it. Every caller gets its
own copy, so a page that changes a frame it was given cannot change another's.
"""

from __future__ import annotations

import copy
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Any, TypeVar

from dashboard.context import current
from dashboard.filters import Filters

T = TypeVar("T")

# Shorter than the shortest auto-refresh (30 s): a refreshed page always reads anew.
TTL_S = 10.0
MAX_ENTRIES = 64

_lock = threading.Lock()
_entries: OrderedDict[Hashable, tuple[float, Any]] = OrderedDict()
_computing: dict[Hashable, threading.Lock] = {}
clock: Callable[[], float] = time.monotonic


def filters_key(filters: Filters) -> tuple[Any, ...]:
    """The parts of the filters a read depends on (not the page's own extra arguments)."""
    return (
        filters.start,
        filters.end,
        filters.bucket,
        filters.model,
        filters.team,
        filters.owner,
        filters.label,
    )


def _fresh(key: Hashable, now: float) -> tuple[bool, Any]:
    hit = _entries.get(key)
    if hit is not None and now - hit[0] < TTL_S:
        return True, hit[1]
    return False, None


def memo(name: str, key: Hashable, compute: Callable[[], T]) -> T:
    """`compute()`'s answer for (the request's database, `name`, `key`), at most TTL_S old."""
    full = (current().database.url, id(current().database), name, key)
    with _lock:
        found, value = _fresh(full, clock())
        if found:
            return value
        gate = _computing.setdefault(full, threading.Lock())
    with gate:
        with _lock:
            found, value = _fresh(full, clock())
        if found:
            return copy.deepcopy(value)
        started = clock()
        value = compute()
        with _lock:
            _entries[full] = (started, copy.deepcopy(value))
            _entries.move_to_end(full)
            while len(_entries) > MAX_ENTRIES:
                _entries.popitem(last=False)
            _computing.pop(full, None)
        return value


def clear() -> None:
    """Forget every answer (tests; a write that must show at once)."""
    with _lock:
        _entries.clear()
