"""OTLP/HTTP traces: decode an ExportTraceServiceRequest and map its spans to wire events.

Decoding uses the official `opentelemetry-proto` messages (binary protobuf, or OTLP's JSON
encoding through protobuf's json_format after the hex trace and span ids are turned into the
base64 the standard JSON mapping expects). Two mappings, documented in docs/OTLP.md:

- this project's convention: `ett.*` resource/span attributes name the job, attempt and rank;
  span names are catalogue phases or `ett.attempt`, `ett.progress`, `ett.checkpoint`, ...;
- NVIDIA OneLogger's standard spans (nv-one-logger-training-telemetry with nv-one-logger-otel).

Event ids are derived from the trace id, span id and what the event is, so a resent export
stores nothing twice. A span that maps to nothing is returned as rejected with its reason.
"""

from __future__ import annotations

import base64
import hashlib
import json
import math
import re
import zlib
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from google.protobuf import json_format
from google.protobuf.message import DecodeError
from google.rpc import status_pb2
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

from ingest.schema import PHASE_ROOTS

PROTOBUF = "application/x-protobuf"
JSON = "application/json"
STATUS_ERROR = 2  # Span.Status.StatusCode.STATUS_CODE_ERROR

# The attribute convention (span attributes win over resource attributes).
JOB_ID = "ett.job.id"
MODEL = "ett.model"
GPUS = "ett.gpus"
ATTEMPT = "ett.attempt"
RANK = "ett.rank"
JOB_OWNER = "ett.job.owner"
LABEL_PREFIX = "ett.label."

# OneLogger's standard spans (nv_one_logger/training_telemetry/api/spans.py) and the phase each
# one lands in; the checkpoint saves and the application span are mapped by code below.
ONELOGGER_PHASES: dict[str, str] = {
    "distributed_code_initialization": "trainer_init.process_group",
    "model_initialization": "trainer_init.train_module",
    "data_loader_initialization": "trainer_init.preprocessing",
    "optimizer_initialization": "trainer_init.optimizer",
    "checkpoint_load": "checkpoint_restore",
}
ONELOGGER_CHECKPOINTS = ("checkpoint_save_sync", "checkpoint_save_async")
# Spans that carry nothing the accounting uses beyond what the mapped ones say: accepted, no event.
ONELOGGER_CONSUMED = frozenset(
    {
        "training_loop",
        "validation_loop",
        "testing_loop",
        "checkpoint_save_finalization",
        "training_single_iteration",
        "validation_single_iteration",
        "TESTING_SINGLE_ITERATION",
        "data_loading",
        "model_forward",
        "zero_grad",
        "model_backward",
        "optimizer_update",
    }
)
ONELOGGER_METRICS = "training_metrics_update"
_ONELOGGER_EVENT_SPAN = re.compile(r"^[a-z_]+_(?:event_)?for_[A-Za-z_]+$")
_PHASE_NAME = re.compile(r"^[a-z][a-z0-9_]*(\.[a-z0-9_]+)*$")
_ID_FIELDS = frozenset({"traceId", "spanId", "parentSpanId"})


class OtlpError(ValueError):
    """The request cannot be decoded (answered 400 with a Status)."""


def decompress(body: bytes, encoding: str, limit: int) -> bytes:
    """The body after Content-Encoding (identity or gzip), refused past `limit` bytes."""
    encoding = encoding.strip().lower()
    if encoding in ("", "identity"):
        return body
    if encoding != "gzip":
        raise OtlpError(f"Content-Encoding {encoding!r} is not supported; use gzip or none")
    inflater = zlib.decompressobj(wbits=16 + zlib.MAX_WBITS)
    try:
        out = inflater.decompress(body, limit + 1)
    except zlib.error as err:
        raise OtlpError(f"body is not valid gzip: {err}") from None
    if len(out) > limit:
        raise OverflowError(f"body is over the {limit} byte limit once decompressed")
    if not inflater.eof:
        raise OtlpError("gzip body is truncated")
    return out


