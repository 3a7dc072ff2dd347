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

from fastapi import HTTPException, Query, Request
from fastapi.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from backend.config import Settings
from backend.timefmt import (
    DAY_S,
    TIME_HELP,
    TimeFormatError,
    day_start,
    default_range,
    parse_bound,
    rfc3339,
)

# The default range of every read and page: the last DEFAULT_DAYS whole UTC days, today
# included (setting ETT_DEFAULT_RANGE_DAYS).
DEFAULT_DAYS = 180
# The one default window of a model's fitted numbers (its ETT% headline, the checkpoint
# interval tau*, the plan): GET /plan/*, GET /models/{model}/checkpoint-advice, and the model and
# Plan pages when their URL names no start. The pages say it beside every headline number.
MODEL_WINDOW_DAYS = 30
BUCKET_DAYS = {"day": 1, "week": 7, "month": 31}
# Query parameters holding times: start/end, <x>_start/<x>_end, <x>_after/<x>_before.
TIME_SUFFIXES = (("start", "end"), ("after", "before"))


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
    default_range_days: int = DEFAULT_DAYS

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
            default_range_days=settings.default_range_days,
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
            + {"day": " or bucket=week", "week": " or bucket=month"}.get(bucket, ""),
        )


def _query_time(raw: str, side: str) -> float | None:
    try:
        return parse_bound(raw, "end" if side in ("end", "before") else "start")
    except (TimeFormatError, OverflowError):
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
        if key in declared and getattr(declared[key].field_info, "deprecated", None):
            _note_deprecated(request, key, declared[key].field_info.description or "")
        for raw in params.getlist(key):
            _check_int(key, raw, b)
            if key in declared and _is_int(declared[key].field_info.annotation):
                _check_int_range(key, raw)
        for lo_name, hi_name in TIME_SUFFIXES:
            for side, suffix in (("start", lo_name), ("end", hi_name)):
                if key == suffix or key.endswith("_" + suffix):
                    value = _query_time(params[key], suffix)
                    if value is not None:
                        check_time(value, key, b)
                        prefix = key[: len(key) - len(suffix)]
                        pairs.setdefault(f"{prefix}|{lo_name}|{hi_name}", {})[side] = value
    bucket = params.get("bucket") or _route_default(declared, "bucket")
    for tag, pair in pairs.items():
        prefix, lo_name, hi_name = tag.split("|")
        hi = pair.get("end", time.time())
        lo = pair.get("start")
        if lo is not None and lo < hi:
            check_range(lo, hi, bucket=bucket, names=(prefix + lo_name, prefix + hi_name), bounds=b)


_ALIAS_OF = "deprecated alias of `"


def alias_help(new: str, description: str) -> str:
    """The description of an old parameter name kept as a deprecated alias of `new`."""
    return f"{_ALIAS_OF}{new}` (removed in the next release): {description}"


def alias_query(new: str, description: str, **kwargs: Any) -> Any:
    """A Query for an old parameter name kept one release as a deprecated alias of `new`."""
    return Query(None, deprecated=True, description=alias_help(new, description), **kwargs)


def _note_deprecated(request: Request, name: str, description: str) -> None:
    new = description.split(_ALIAS_OF, 1)[1].split("`", 1)[0] if _ALIAS_OF in description else ""
    notes = request.scope.setdefault("state", {}).setdefault("ett_deprecated", [])
    notes.append(f"{name} is deprecated" + (f"; use {new}" if new else ""))


def pick_alias(new_name: str, new: Any, old_name: str, old: Any) -> Any:
    """The value of a renamed parameter: the new name's, else its deprecated alias' (422 if both differ)."""
    if new is not None and old is not None and new != old:
        raise HTTPException(
            422, f"{old_name} is a deprecated alias of {new_name}; give only {new_name}"
        )
    return new if new is not None else old


