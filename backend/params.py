"""Query-parameter helpers shared by the REST views: time ranges, labels, errors, CSV answers.

Every read is bounded here, once, for every route (`enforce_read_bounds` is a dependency of the
whole API router): times inside the event window, a range no longer than the series-point cap
allows for its bucket, `limit` and `offset` under their caps, and answers under a row cap.
Over a bound the answer is 422 naming the limit and the setting that raises it.
"""

from __future__ import annotations

import contextvars
import csv
import io
import time
import typing
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from fastapi import HTTPException, Request
from fastapi.responses import Response
from pydantic import TypeAdapter, ValidationError

from backend.config import Settings
from backend.fleet.days import DAY_S
from backend.timefmt import rfc3339

DEFAULT_DAYS = 180
BUCKET_DAYS = {"day": 1, "week": 7}


@dataclass(frozen=True)
class ReadBounds:
    """The caps every read obeys (from Settings; see backend/config.py)."""

    max_series_points: int = 1_000
    max_range_days: float = 3_660.0
    max_page_limit: int = 5_000
    max_offset: int = 1_000_000
    max_rows: int = 10_000
    time_min: float = 946_684_800.0
    time_max: float = 4_102_444_800.0

    @classmethod
    def from_settings(cls, settings: Settings) -> ReadBounds:
        """The bounds a Settings object configures."""
        return cls(
            max_series_points=settings.max_series_points,
            max_range_days=settings.max_range_days,
            max_page_limit=settings.max_page_limit,
            max_offset=settings.max_offset,
            max_rows=settings.max_rows,
            time_min=settings.event_time_min,
            time_max=settings.event_time_max,
        )

    def max_days(self, bucket: str | None) -> float:
        """The longest range a read may ask for with this bucket (None: an unbucketed read)."""
        if bucket in BUCKET_DAYS:
            return float(self.max_series_points * BUCKET_DAYS[bucket])
        return self.max_range_days


_DEFAULT_BOUNDS = ReadBounds()
_BOUNDS: contextvars.ContextVar[ReadBounds | None] = contextvars.ContextVar(
    "ett_read_bounds", default=None
)
_DATETIME = TypeAdapter(datetime)


def current_bounds() -> ReadBounds:
    """The bounds of the request being answered (the defaults outside a request)."""
    return _BOUNDS.get() or _DEFAULT_BOUNDS


def _limit_error(what: str, value: Any, limit: Any, setting: str) -> HTTPException:
    return HTTPException(422, f"{what}: {value} is over the limit of {limit} (setting {setting})")


def check_time(value: float, name: str, bounds: ReadBounds | None = None) -> float:
    """A time inside the event window, else 422 naming the window."""
    b = bounds or current_bounds()
    if not b.time_min <= value <= b.time_max:
        raise HTTPException(
            422,
            f"{name}: must be between {rfc3339(b.time_min)} and {rfc3339(b.time_max)} "
            "(settings ETT_EVENT_TIME_MIN, ETT_EVENT_TIME_MAX)",
        )
    return value


def check_range(
    lo: float,
    hi: float,
    *,
    bucket: str | None = None,
    names: tuple[str, str] = ("start", "end"),
    bounds: ReadBounds | None = None,
) -> None:
    """A range inside the event window and no longer than its bucket allows, else 422."""
    b = bounds or current_bounds()
    check_time(lo, names[0], b)
    check_time(hi, names[1], b)
    days = (hi - lo) / DAY_S
    limit = b.max_days(bucket)
    if days > limit:
        setting = "ETT_MAX_SERIES_POINTS" if bucket in BUCKET_DAYS else "ETT_MAX_RANGE_DAYS"
        per = f" with bucket={bucket}" if bucket in BUCKET_DAYS else ""
        raise HTTPException(
            422,
            f"{names[0]}..{names[1]}: a range of {days:.0f} days{per} is over the limit of "
            f"{limit:.0f} days (setting {setting}); ask for a shorter range"
            + (" or bucket=week" if bucket == "day" else ""),
        )


def _query_time(raw: str) -> float | None:
    try:
        return epoch(_DATETIME.validate_python(raw))
    except (ValidationError, ValueError, OverflowError):
        return None  # the view's own validation answers 422 for it


def _query_params(dependant: Any) -> dict[str, Any]:
    """The query parameters a route declares (its dependencies' included), by wire name."""
    out = {p.alias: p for p in getattr(dependant, "query_params", ())}
    for sub in getattr(dependant, "dependencies", ()):
        out.update(_query_params(sub))
    return out


def _path_params(dependant: Any) -> dict[str, Any]:
    out = {p.alias: p for p in getattr(dependant, "path_params", ())}
    for sub in getattr(dependant, "dependencies", ()):
        out.update(_path_params(sub))
    return out