def _hex_to_b64(node: Any, path: str = "") -> Any:
    """OTLP JSON: trace and span ids are hex; protobuf's JSON mapping reads bytes as base64."""
    if isinstance(node, dict):
        out = {}
        for key, value in node.items():
            if key in _ID_FIELDS and isinstance(value, str):
                try:
                    raw = bytes.fromhex(value) if value else b""
                except ValueError:
                    raise OtlpError(
                        f"{path}{key}: {value[:40]!r} is not a hex-encoded id (OTLP JSON ids are hex)"
                    ) from None
                out[key] = base64.b64encode(raw).decode()
            else:
                out[key] = _hex_to_b64(value, f"{path}{key}.")
        return out
    if isinstance(node, list):
        return [_hex_to_b64(v, path) for v in node]
    return node


def decode(body: bytes, content_type: str) -> ExportTraceServiceRequest:
    """An ExportTraceServiceRequest from a protobuf or OTLP/JSON body, or OtlpError."""
    message = ExportTraceServiceRequest()
    if content_type == PROTOBUF:
        try:
            message.ParseFromString(body)
        except (DecodeError, RecursionError, ValueError) as err:
            raise OtlpError(f"body is not a protobuf ExportTraceServiceRequest: {err}") from None
        return message
    try:
        doc = json.loads(body)
    except (ValueError, RecursionError) as err:
        raise OtlpError(f"body is not valid JSON: {err}") from None
    if not isinstance(doc, dict):
        raise OtlpError("body must be a JSON object (an ExportTraceServiceRequest)")
    try:
        json_format.ParseDict(_hex_to_b64(doc), message, ignore_unknown_fields=True)
    except (json_format.ParseError, RecursionError, ValueError, TypeError) as err:
        raise OtlpError(f"body is not an OTLP/JSON ExportTraceServiceRequest: {err}") from None
    return message


def encode_response(rejected: int, message: str, content_type: str) -> bytes:
    """ExportTraceServiceResponse; partial_success is set only when something was rejected or said."""
    answer = ExportTraceServiceResponse()
    if rejected or message:
        answer.partial_success.rejected_spans = rejected
        answer.partial_success.error_message = message
    if content_type == PROTOBUF:
        return answer.SerializeToString()
    return json_format.MessageToJson(answer, indent=None).encode()


def encode_status(code: int, message: str, content_type: str) -> bytes:
    """A google.rpc.Status body for a 4xx/5xx answer, in the request's encoding."""
    status = status_pb2.Status(code=code, message=message)
    if content_type == PROTOBUF:
        return status.SerializeToString()
    return json_format.MessageToJson(status, indent=None).encode()


# ---- attribute access -------------------------------------------------------------------------


def _value(any_value: Any) -> Any:
    kind = any_value.WhichOneof("value")
    if kind is None:
        return None
    if kind == "array_value":
        return [_value(v) for v in any_value.array_value.values]
    if kind == "kvlist_value":
        return {kv.key: _value(kv.value) for kv in any_value.kvlist_value.values}
    if kind == "bytes_value":
        return any_value.bytes_value.hex()
    return getattr(any_value, kind)


def attributes(key_values: Iterable[Any]) -> dict[str, Any]:
    """OTLP KeyValue list as a dict (later keys win)."""
    return {kv.key: _value(kv.value) for kv in key_values}


