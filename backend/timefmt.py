"""Times: RFC 3339 UTC formatting for the read API, and the one parser of wire and API times."""

from __future__ import annotations

import math
from datetime import UTC, datetime
from typing import Any

from pydantic import ValidationInfo

# The window of instants an event may carry, by default (settings ETT_EVENT_TIME_MIN/MAX):
# 2000-01-01 .. 2100-01-01 UTC. Catches milliseconds sent as seconds and zeroed clocks.
MIN_EPOCH_S = 946_684_800.0
MAX_EPOCH_S = 4_102_444_800.0


def rfc3339(epoch_s: float | None) -> str | None:
    """Epoch seconds to RFC 3339 UTC with millisecond precision ('...Z'); None stays None."""
    if epoch_s is None:
        return None
    return (
        datetime.fromtimestamp(epoch_s, UTC)
        .isoformat(timespec="milliseconds")
        .replace("+00:00", "Z")
    )


def _utc_day(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%d")


def parse_time(value: Any, info: ValidationInfo | None = None) -> float:
    """RFC 3339 with an offset, or Unix epoch seconds, to epoch seconds (float).

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
        text = value.strip()
        if len(text) > 64:
            raise ValueError("time string too long")
        try:
            parsed = datetime.fromisoformat(text)
        except ValueError:
            raise ValueError(
                f"{value!r} is not an RFC 3339 time (e.g. 2026-05-01T12:00:00.250Z)"
            ) from None
        if parsed.tzinfo is None or "T" not in text.upper() and " " not in text:
            raise ValueError(
                f"{value!r} has no UTC offset; add 'Z' or '+HH:MM' (e.g. 2026-05-01T12:00:00Z)"
            )
        seconds = parsed.timestamp()
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
