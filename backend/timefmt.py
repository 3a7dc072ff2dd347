"""Times in and out, one parser for the whole product (REST, dashboard, CLI, ingest).

Accepted spellings of an instant (`parse_instant`):

- RFC 3339 / ISO 8601 date-time: `2026-11-30T12:00:00Z`, `2026-11-30T12:00:00+02:00`
  (a time without an offset is UTC, unless the caller requires an offset, as ingest does);
- Unix epoch seconds: `1796000000`, `1796000000.25`;
- a calendar date `2026-11-30` (a whole UTC day: see `parse_bound` for start and end);
- a relative time `-12h`, `-180d`, `-4w` (also `s`, `m`): hours, minutes and seconds count
  back from now; days and weeks count back from the end of today (the next 00:00 UTC), so
  `-180d` is 00:00 UTC of the first of the last 180 whole UTC days, today included;
- `now`.

A range is always half-open, [start, end). A date as `end` is inclusive: `end=2026-11-30`
is the instant 2026-12-01T00:00:00Z. A relative `end` in days or weeks is a day boundary too.
"""

from __future__ import annotations

import math
import re
import time
from collections.abc import Collection
from dataclasses import dataclass
from datetime import UTC, date, datetime
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:  # pydantic passes it; importing it would make pydantic a dependency here
    from pydantic import ValidationInfo

DAY_S = 86_400.0
# The one table of duration units: durations, ages (`ett db prune`) and relative times read it.
DURATION_UNITS_S: dict[str, float] = {
    "ms": 0.001,
    "s": 1.0,
    "m": 60.0,
    "h": 3600.0,
    "d": DAY_S,
    "w": 7 * DAY_S,
}
_DURATION_RE = re.compile(
    r"^\s*(\d+(?:\.\d+)?)\s*("
    + "|".join(sorted(DURATION_UNITS_S, key=len, reverse=True))
    + r")?\s*$"
)
_EPOCH = re.compile(r"^[+-]?\d+(?:\.\d+)?$")
_DATE = re.compile(r"^\d{4}-\d{2}-\d{2}$")
MAX_TEXT = 64
# The window of instants an event may carry, by default (settings ETT_EVENT_TIME_MIN/MAX):
# 2000-01-01 .. 2100-01-01 UTC. Catches milliseconds sent as seconds and zeroed clocks.
MIN_EPOCH_S = 946_684_800.0
MAX_EPOCH_S = 4_102_444_800.0

TIME_HELP = (
    "RFC 3339 time (naive = UTC), a date YYYY-MM-DD (whole UTC day), epoch seconds, "
    "or relative: -12h, -180d, -4w"
)


class TimeFormatError(ValueError):
    """A time that none of the accepted spellings reads."""


@dataclass(frozen=True)
class Instant:
    """A parsed time: epoch seconds, and whether it was given as whole days (a date)."""

    ts: float
    whole_day: bool


def rfc3339(epoch_s: float | None) -> str | None:
    """Epoch seconds to RFC 3339 UTC with millisecond precision ('...Z'); None stays None."""
    if epoch_s is None:
        return None
    return (
        datetime.fromtimestamp(epoch_s, UTC)
        .isoformat(timespec="milliseconds")
        .replace("+00:00", "Z")
    )


def day_start(ts: float) -> float:
    """00:00 UTC of the day holding `ts`."""
    return math.floor(ts / DAY_S) * DAY_S


def date_ts(day: date) -> float:
    """00:00 UTC of a calendar date, as epoch seconds."""
    return datetime(day.year, day.month, day.day, tzinfo=UTC).timestamp()


def ts_date(ts: float) -> date:
    """The UTC calendar date holding `ts`."""
    return datetime.fromtimestamp(ts, UTC).date()


def parse_datetime(text: str, *, require_offset: bool = False) -> float:
    """An RFC 3339 date-time to epoch seconds; naive is UTC unless an offset is required."""
    text = text.strip()
    if len(text) > MAX_TEXT:
        raise TimeFormatError("time string too long")
    try:
        parsed = datetime.fromisoformat(text.replace("z", "Z"))
    except ValueError:
        raise TimeFormatError(
            f"{text!r} is not an RFC 3339 time (e.g. 2026-05-01T12:00:00.250Z)"
        ) from None
    if require_offset and (parsed.tzinfo is None or "T" not in text.upper() and " " not in text):
        raise TimeFormatError(
            f"{text!r} has no UTC offset; add 'Z' or '+HH:MM' (e.g. 2026-05-01T12:00:00Z)"
        )
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=UTC)
    try:
        return parsed.timestamp()
    except (OverflowError, ValueError, OSError):
        raise TimeFormatError(f"{text!r} is out of range") from None