def _as_int(value: Any) -> int | None:
    """An integer from an int, an integral float or a decimal string (resource env values)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and math.isfinite(value) and value.is_integer():
        return int(value)
    # ASCII digits only: str.isdigit also takes "¹" (which int() refuses) and "٣" (read as 3).
    if isinstance(value, str) and value.isascii() and value.strip().lstrip("-").isdigit():
        return int(value.strip())
    return None


def _as_float(value: Any) -> float | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        f = float(value)
        return f if math.isfinite(f) else None
    if isinstance(value, str):
        try:
            f = float(value)
        except ValueError:
            return None
        return f if math.isfinite(f) else None
    return None


def _ns(value: int) -> float:
    return value / 1e9


# ---- mapping ----------------------------------------------------------------------------------


@dataclass
class SpanRef:
    """What the mapping knows of one span: enough to name its events and describe it."""

    index: int
    job_id: str | None
    attempt: int
    rank: int
    trace: str
    span: str
    parent: str
    name: str
    start: float
    end: float
    status_error: bool
    status_message: str
    attrs: dict[str, Any]
    resource: dict[str, Any]

    def describe(self) -> dict[str, Any]:
        """A JSON-able description, kept with a rejected span."""
        return {
            "otlp_span": self.name,
            "trace_id": self.trace,
            "span_id": self.span,
            "job_id": self.job_id,
            "start": self.start,
            "end": self.end,
            "attributes": {k: v for k, v in list(self.attrs.items())[:64]},
        }


@dataclass
class Point:
    """One OneLogger training_metrics_update: the loop had completed `cursor` iterations at `t`."""

    span: SpanRef
    series: str
    t: float
    cursor: int
    every: int
    first_t: float
    first_cursor: int


@dataclass
class Mapped:
    """The events of one export, which span each came from, and the spans that map to nothing."""

    spans: int = 0
    events: list[dict[str, Any]] = field(default_factory=list)
    sources: list[int] = field(default_factory=list)
    rejected: list[tuple[SpanRef, str]] = field(default_factory=list)
    points: list[Point] = field(default_factory=list)

    def add(self, ref: SpanRef, event: dict[str, Any]) -> None:
        """Queue one wire event made from `ref`."""
        self.events.append({k: v for k, v in event.items() if v is not None})
        self.sources.append(ref.index)


def _eid(ref: SpanRef, what: str) -> str:
    # 48 hex of the span's identity plus what the event is: deterministic, under 64 characters.
    return f"o{ref.trace[:32]}{ref.span[:16]}.{what}"


def _series_id(trace: str, span: str) -> str:
    return hashlib.sha1(f"{trace}/{span}".encode()).hexdigest()[:32]


def point_marker_id(series: str, cursor: int) -> str:
    """The heartbeat that stores one progress point (so a later export can close the window)."""
    return f"o{series}.h{cursor}"


def window_id(series: str, cursor: int) -> str:
    """The progress window that ends at the point with this cursor."""
    return f"o{series}.w{cursor}"


def _is_phase(name: str) -> bool:
    if not _PHASE_NAME.match(name):
        return False
    root = name.split(".", 1)[0]
    return root in PHASE_ROOTS and name != "custom"


def _labels(attrs: dict[str, Any]) -> dict[str, str] | None:
    labels = {
        k[len(LABEL_PREFIX) :]: str(v)
        for k, v in attrs.items()
        if k.startswith(LABEL_PREFIX) and v is not None
    }
    return labels or None


def _model(attrs: dict[str, Any]) -> str | None:
    model = attrs.get(MODEL)
    if isinstance(model, str) and model:
        return model
    service = attrs.get("service.name")
    if isinstance(service, str) and service and not service.startswith("unknown_service"):
        return service
    return None


def _base(ref: SpanRef, etype: str, what: str) -> dict[str, Any]:
    event: dict[str, Any] = {"event_id": _eid(ref, what), "job_id": ref.job_id, "type": etype}
    if etype not in ("job_submitted", "job_ended"):
        event["attempt"] = ref.attempt
    return event


def _failure_message(ref: SpanRef, events: list[tuple[str, float, dict[str, Any]]]) -> str | None:
    for name, _t, attrs in events:
        if name == "exception":
            text = f"{attrs.get('exception.type', '')}: {attrs.get('exception.message', '')}"
            trace = attrs.get("exception.stacktrace")
            return (str(trace) if trace else text)[-4000:]
    return ref.status_message[-4000:] or None


def map_request(request: ExportTraceServiceRequest) -> Mapped:
    """Map every span of an export to wire events (docs/OTLP.md), without any database read."""
    out = Mapped()
    index = 0
    for resource_spans in request.resource_spans:
        resource = attributes(resource_spans.resource.attributes)
        for scope_spans in resource_spans.scope_spans:
            for span in scope_spans.spans:
                attrs = {**resource, **attributes(span.attributes)}
                job_id = attrs.get(JOB_ID)
                ref = SpanRef(
                    index=index,
                    job_id=job_id if isinstance(job_id, str) and job_id else None,
                    attempt=_as_int(attrs.get(ATTEMPT)) or 0,
                    rank=_as_int(attrs.get(RANK)) or 0,
                    trace=span.trace_id.hex(),
                    span=span.span_id.hex(),
                    parent=span.parent_span_id.hex(),
                    name=span.name,
                    start=_ns(span.start_time_unix_nano),
                    end=_ns(span.end_time_unix_nano),
                    status_error=span.status.code == STATUS_ERROR,
                    status_message=span.status.message,
                    attrs=attrs,
                    resource=resource,
                )
                index += 1
                events = [
                    (e.name, _ns(e.time_unix_nano), attributes(e.attributes)) for e in span.events
                ]
                why = _map_span(ref, events, out)
                if why is not None:
                    out.rejected.append((ref, why))
    out.spans = index
    return out


def _map_span(
    ref: SpanRef, events: list[tuple[str, float, dict[str, Any]]], out: Mapped
) -> str | None:
    """Queue the span's events; the reason it maps to nothing, else None."""
    name = ref.name
    if ref.job_id is None:
        return (
            f"span {name!r} names no job: set the resource attribute {JOB_ID} "
            "(e.g. OTEL_RESOURCE_ATTRIBUTES=ett.job.id=...; docs/OTLP.md)"
        )
    if ref.start <= 0 or ref.end < ref.start:
        return f"span {name!r} has no valid start and end time"
    for ev_name, t, ev_attrs in events:
        if ev_name == "ett.progress":
            _progress_event(ref, t, ev_attrs, out)
        elif ev_name == "ett.failure":
            _failure(ref, t, ev_attrs, out, what=f"f{int(t * 1e6) % 10**12}")
        elif ev_name == ONELOGGER_METRICS and name == "training_loop":
            _metrics_point(ref, ref.span, ev_attrs, out)
    if name.startswith("ett."):
        return _map_convention(ref, events, out)
    if name in ONELOGGER_PHASES:
        out.add(ref, {**_base(ref, "phase", "ph"), "phase": ONELOGGER_PHASES[name],
                      "start": ref.start, "end": ref.end, "span_id": ref.span})  # fmt: skip
        return None
    if name in ONELOGGER_CHECKPOINTS:
        _onelogger_checkpoint(ref, out)
        return None
    if name == "application":
        _attempt_span(ref, events, out, owner_default="trainer")
        return None
    if name in ONELOGGER_CONSUMED:
        return None
    if name == f"{ONELOGGER_METRICS}_event_for_training_loop":
        _metrics_point(ref, ref.parent, ref.attrs, out)
        return None
    if _ONELOGGER_EVENT_SPAN.match(name) and ref.end == ref.start:
        return None  # OneLogger's zero-length copy of a span event (its OTel exporter's workaround)
    if _is_phase(name):
        out.add(ref, {**_base(ref, "phase", "ph"), "phase": name, "start": ref.start,
                      "end": ref.end, "span_id": ref.span})  # fmt: skip
        return None
    return (
        f"span {name!r} is neither a catalogue phase (e.g. trainer_init.process_group, "
        "custom.<name>), an ett.* span nor a OneLogger standard span; see docs/OTLP.md"
    )


