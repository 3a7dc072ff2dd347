"""Wire protocol v1: validation of one event into its normalized form (times as epoch seconds)."""

from __future__ import annotations

import math
import re
from typing import Annotated, Any, Literal, NotRequired, Union

from pydantic import (
    BeforeValidator,
    ConfigDict,
    Field,
    TypeAdapter,
    ValidationError,
    WithJsonSchema,
)
from typing_extensions import TypedDict

from backend.ett.catalogue import (
    CATALOGUE,
    CUSTOM_PREFIX,
    FAILURE_CAUSES,
    FAILURE_DOMAINS,
    FAILURE_KINDS,
    JOB_STATUSES,
    MAX_HOSTS,
)
from backend.text import text_problem
from backend.timefmt import MAX_EPOCH_S, MIN_EPOCH_S, parse_time

# First component of a phase name; sub-stages (`trainer_init.process_group`) share their root's rules.
PHASE_ROOTS = (
    *dict.fromkeys(entry.phase.split(".", 1)[0] for entry in CATALOGUE),
    CUSTOM_PREFIX.rstrip("."),
)
TIME_FIELDS = ("ts", "start", "end", "blocking_end", "committed")
# Deepest nesting of objects/arrays inside one event (a job's config, its labels).
MAX_DEPTH = 32
# Integers must fit a signed 64-bit column and a float without overflow.
MAX_INT = 2**63 - 1


def _check_phase(value: Any) -> Any:
    if not isinstance(value, str):
        return value
    root = value.split(".", 1)[0]
    if root not in PHASE_ROOTS:
        raise ValueError(
            f"unknown phase {value!r}; use a catalogue phase ({', '.join(PHASE_ROOTS[:-1])}, "
            "their dotted sub-stages) or custom.<name>"
        )
    if root == "custom" and value == "custom":
        raise ValueError("custom phases are named custom.<name>")
    return value


Time = Annotated[
    float,
    BeforeValidator(parse_time),
    WithJsonSchema(
        {
            "anyOf": [
                {"type": "number", "minimum": 0, "maximum": MAX_EPOCH_S},
                {"type": "string", "format": "date-time", "maxLength": 64},
            ],
            "description": "RFC 3339 with an offset (2026-05-01T12:00:00.250Z) or Unix epoch "
            "seconds",
        }
    ),
]
EventId = Annotated[str, Field(strict=True, min_length=1, max_length=64)]
SpanId = Annotated[str, Field(strict=True, min_length=1, max_length=64)]
JobId = Annotated[str, Field(strict=True, min_length=1, max_length=128)]
AttemptNo = Annotated[int, Field(strict=True, ge=0, le=1_000_000)]
Count = Annotated[int, Field(strict=True, ge=0)]
Gpus = Annotated[int, Field(strict=True, ge=1, le=10_000_000)]
Cursor = Annotated[float, Field(strict=True, ge=0, allow_inf_nan=False)]
PhaseName = Annotated[
    str,
    Field(strict=True, min_length=1, max_length=128, pattern=r"^[a-z][a-z0-9_]*(\.[a-z0-9_]+)*$"),
    BeforeValidator(_check_phase),
]
Labels = Annotated[
    dict[
        Annotated[str, Field(strict=True, min_length=1, max_length=128)],
        Annotated[str, Field(strict=True, max_length=1024)],
    ],
    Field(max_length=64),
]
Model = Annotated[str, Field(strict=True, min_length=1, max_length=256)]
HostName = Annotated[str, Field(strict=True, min_length=1, max_length=256)]
# Who a failure or attempt_ended speaks for: the attempt it names (the default), or the whole
# allocation that attempt began (a scheduler that does not see in-place restarts inside it).
Scope = Literal["attempt", "allocation"]

_forbid = ConfigDict(extra="forbid")


class _JobConfig(TypedDict):
    __pydantic_config__ = ConfigDict(extra="allow")  # type: ignore[misc]
    checkpoint_interval_s: NotRequired[
        Annotated[float, Field(strict=True, gt=0, allow_inf_nan=False)]
    ]


class _Event(TypedDict):
    __pydantic_config__ = _forbid  # type: ignore[misc]
    event_id: EventId
    job_id: JobId


class _AttemptEvent(_Event):
    attempt: AttemptNo


class JobSubmitted(_Event):
    type: Literal["job_submitted"]
    attempt: NotRequired[AttemptNo | None]
    ts: Time
    model: Model
    gpus: Gpus
    labels: NotRequired[Labels]
    config: NotRequired[_JobConfig]