class DeprecationHeaders:
    """ASGI middleware: an answer to a request that used a deprecated parameter says so.

    Headers `Deprecation: true` and `Warning: 299 - "<param> is deprecated; use <new>"`.
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Pass the request on; add the headers to the answer when a route noted a deprecation."""
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_with_headers(message: Message) -> None:
            notes = (scope.get("state") or {}).get("ett_deprecated")
            if message["type"] == "http.response.start" and notes:
                headers = list(message.get("headers", []))
                headers.append((b"deprecation", b"true"))
                for note in notes:
                    headers.append((b"warning", f'299 - "{note}"'.encode()))
                message = {**message, "headers": headers}
            await send(message)

        await self.app(scope, receive, send_with_headers)


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


def parse_time_param(
    value: str | datetime | None, name: str, *, now: float | None = None
) -> float | None:
    """One query time (start/end/..._after/..._before) to epoch seconds; 422 naming it if unreadable.

    A date as an end (`end`, `*_end`, `*_before`) is inclusive: its next 00:00 UTC.
    """
    if value is None or value == "":
        return None
    side = "end" if name == "end" or name.endswith(("_end", "_before")) else "start"
    try:
        return parse_bound(value, side, now=now)
    except (TimeFormatError, OverflowError) as err:
        raise HTTPException(422, f"{name}: {err}") from None


def default_range_days() -> int:
    """The default range's length in whole UTC days (setting ETT_DEFAULT_RANGE_DAYS)."""
    return current_bounds().default_range_days


def start_help(what: str = "range start (inclusive)", default: str | None = None) -> str:
    """The description of a range start: every spelling docs/API.md lists, and its default."""
    return f"{what}: {TIME_HELP}; default {default or 'the first day of the default range'}"


def end_help(
    what: str = "range end (exclusive; a date is inclusive)", default: str | None = None
) -> str:
    """The description of a range end: a date is inclusive, a time exclusive."""
    return f"{what}: {TIME_HELP}; default {default or 'the end of today (00:00 UTC tomorrow)'}"


def start_query(what: str = "range start (inclusive)", default: str | None = None) -> Any:
    """The Query of a range start: every spelling docs/API.md lists."""
    return Query(None, description=start_help(what, default), examples=["-180d"])


def end_query(
    what: str = "range end (exclusive; a date is inclusive)", default: str | None = None
) -> Any:
    """The Query of a range end: a date is inclusive, a time exclusive."""
    return Query(None, description=end_help(what, default))


def time_range(
    start: str | datetime | None,
    end: str | datetime | None,
    *,
    default_days: float | None = None,
    now: float | None = None,
    names: tuple[str, str] = ("start", "end"),
    bucket: str | None = None,
    whole_days: bool = False,
) -> tuple[float, float]:
    """[start, end) in epoch seconds, as docs/API.md defines the words.

    Without either bound: the default range, the last ETT_DEFAULT_RANGE_DAYS whole UTC days,
    today included. A missing end is the end of today (00:00 UTC tomorrow); a missing start is
    `default_days` (default: the setting) before the end. With `whole_days` (answers read from
    the per-day rollups) a bound that is not 00:00 UTC answers 422 instead of being widened.
    The range is checked against the read bounds (422 when over them).
    """
    days = default_days if default_days is not None else default_range_days()
    current = time.time() if now is None else now
    hi = parse_time_param(end, names[1], now=current)
    lo = parse_time_param(start, names[0], now=current)
    if hi is None:
        hi = default_range(1, now=current)[1] if now is None else current
    if lo is None:
        lo = hi - days * DAY_S
    if lo >= hi:
        raise HTTPException(422, f"{names[0]} must be before {names[1]}")
    check_range(lo, hi, bucket=bucket, names=names)
    if whole_days:
        for name, value in zip(names, (lo, hi), strict=True):
            if value != day_start(value):
                raise HTTPException(
                    422,
                    f"{name}: {rfc3339(value)} is not 00:00 UTC; this answer is summed from "
                    "per-UTC-day rollups and is never silently widened: give a date "
                    "(YYYY-MM-DD; a date end is inclusive), a 00:00 UTC time or -Nd/-Nw, or "
                    "read GET /api/v1/jobs for a sub-day range",
                )
    return lo, hi


