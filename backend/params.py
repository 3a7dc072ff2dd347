"""Query-parameter helpers shared by the REST views: time ranges, labels, errors, CSV answers."""

from __future__ import annotations

import csv
import io
import time
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from typing import Any

from fastapi import HTTPException
from fastapi.responses import Response

from backend.fleet.days import DAY_S
from backend.timefmt import rfc3339

DEFAULT_DAYS = 180


def epoch(value: datetime | None) -> float | None:
    """A datetime (naive ones taken as UTC) to epoch seconds; None stays None."""
    if value is None:
        return None
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    return value.timestamp()


def time_range(
    start: datetime | None,
    end: datetime | None,
    *,
    default_days: float = DEFAULT_DAYS,
    now: float | None = None,
    names: tuple[str, str] = ("start", "end"),
) -> tuple[float, float]:
    """[start, end) in epoch seconds; end defaults to now, start to `default_days` before end."""
    hi = epoch(end)
    if hi is None:
        hi = time.time() if now is None else now
    lo = epoch(start)
    if lo is None:
        lo = hi - default_days * DAY_S
    if lo >= hi:
        raise HTTPException(422, f"{names[0]} must be before {names[1]}")
    return lo, hi


def call_service(fn: Any, **kwargs: Any) -> Any:
    """Call a service function, turning LookupError into 404 and ValueError into 422."""
    try:
        return fn(**kwargs)
    except LookupError as err:
        raise HTTPException(404, str(err.args[0] if err.args else err)) from err
    except ValueError as err:
        raise HTTPException(422, str(err)) from err


def parse_labels(items: Iterable[str] | None) -> dict[str, str]:
    """`key=value` strings to a dict; a malformed one answers 422."""
    out: dict[str, str] = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise HTTPException(422, f"label: expected key=value, got {item!r}")
        out[key.strip()] = value.strip()
    return out


def csv_response(rows: Sequence[dict[str, Any]], columns: Sequence[str], filename: str) -> Response:
    """A text/csv answer with one row per dict (nested values flattened as `a.b` columns)."""
    buf = io.StringIO()
    writer = csv.writer(buf)
    writer.writerow(columns)
    for row in rows:
        writer.writerow([_cell(_dig(row, c)) for c in columns])
    return Response(
        content=buf.getvalue(),
        media_type="text/csv",
        headers={"Content-Disposition": f'attachment; filename="{filename}"'},
    )


def _dig(row: dict[str, Any], column: str) -> Any:
    value: Any = row
    for part in column.split("."):
        value = value.get(part) if isinstance(value, dict) else None
    return value


def _cell(value: Any) -> Any:
    if value is None:
        return ""
    if isinstance(value, float):
        return round(value, 6)
    return value


TIME_KEYS = frozenset(
    {"bucket", "start", "end", "submitted_at", "ended_at", "ts", "training_start", "updated_at"}
)


def with_rfc3339(value: Any) -> Any:
    """A copy of an answer with every epoch time under a TIME_KEYS key as RFC 3339 UTC."""
    if isinstance(value, dict):
        return {
            k: (
                rfc3339(v)
                if k in TIME_KEYS and isinstance(v, int | float) and not isinstance(v, bool)
                else with_rfc3339(v)
            )
            for k, v in value.items()
        }
    if isinstance(value, list):
        return [with_rfc3339(v) for v in value]
    return value