def _map_convention(
    ref: SpanRef, events: list[tuple[str, float, dict[str, Any]]], out: Mapped
) -> str | None:
    name, a = ref.name, ref.attrs
    if name == "ett.attempt":
        _attempt_span(ref, events, out, owner_default="scheduler")
    elif name == "ett.progress":
        _progress(ref, ref.start, ref.end, a, out, "pg")
    elif name == "ett.checkpoint":
        committed = _as_float(a.get("ett.checkpoint.committed"))
        out.add(
            ref,
            {
                **_base(ref, "checkpoint", "ck"),
                "start": ref.start,
                "blocking_end": ref.end,
                "committed": committed if committed is None else max(committed, ref.end),
                "cursor": _as_float(a.get("ett.cursor")),
                "bytes": _as_int(a.get("ett.checkpoint.bytes")),
                "ok": not ref.status_error,
            },
        )
    elif name == "ett.failure":
        _failure(ref, ref.start, a, out, what="fl")
    elif name == "ett.heartbeat":
        out.add(ref, {**_base(ref, "heartbeat", "hb"), "ts": ref.start})
    elif name == "ett.job_submitted":
        out.add(
            ref,
            {
                **_base(ref, "job_submitted", "js"),
                "ts": ref.start,
                "model": _model(a),
                "gpus": _as_int(a.get(GPUS)),
                "labels": _labels(a),
            },
        )
    elif name == "ett.job_ended":
        status = a.get("ett.job.status") or ("failed" if ref.status_error else "succeeded")
        out.add(ref, {**_base(ref, "job_ended", "je"), "ts": ref.start, "status": status})
    else:
        return (
            f"span {name!r}: unknown ett.* span; use ett.attempt, ett.progress, ett.checkpoint, "
            "ett.failure, ett.heartbeat, ett.job_submitted or ett.job_ended (docs/OTLP.md)"
        )
    return None