def submitted_range(
    after: str | None, before: str | None, *, names: tuple[str, str]
) -> tuple[float | None, float | None]:
    """An optional [after, before) range on job submission times; 422 when unreadable or empty."""
    lo = parse_time_param(after, names[0])
    hi = parse_time_param(before, names[1])
    if lo is not None and hi is not None and lo >= hi:
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
    check_rows(rows, filename)
    buf = io.StringIO()
    writer = csv.writer(buf)
    writer.writerow(columns)
    for row in rows:
        writer.writerow([_cell(_dig(row, c), c) for c in columns])
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


def _cell(value: Any, column: str = "") -> Any:
    if value is None:
        return ""
    if isinstance(value, float):
        return round_number(
            value, round_for(column.rsplit(".", 1)[-1]) or round_for(column.split(".", 1)[0])
        )
    return value


TIME_KEYS = frozenset(
    {
        "bucket",
        "start",
        "end",
        "submitted_at",
        "ended_at",
        "ts",
        "training_start",
        "updated_at",
        "submitted_after",
        "submitted_before",
    }
)


def with_rfc3339(value: Any) -> Any:
    """A copy of an answer with every epoch time under a TIME_KEYS key as RFC 3339 UTC.

    Floats are rounded by their unit (`round_for`). Every list in it is held to the row cap
    (422 when over it).
    """
    return _with_rfc3339(value, "answer", None)


def round_for(key: str) -> int | None:
    """Decimals for a field by its unit suffix: _pct/_pp 2, _gpu_h (gpu_hours_lost), _h, _s 3,
    shares 4."""
    if key.endswith(("_pct", "_pp")) or key in ("pct", "pp"):
        return 2
    if key.endswith(("_gpu_h", "_s", "_h")) or key in ("gpu_h", "s", "gpu_hours_lost"):
        return 3
    if "_gpu_h_" in key:
        return 3
    if key == "share" or key.endswith("_share") or key.startswith("share_"):
        return 4
    return None


def rounded(
    value: Any, digits: int | None = None, by_key: dict[str, int | None] | None = None
) -> Any:
    """A copy of an answer with every float rounded: by `by_key` (fields whose name does not
    carry their unit; None: 6 significant digits), else by its key's unit (`round_for`), else
    like its enclosing key, else to 6 significant digits. Times (TIME_KEYS) stay as they are."""
    if isinstance(value, dict):
        out = {}
        for k, v in value.items():
            key = str(k)
            if key in TIME_KEYS:
                out[k] = v
                continue
            if by_key and key in by_key:
                out[k] = rounded(v, by_key[key], by_key)
                continue
            rule = round_for(key)
            out[k] = rounded(v, rule if rule is not None else digits, by_key)
        return out
    if isinstance(value, list | tuple):
        return [rounded(v, digits, by_key) for v in value]
    if isinstance(value, float):
        return round_number(value, digits)
    return value


def round_number(value: float, digits: int | None) -> float:
    """A float rounded to `digits` decimals, or to 6 significant digits without a unit."""
    if digits is not None:
        return round(value, digits)
    if value == 0 or value != value or value in (float("inf"), float("-inf")):
        return value
    return float(f"{value:.6g}")


def _with_rfc3339(value: Any, where: str, digits: int | None) -> Any:
    if isinstance(value, dict):
        out = {}
        for k, v in value.items():
            key = str(k)
            if k in TIME_KEYS and isinstance(v, int | float) and not isinstance(v, bool):
                out[k] = rfc3339(v)
            else:
                rule = round_for(key)
                out[k] = _with_rfc3339(v, key, rule if rule is not None else digits)
        return out
    if isinstance(value, list):
        check_rows(value, where)
        return [_with_rfc3339(v, where, digits) for v in value]
    if isinstance(value, float):
        return round_number(value, digits)
    return value