class AttemptStarted(_AttemptEvent):
    type: Literal["attempt_started"]
    ts: Time
    gpus: NotRequired[Gpus]
    host: NotRequired[Annotated[str, Field(strict=True, max_length=256)]]
    # Every host of the attempt (docs/PROTOCOL.md "Hosts"): at most MAX_HOSTS; a sender with more
    # sends the first MAX_HOSTS in sorted order and the full count in hosts_total.
    hosts: NotRequired[Annotated[list[HostName], Field(max_length=MAX_HOSTS)]]
    hosts_total: NotRequired[Annotated[int, Field(strict=True, ge=1, le=10_000_000)]]
    # An in-place restart: the previous attempt's capacity was never released (torchrun).
    in_place: NotRequired[Annotated[bool, Field(strict=True)]]


class Phase(_AttemptEvent):
    type: Literal["phase"]
    phase: PhaseName
    start: Time
    end: Time
    span_id: NotRequired[SpanId]


class PhaseStarted(_AttemptEvent):
    type: Literal["phase_started"]
    phase: PhaseName
    start: Time
    span_id: NotRequired[SpanId]


class Progress(_AttemptEvent):
    type: Literal["progress"]
    start: Time
    end: Time
    cursor_start: Cursor
    cursor_end: Cursor
    steps: Count


class Checkpoint(_AttemptEvent):
    type: Literal["checkpoint"]
    start: Time
    blocking_end: Time
    committed: NotRequired[Time]
    cursor: NotRequired[Cursor]
    bytes: NotRequired[Count]
    ok: NotRequired[Annotated[bool, Field(strict=True)]]


class Failure(_AttemptEvent):
    type: Literal["failure"]
    ts: Time
    kind: Literal[FAILURE_KINDS]  # the catalogue's kinds
    message: NotRequired[Annotated[str, Field(strict=True, max_length=4096)]]
    scope: NotRequired[Scope]
    # docs/ACCOUNTING.md "Failure causes": optional; a cause alone implies its domain and plan.
    cause: NotRequired[Literal[FAILURE_CAUSES]]
    domain: NotRequired[Literal[FAILURE_DOMAINS]]
    planned: NotRequired[Annotated[bool, Field(strict=True)]]
    rank: NotRequired[Annotated[int, Field(strict=True, ge=0, le=1_000_000)]]


class Heartbeat(_AttemptEvent):
    type: Literal["heartbeat"]
    ts: Time
    # The host the sender runs on: each host's first process names it once per attempt.
    host: NotRequired[HostName]


class AttemptEnded(_AttemptEvent):
    type: Literal["attempt_ended"]
    ts: Time
    reason: Literal["completed", "failure", "preempted", "cancelled"]
    scope: NotRequired[Scope]


class JobEnded(_Event):
    type: Literal["job_ended"]
    attempt: NotRequired[AttemptNo | None]
    ts: Time
    status: Literal[JOB_STATUSES]  # type: ignore[valid-type]


EVENT_TYPES: dict[str, type] = {
    "job_submitted": JobSubmitted,
    "attempt_started": AttemptStarted,
    "phase": Phase,
    "phase_started": PhaseStarted,
    "progress": Progress,
    "checkpoint": Checkpoint,
    "failure": Failure,
    "heartbeat": Heartbeat,
    "attempt_ended": AttemptEnded,
    "job_ended": JobEnded,
}
_ADAPTERS = {name: TypeAdapter(cls) for name, cls in EVENT_TYPES.items()}
# The union, discriminated by `type`: the published JSON Schema. Validation itself goes through
# the per-type adapters above (one dict lookup, and errors that name the event's own fields).
Event = Annotated[Union[tuple(EVENT_TYPES.values())], Field(discriminator="type")]  # noqa: UP007
_EVENT_ADAPTER: TypeAdapter[Any] = TypeAdapter(Event)
JSON_SCHEMA_DIALECT = "https://json-schema.org/draft/2020-12/schema"
# (earlier field, later field) pairs that must not run backwards inside one event.
_ORDERED = {
    "phase": ("start", "end"),
    "progress": ("start", "end"),
    "checkpoint": ("start", "blocking_end"),
}


class EventError(ValueError):
    """An event failed validation; str() is '<field>: <why>'."""


def _describe(err: ValidationError) -> str:
    parts = []
    for e in err.errors(include_url=False)[:5]:
        loc = ".".join(str(p) for p in e["loc"]) or "event"
        msg = e["msg"]
        if e["type"] == "extra_forbidden":
            msg = "unknown field for this event type"
        elif msg.startswith("Value error, "):
            msg = msg[len("Value error, ") :]
        parts.append(f"{loc}: {msg}")
    return "; ".join(parts)