def _attempt_span(
    ref: SpanRef, events: list[tuple[str, float, dict[str, Any]]], out: Mapped, owner_default: str
) -> None:
    """An attempt's lifetime (ett.attempt, or OneLogger's application span), from rank 0."""
    if ref.rank != 0:
        return
    a = ref.attrs
    gpus = _as_int(a.get(GPUS))
    host = a.get("host.name")
    out.add(
        ref,
        {
            **_base(ref, "attempt_started", "as"),
            "ts": ref.start,
            "gpus": gpus if gpus and gpus > 0 else None,
            "host": host[:256] if isinstance(host, str) and host else None,
        },
    )
    owner = a.get(JOB_OWNER) or owner_default
    model = _model(a)
    if owner == "trainer" and ref.attempt == 0 and model and gpus:
        out.add(
            ref,
            {
                **_base(ref, "job_submitted", "js"),
                "ts": ref.start,
                "model": model,
                "gpus": gpus,
                "labels": _labels(a),
            },
        )
    reason = a.get("ett.attempt.reason")
    if reason is None:
        reason = "failure" if ref.status_error else "completed"
    if ref.status_error or reason in ("failure", "preempted"):
        kind = a.get("ett.failure.kind") or ("preemption" if reason == "preempted" else "app_error")
        out.add(
            ref,
            {
                **_base(ref, "failure", "fl"),
                "ts": ref.end,
                "kind": kind,
                "message": _failure_message(ref, events),
            },
        )
    out.add(ref, {**_base(ref, "attempt_ended", "ae"), "ts": ref.end, "reason": reason})
    if owner == "trainer" and reason == "completed" and model and gpus:
        out.add(ref, {**_base(ref, "job_ended", "je"), "ts": ref.end, "status": "succeeded"})


def _progress(
    ref: SpanRef, start: float, end: float, a: dict[str, Any], out: Mapped, what: str
) -> None:
    if ref.rank != 0:
        return
    c0, c1 = _as_float(a.get("ett.cursor_start")), _as_float(a.get("ett.cursor_end"))
    steps = _as_int(a.get("ett.steps"))
    out.add(
        ref,
        {
            **_base(ref, "progress", what),
            "start": start,
            "end": end,
            "cursor_start": c0,
            "cursor_end": c1,
            "steps": steps if steps is not None else (int(c1 - c0) if c0 is not None and c1 is not None and c1 >= c0 else None),
        },
    )  # fmt: skip


def _progress_event(ref: SpanRef, t: float, a: dict[str, Any], out: Mapped) -> None:
    duration = _as_float(a.get("ett.duration_s")) or 0.0
    _progress(ref, t - max(duration, 0.0), t, a, out, f"p{int(t * 1e6) % 10**12}")


def _failure(ref: SpanRef, t: float, a: dict[str, Any], out: Mapped, what: str) -> None:
    message = a.get("ett.failure.message")
    out.add(
        ref,
        {
            **_base(ref, "failure", what),
            "ts": t,
            "kind": a.get("ett.failure.kind") or "unknown",
            "message": str(message)[-4000:] if message is not None else None,
        },
    )


