"""Build OTLP ExportTraceServiceRequest messages for the receiver's tests."""

from __future__ import annotations

import hashlib
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.trace.v1.trace_pb2 import Span, Status


def any_value(value: Any) -> AnyValue:
    """An AnyValue of a Python scalar."""
    if isinstance(value, bool):
        return AnyValue(bool_value=value)
    if isinstance(value, int):
        return AnyValue(int_value=value)
    if isinstance(value, float):
        return AnyValue(double_value=value)
    return AnyValue(string_value=str(value))


def key_values(attrs: dict[str, Any]) -> list[KeyValue]:
    """OTLP attributes of a dict."""
    return [KeyValue(key=k, value=any_value(v)) for k, v in attrs.items()]


def span(
    name: str,
    start: float,
    end: float,
    attrs: dict[str, Any] | None = None,
    *,
    trace: str = "t",
    parent: str | None = None,
    error: str | None = None,
    events: list[tuple[str, float, dict[str, Any]]] | None = None,
    sid: str | None = None,
) -> Span:
    """One span; ids are derived from names so tests stay deterministic."""
    s = Span(
        trace_id=hashlib.md5(trace.encode()).digest(),
        span_id=hashlib.md5((sid or f"{name}@{start}").encode()).digest()[:8],
        name=name,
        start_time_unix_nano=round(start * 1e9),
        end_time_unix_nano=round(end * 1e9),
        attributes=key_values(attrs or {}),
    )
    if parent is not None:
        s.parent_span_id = hashlib.md5(parent.encode()).digest()[:8]
    if error is not None:
        s.status.CopyFrom(Status(code=Status.STATUS_CODE_ERROR, message=error))
    for ev_name, t, ev_attrs in events or []:
        e = s.events.add()
        e.name = ev_name
        e.time_unix_nano = round(t * 1e9)
        e.attributes.extend(key_values(ev_attrs))
    return s


def request(spans: list[Span], resource: dict[str, Any]) -> ExportTraceServiceRequest:
    """One export: a resource and its spans in one scope."""
    req = ExportTraceServiceRequest()
    rs = req.resource_spans.add()
    rs.resource.attributes.extend(key_values(resource))
    rs.scope_spans.add().spans.extend(spans)
    return req