def _text_error(text: str) -> str | None:
    if text.isascii():  # the common case: only a NUL can be wrong
        return text_problem(text) if "\x00" in text else None
    return text_problem(text)


def _value_error(value: Any, path: str, depth: int) -> str | None:
    """The first value no database or computation can take, as '<field>: <why>'; else None."""
    kind = type(value)
    if kind is str:
        why = _text_error(value)
        return f"{path}: {why}" if why else None
    if kind is float:
        return None if math.isfinite(value) else f"{path}: {value} is not a finite number"
    if kind is int:
        return None if -MAX_INT <= value <= MAX_INT else f"{path}: integer out of 64-bit range"
    if kind is bool or value is None:
        return None
    if kind is dict or kind is list:
        if depth >= MAX_DEPTH:
            return f"{path}: nested deeper than {MAX_DEPTH} levels"
        if kind is dict:
            for key, item in value.items():
                if type(key) is str and (why := _text_error(key)):
                    return f"{path}: a key {why}"
                found = _value_error(item, f"{path}.{key}", depth + 1)
                if found:
                    return found
        else:
            for i, item in enumerate(value):
                found = _value_error(item, f"{path}[{i}]", depth + 1)
                if found:
                    return found
    return None


def check_values(raw: dict[str, Any]) -> None:
    """Refuse text with NUL or lone surrogates, non-finite or huge numbers, deep nesting."""
    for key, value in raw.items():
        if isinstance(key, str) and (why := _text_error(key)):
            raise EventError(f"event: a field name {why}")
        kind = type(value)
        # The common case first: a plain ASCII string, a finite float, an int in range.
        if kind is str and value.isascii() and "\x00" not in value:
            continue
        if kind is float and math.isfinite(value):
            continue
        if kind is int and -MAX_INT <= value <= MAX_INT:
            continue
        found = _value_error(value, str(key), 1)
        if found:
            raise EventError(found)


# The hot path: an agent's progress windows, phases, checkpoints and heartbeats, written plainly
# (ASCII text, epoch-second times, no extra field), are checked and normalized here without
# pydantic. Any doubt gives None and the full path runs, which accepts the same events with
# the same result (tests/ingest/test_fast_validation.py) and alone words the errors.
_ID, _JOB, _ATTEMPT, _TIME, _CURSOR, _COUNT, _PHASE, _HOST, _FLAG = range(9)
_TEXT_LIMITS = {_ID: 64, _JOB: 128, _HOST: 256}
_FAST_FIELDS: dict[str, tuple[tuple[str, int, bool], ...]] = {}
for _etype, _fields in {
    "progress": (
        ("start", _TIME, True),
        ("end", _TIME, True),
        ("cursor_start", _CURSOR, True),
        ("cursor_end", _CURSOR, True),
        ("steps", _COUNT, True),
    ),
    "heartbeat": (("ts", _TIME, True), ("host", _HOST, False)),
    "phase": (
        ("phase", _PHASE, True),
        ("start", _TIME, True),
        ("end", _TIME, True),
        ("span_id", _ID, False),
    ),
    "phase_started": (("phase", _PHASE, True), ("start", _TIME, True), ("span_id", _ID, False)),
    "checkpoint": (
        ("start", _TIME, True),
        ("blocking_end", _TIME, True),
        ("committed", _TIME, False),
        ("cursor", _CURSOR, False),
        ("bytes", _COUNT, False),
        ("ok", _FLAG, False),
    ),
}.items():
    # The order of the TypedDicts (pydantic's output order): the key, attempt, type, the rest.
    _FAST_FIELDS[_etype] = (
        ("event_id", _ID, True),
        ("job_id", _JOB, True),
        ("attempt", _ATTEMPT, True),
        *_fields,
    )
_PHASE_PATTERN = re.compile(r"[a-z][a-z0-9_]*(?:\.[a-z0-9_]+)*")
# Phase names seen valid (a fleet uses a few dozen); bounded so that no sender can grow it.
_PHASES_OK: set[str] = set()
_MAX_PHASES_OK = 4_096


def _phase_ok(name: str) -> bool:
    if name in _PHASES_OK:
        return True
    if not (name.isascii() and len(name) <= 128 and _PHASE_PATTERN.fullmatch(name)):
        return False
    root = name.split(".", 1)[0]
    if root not in PHASE_ROOTS or name == "custom":
        return False
    if len(_PHASES_OK) < _MAX_PHASES_OK:
        _PHASES_OK.add(name)
    return True


