"""Pure helpers for UTC days, weeks and months, and the split of intervals at day boundaries.

A day is backend.timefmt's (DAY_S, day_start): one definition for the product.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from datetime import UTC, datetime

from backend.timefmt import DAY_S, day_start

WEEK_S = 7 * DAY_S
# 1970-01-01 was a Thursday: three days after the Monday that starts its ISO week.
_EPOCH_WEEKDAY = 3


def week_start(ts: float) -> float:
    """The epoch second of 00:00 UTC on the Monday of the ISO week holding `ts`."""
    day_index = math.floor(ts / DAY_S)
    return (day_index - (day_index + _EPOCH_WEEKDAY) % 7) * DAY_S


BUCKETS = ("day", "week", "month")


def month_start(ts: float) -> float:
    """The epoch second of 00:00 UTC on the first day of the calendar month holding `ts`."""
    d = datetime.fromtimestamp(ts, UTC)
    return datetime(d.year, d.month, 1, tzinfo=UTC).timestamp()


def next_month(ts: float) -> float:
    """00:00 UTC on the first day of the month after the one holding `ts`."""
    d = datetime.fromtimestamp(ts, UTC)
    year, month = (d.year + 1, 1) if d.month == 12 else (d.year, d.month + 1)
    return datetime(year, month, 1, tzinfo=UTC).timestamp()


def bucket_start(ts: float, bucket: str) -> float:
    """Start of the 'day', ISO 'week' or calendar 'month' bucket holding `ts`."""
    if bucket == "day":
        return day_start(ts)
    if bucket == "week":
        return week_start(ts)
    if bucket == "month":
        return month_start(ts)
    raise ValueError(f"bucket must be one of {', '.join(BUCKETS)}, not {bucket!r}")


def bucket_end(start: float, bucket: str) -> float:
    """The end (exclusive) of the bucket starting at `start`."""
    if bucket == "month":
        return next_month(start)
    return start + (DAY_S if bucket == "day" else WEEK_S)


def bucket_starts(lo: float, hi: float, bucket: str) -> list[float]:
    """Every bucket start from the bucket holding `lo` up to (excluding) `hi`."""
    out = []
    t = bucket_start(lo, bucket)
    while t < hi:
        out.append(t)
        t = bucket_end(t, bucket)
    return out


def split_by_day(
    intervals: Iterable[tuple[float, float, str, str | None]],
) -> dict[tuple[float, str, str | None], float]:
    """Wall seconds per (UTC day, component, phase); an interval crossing midnight is cut there."""
    out: dict[tuple[float, str, str | None], float] = {}
    for start, end, component, phase in intervals:
        s = start
        while s < end:
            d = day_start(s)
            e = min(end, d + DAY_S)
            key = (d, component, phase)
            out[key] = out.get(key, 0.0) + (e - s)
            s = e
    return out