def parse_instant(value: Any, *, now: float | None = None) -> Instant:
    """Any accepted spelling (module docstring) to an Instant; TimeFormatError if none fits."""
    if isinstance(value, bool):
        raise TimeFormatError("expected a time, got a boolean")
    if isinstance(value, datetime):
        aware = value if value.tzinfo else value.replace(tzinfo=UTC)
        return Instant(aware.timestamp(), False)
    if isinstance(value, date):
        return Instant(date_ts(value), True)
    if isinstance(value, int | float):
        if not math.isfinite(value):
            raise TimeFormatError("must be a finite number of epoch seconds")
        return Instant(float(value), False)
    if not isinstance(value, str):
        raise TimeFormatError(f"expected a time, got {type(value).__name__}")
    text = value.strip()
    if len(text) > MAX_TEXT:
        raise TimeFormatError("time string too long")
    current = time.time() if now is None else now
    if text.lower() == "now":
        return Instant(current, False)
    rel = _duration_parts(text[1:].lower()) if text.startswith("-") else None
    if rel is not None and rel[1] is not None:
        amount, unit = rel
        if unit in ("d", "w"):
            if amount != int(amount):
                raise TimeFormatError(f"{text!r}: days and weeks must be whole numbers")
            return Instant(day_start(current) + DAY_S - amount * DURATION_UNITS_S[unit], True)
        return Instant(current - amount * DURATION_UNITS_S[unit], False)
    if _EPOCH.match(text):
        seconds = float(text)
        if not math.isfinite(seconds):
            raise TimeFormatError("must be a finite number of epoch seconds")
        return Instant(seconds, False)
    if _DATE.match(text):
        try:
            return Instant(date_ts(date.fromisoformat(text)), True)
        except ValueError:
            raise TimeFormatError(f"{text!r} is not a calendar date (YYYY-MM-DD)") from None
    try:
        return Instant(parse_datetime(text), False)
    except TimeFormatError:
        raise TimeFormatError(
            f"{text!r} is not an RFC 3339 time, a date, epoch seconds or a relative time "
            "(e.g. 2026-05-01T12:00:00Z, 2026-05-01, -12h, -180d)"
        ) from None


def parse_bound(value: Any, side: Literal["start", "end"], *, now: float | None = None) -> float:
    """A range bound to epoch seconds: a date `end` is inclusive (its next 00:00 UTC)."""
    if side == "end" and isinstance(value, str) and _DATE.match(value.strip()):
        return parse_instant(value, now=now).ts + DAY_S
    if side == "end" and isinstance(value, date) and not isinstance(value, datetime):
        return date_ts(value) + DAY_S
    return parse_instant(value, now=now).ts


def parse_day(value: Any, side: Literal["start", "end"], *, today: date) -> date | None:
    """A bound as an inclusive calendar day (the dashboard's filters); None if unreadable."""
    if not value:
        return None
    now = date_ts(today) + DAY_S / 2
    try:
        ts = parse_bound(value, side, now=now)
    except TimeFormatError:
        return None
    if side == "end":
        # An exclusive end instant: the last day it covers.
        return ts_date(ts - 1e-3) if ts == day_start(ts) else ts_date(ts)
    return ts_date(ts)


def default_range(days: int, *, now: float | None = None) -> tuple[float, float]:
    """The last `days` whole UTC days, today included: [00:00 of the first, 00:00 tomorrow)."""
    current = time.time() if now is None else now
    end = day_start(current) + DAY_S
    return end - days * DAY_S, end


def _utc_day(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%d")


def parse_time(value: Any, info: ValidationInfo | None = None) -> float:
    """A wire time: RFC 3339 with an offset, or Unix epoch seconds, to epoch seconds (float).

    The instant must lie in the time window: `info.context["time_window"]` when validating
    with a context, else MIN_EPOCH_S..MAX_EPOCH_S.
    """
    if isinstance(value, bool):
        raise ValueError("expected an RFC 3339 time with an offset or epoch seconds, got a boolean")
    if isinstance(value, int | float):
        seconds = float(value)
        if not math.isfinite(seconds):
            raise ValueError("must be a finite number of epoch seconds")
    elif isinstance(value, str):
        seconds = parse_datetime(value, require_offset=True)
    else:
        raise ValueError(
            f"expected an RFC 3339 time with an offset or epoch seconds, got {type(value).__name__}"
        )
    context = info.context if info is not None else None
    lo, hi = (context or {}).get("time_window") or (MIN_EPOCH_S, MAX_EPOCH_S)
    if not lo <= seconds <= hi:
        raise ValueError(
            f"{seconds!r} is outside {_utc_day(lo)}..{_utc_day(hi)} in epoch seconds "
            "(settings ETT_EVENT_TIME_MIN, ETT_EVENT_TIME_MAX; milliseconds sent as seconds?)"
        )
    return seconds


# Durations (SLO windows, silences, token lifetimes, ages): a number of seconds or "90s", "30m".
def _duration_parts(text: str) -> tuple[float, str | None] | None:
    """(amount, unit or None) of a duration string, or None when it is not one."""
    match = _DURATION_RE.match(text)
    return (float(match.group(1)), match.group(2)) if match else None


def parse_duration(value: str | float | int, *, units: Collection[str] | None = None) -> float:
    """Seconds from a number or a string such as '90s', '30m', '6h', '7d' (DURATION_UNITS_S).

    With `units`, only a string carrying one of those units is accepted (not a bare number).
    """
    if isinstance(value, int | float) and not isinstance(value, bool) and units is None:
        seconds = float(value)
        if seconds < 0:
            raise ValueError("a duration cannot be negative")
    else:
        parts = _duration_parts(str(value)) if not isinstance(value, bool) else None
        if parts is None or (units is not None and parts[1] not in units):
            hint = (
                "e.g. 90s, 30m, 6h, 7d"
                if units is None
                else f"a number and one of the units {', '.join(units)}"
            )
            raise ValueError(f"not a duration: {str(value)[:40]!r} (use {hint})")
        amount, unit = parts
        seconds = amount * DURATION_UNITS_S[unit] if unit is not None else amount
    if not math.isfinite(seconds):
        raise ValueError("a duration must be a finite number of seconds")
    return seconds


def format_duration(seconds: float) -> str:
    """The largest exact unit for a duration: 7d, 6h, 30m, 90s."""
    for unit in ("d", "h", "m"):
        size = DURATION_UNITS_S[unit]
        if seconds >= size and seconds % size == 0:
            return f"{int(seconds // size)}{unit}"
    return f"{seconds:g}s"