def _fast_event(raw: dict[str, Any], lo: float, hi: float) -> dict[str, Any] | None:
    """The normalized form of a plainly written hot-path event, or None (then the full path)."""
    etype = raw.get("type")
    fields = _FAST_FIELDS.get(etype) if type(etype) is str else None
    if fields is None:
        return None
    out: dict[str, Any] = {}
    seen = 1  # `type`
    for name, kind, needed in fields:
        if name not in raw:
            if needed:
                return None
            continue
        value = raw[name]
        vtype = type(value)
        if kind == _TIME:
            if not ((vtype is float or vtype is int) and lo <= value <= hi):
                return None
            value = float(value)
        elif kind == _CURSOR:
            if vtype is float:
                if not 0.0 <= value < math.inf:
                    return None
            elif vtype is int and 0 <= value <= MAX_INT:
                value = float(value)
            else:
                return None
        elif kind == _COUNT:
            if not (vtype is int and 0 <= value <= MAX_INT):
                return None
        elif kind == _ATTEMPT:
            if not (vtype is int and 0 <= value <= 1_000_000):
                return None
        elif kind == _PHASE:
            if not (vtype is str and value and _phase_ok(value)):
                return None
        elif kind == _FLAG:
            if vtype is not bool:
                return None
        elif not (
            vtype is str
            and 0 < len(value) <= _TEXT_LIMITS[kind]
            and value.isascii()
            and "\x00" not in value
        ):
            return None
        out[name] = value
        seen += 1
        if name == "attempt":
            out["type"] = etype
    return out if seen == len(raw) else None


def validate_event(raw: Any, *, time_window: tuple[float, float] | None = None) -> dict[str, Any]:
    """Validate one wire event and return its normalized form, or raise EventError.

    `time_window` (epoch seconds, inclusive) overrides the default window for its times.
    """
    lo, hi = time_window or (MIN_EPOCH_S, MAX_EPOCH_S)
    event = _fast_event(raw, lo, hi) if type(raw) is dict else None
    if event is None:
        event = _full_event(raw, time_window)
    etype = event["type"]
    order = _ORDERED.get(etype)
    if order and event[order[1]] < event[order[0]]:
        raise EventError(f"{order[1]}: is before {order[0]}")
    if etype == "checkpoint":
        committed = event.get("committed")
        if committed is not None and committed < event["blocking_end"]:
            raise EventError("committed: is before blocking_end")
        event.setdefault("ok", True)
    if etype in ("job_submitted", "job_ended"):
        event["attempt"] = None
    return event


def _full_event(raw: Any, time_window: tuple[float, float] | None) -> dict[str, Any]:
    """Any event through pydantic: its normalized form, or EventError saying what is wrong."""
    if not isinstance(raw, dict):
        raise EventError(f"event: expected a JSON object, got {type(raw).__name__}")
    check_values(raw)
    etype = raw.get("type")
    adapter = _ADAPTERS.get(etype) if isinstance(etype, str) else None
    if adapter is None:
        if "type" not in raw:
            raise EventError("type: field required")
        raise EventError(f"type: {etype!r} is not one of {', '.join(EVENT_TYPES)}")
    try:
        context = {"time_window": time_window} if time_window else None
        return adapter.validate_python(raw, context=context)
    except ValidationError as err:
        raise EventError(_describe(err)) from None


def event_json_schema() -> dict[str, Any]:
    """The JSON Schema (2020-12) of one wire event, derived from the TypedDicts above."""
    schema = _EVENT_ADAPTER.json_schema()
    return {
        "$schema": JSON_SCHEMA_DIALECT,
        "title": "ETT wire protocol v1 event",
        "description": 'One event of POST /api/v1/events; the body is {"events": [event, ...]} '
        "with at most 10,000 events and 5 MiB. See docs/PROTOCOL.md.",
        **schema,
    }


def _inline(node: Any, defs: dict[str, Any]) -> Any:
    if isinstance(node, dict):
        ref = node.get("$ref")
        if isinstance(ref, str) and ref.startswith("#/$defs/"):
            return _inline(defs[ref.removeprefix("#/$defs/")], defs)
        return {k: _inline(v, defs) for k, v in node.items() if k != "mapping"}
    if isinstance(node, list):
        return [_inline(v, defs) for v in node]
    return node


def batch_openapi_schema(max_events: int = 10_000) -> dict[str, Any]:
    """The request body schema of POST /api/v1/events with every event type inlined (no $refs)."""
    schema = _EVENT_ADAPTER.json_schema()
    defs = schema.pop("$defs", {})
    return {
        "type": "object",
        "required": ["events"],
        "additionalProperties": False,
        "properties": {
            "events": {
                "type": "array",
                "maxItems": max_events,
                "items": _inline(schema, defs),
                "description": "Wire protocol v1 events, one of the types below by `type` "
                "(docs/PROTOCOL.md).",
            }
        },
    }