def _is_int(annotation: Any) -> bool:
    if annotation is int:
        return True
    return int in typing.get_args(annotation) and str not in typing.get_args(annotation)


MAX_INT = 2**63 - 1


def _check_int_range(name: str, raw: str) -> None:
    try:
        value = int(raw)
    except ValueError:
        return  # not an integer: the view's validation answers 422
    if not -MAX_INT <= value <= MAX_INT:
        raise HTTPException(422, f"{name}: {raw} is out of range (integers are 64-bit)")


def _route_default(declared: dict[str, Any], name: str) -> str | None:
    param = declared.get(name)
    default = param.field_info.default if param is not None else None
    return default if isinstance(default, str) else None


def _check_int(key: str, raw: str, b: ReadBounds) -> None:
    if key == "limit" or key.endswith("_limit"):
        cap, setting = b.max_page_limit, "ETT_MAX_PAGE_LIMIT"
    elif key == "offset" or key.endswith("_offset"):
        cap, setting = b.max_offset, "ETT_MAX_OFFSET"
    else:
        return
    try:
        value = int(raw)
    except ValueError:
        return  # not an integer: the view's validation answers 422
    if value > cap:
        raise _limit_error(key, value, cap, setting)


async def enforce_read_bounds(request: Request) -> None:
    """Dependency of every API route: refuse absurd times, ranges, limits and offsets (422).

    Query parameters named `start`/`end` (or `<x>_start`/`<x>_end`) are times; a pair shares
    its prefix; an absent end is now. `limit`/`*_limit` and `offset`/`*_offset` are capped.
    No parameter may hold a NUL; integer parameters must fit 64 bits.
    """
    settings = getattr(request.app.state, "settings", None)
    b = ReadBounds.from_settings(settings) if settings is not None else ReadBounds()
    _BOUNDS.set(b)
    params = request.query_params
    route = request.scope.get("route")
    declared = _query_params(getattr(route, "dependant", None))
    for name, raw in [*params.multi_items(), *request.path_params.items()]:
        if isinstance(raw, str) and "\x00" in raw:
            raise HTTPException(
                422, f"{name}: contains a NUL character (%00), which text cannot hold"
            )
    for name, param in _path_params(getattr(route, "dependant", None)).items():
        if _is_int(param.field_info.annotation) and name in request.path_params:
            _check_int_range(name, str(request.path_params[name]))
    pairs: dict[str, dict[str, float]] = {}
    for key in params:
        if declared and key not in declared:
            continue  # the route ignores it
        for raw in params.getlist(key):
            _check_int(key, raw, b)
            if key in declared and _is_int(declared[key].field_info.annotation):
                _check_int_range(key, raw)
        for suffix in ("start", "end"):
            if key == suffix or key.endswith("_" + suffix):
                value = _query_time(params[key])
                if value is not None:
                    check_time(value, key, b)
                    pairs.setdefault(key[: len(key) - len(suffix)], {})[suffix] = value
    bucket = params.get("bucket") or _route_default(declared, "bucket")
    for prefix, pair in pairs.items():
        hi = pair.get("end", time.time())
        lo = pair.get("start")
        if lo is not None and lo < hi:
            check_range(lo, hi, bucket=bucket, names=(prefix + "start", prefix + "end"), bounds=b)


def check_rows(rows: Sequence[Any], what: str = "answer") -> None:
    """Refuse (422) an answer with more rows than the row cap."""
    cap = current_bounds().max_rows
    if len(rows) > cap:
        raise HTTPException(
            422,
            f"{what}: {len(rows)} rows is over the limit of {cap} (setting ETT_MAX_ROWS); "
            "narrow the range or filters, or page with limit/offset",
        )


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
    bucket: str | None = None,
) -> tuple[float, float]:
    """[start, end) in epoch seconds; end defaults to now, start to `default_days` before end.

    The range is checked against the read bounds (422 when over them).
    """
    hi = epoch(end)
    if hi is None:
        hi = time.time() if now is None else now
    lo = epoch(start)
    if lo is None:
        lo = hi - default_days * DAY_S
    if lo >= hi:
        raise HTTPException(422, f"{names[0]} must be before {names[1]}")
    check_range(lo, hi, bucket=bucket, names=names)
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
    check_rows(rows, filename)
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
    """A copy of an answer with every epoch time under a TIME_KEYS key as RFC 3339 UTC.

    Every list in it is held to the row cap (422 when over it).
    """
    return _with_rfc3339(value, "answer")


def _with_rfc3339(value: Any, where: str) -> Any:
    if isinstance(value, dict):
        return {
            k: (
                rfc3339(v)
                if k in TIME_KEYS and isinstance(v, int | float) and not isinstance(v, bool)
                else _with_rfc3339(v, str(k))
            )
            for k, v in value.items()
        }
    if isinstance(value, list):
        check_rows(value, where)
        return [_with_rfc3339(v, where) for v in value]
    return value