def _onelogger_checkpoint(ref: SpanRef, out: Mapped) -> None:
    """checkpoint_save_sync: the whole save blocks; checkpoint_save_async: only its span blocks."""
    sync = ref.name == "checkpoint_save_sync"
    cursor = _as_int(ref.attrs.get("current_iteration"))
    out.add(
        ref,
        {
            **_base(ref, "checkpoint", "ck"),
            "start": ref.start,
            "blocking_end": ref.end,
            "committed": ref.end if sync and not ref.status_error else None,
            "cursor": float(cursor) if cursor is not None and cursor >= 0 else None,
            "ok": not ref.status_error,
        },
    )


def _metrics_point(ref: SpanRef, loop_span: str, a: dict[str, Any], out: Mapped) -> None:
    """A OneLogger training_metrics_update: a progress point of its training loop (rank 0)."""
    if ref.rank != 0:
        return
    current = _as_int(a.get("current_iteration"))
    start_it = _as_int(a.get("train_iterations_start"))
    every = _as_int(a.get("interval"))
    t = _as_float(a.get("last_logged_train_iterations_finish_timestamp_sec"))
    first_t = _as_float(a.get("first_logged_train_iterations_finish_timestamp_sec"))
    if None in (current, start_it, every, t, first_t) or every <= 0:  # type: ignore[operator]
        return
    out.points.append(
        Point(
            span=ref,
            series=_series_id(ref.trace, loop_span),
            t=t,  # type: ignore[arg-type]
            cursor=current + 1,  # type: ignore[operator]
            every=every,  # type: ignore[arg-type]
            first_t=first_t,  # type: ignore[arg-type]
            first_cursor=start_it + 1,  # type: ignore[operator]
        )
    )


def point_keys(mapped: Mapped) -> list[tuple[str, str]]:
    """(job_id, event_id) of the stored points a OneLogger export may need: each one's neighbours."""
    keys = []
    for p in mapped.points:
        job = p.span.job_id or ""
        keys.append((job, point_marker_id(p.series, p.cursor - p.every)))
        keys.append((job, point_marker_id(p.series, p.cursor + p.every)))
    return keys


def stitch_points(mapped: Mapped, stored: dict[tuple[str, str], float]) -> None:
    """Progress windows between consecutive points, from this export or stored ones.

    Every point is stored as a heartbeat marker (its id names the cursor), so the window that
    spans two exports is made by whichever of the two arrives second, with the same id and
    content either way.
    """
    known: dict[tuple[str, str, int], float] = {}
    for p in mapped.points:
        known[(p.span.job_id or "", p.series, p.cursor)] = p.t

    def time_of(job: str, series: str, cursor: int) -> float | None:
        found = known.get((job, series, cursor))
        if found is None:
            found = stored.get((job, point_marker_id(series, cursor)))
        return found

    for p in mapped.points:
        ref, job = p.span, p.span.job_id or ""
        out_marker = {
            "event_id": point_marker_id(p.series, p.cursor),
            "job_id": ref.job_id,
            "type": "heartbeat",
            "attempt": ref.attempt,
            "ts": p.t,
        }
        mapped.add(ref, out_marker)
        windows = [(p.cursor, p.t, p.cursor - p.every)]
        after = time_of(job, p.series, p.cursor + p.every)
        if after is not None:
            windows.append((p.cursor + p.every, after, p.cursor))
        for end_cursor, end_t, before in windows:
            if before <= p.first_cursor:
                start_cursor, start_t = p.first_cursor, p.first_t
            else:
                found = time_of(job, p.series, before)
                if found is None:
                    continue  # the earlier point has not arrived: its export makes this window
                start_cursor, start_t = before, found
            if end_cursor <= start_cursor or end_t < start_t:
                continue
            mapped.add(
                ref,
                {
                    "event_id": window_id(p.series, end_cursor),
                    "job_id": ref.job_id,
                    "type": "progress",
                    "attempt": ref.attempt,
                    "start": start_t,
                    "end": end_t,
                    "cursor_start": float(start_cursor),
                    "cursor_end": float(end_cursor),
                    "steps": end_cursor - start_cursor,
                },
            )
