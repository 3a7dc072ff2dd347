"""POST /v1/traces: the OTLP/HTTP traces receiver (docs/OTLP.md).

Same tokens, scopes, limits and partial acceptance as POST /api/v1/events: the spans become wire
events (ingest.otlp) and go through ingest.service.ingest_batch, so dedupe, rejection storage,
recompute marks and model scopes are the same code. Answers follow the OTLP/HTTP specification:
an ExportTraceServiceResponse (with partial_success when spans were rejected) or a
google.rpc.Status, in the request's encoding.
"""

from __future__ import annotations

import logging
import time
from typing import Any

import orjson
from fastapi import APIRouter, HTTPException, Request, Response
from sqlalchemy.exc import DBAPIError
from starlette.concurrency import run_in_threadpool

from backend.auth.deps import authenticate
from backend.config import Settings
from backend.db import describe_error, is_retryable, with_retries
from backend.deps import SessionDep
from backend.events import store as event_store
from backend.health import count_ingest
from ingest import otlp, service

log = logging.getLogger("ett.ingest.otlp")
router = APIRouter(tags=["otlp"])
MAX_REASONS = 5


def _id_schema(description: str) -> dict[str, Any]:
    return {"type": "string", "pattern": "^([0-9a-fA-F]{2})*$", "maxLength": 64,
            "description": description}  # fmt: skip


_ANY_VALUE = {
    "type": "object",
    "properties": {
        "stringValue": {"type": "string"},
        "boolValue": {"type": "boolean"},
        "intValue": {"anyOf": [{"type": "integer"}, {"type": "string"}]},
        "doubleValue": {"type": "number"},
    },
}
_KEY_VALUES = {
    "type": "array",
    "items": {
        "type": "object",
        "properties": {"key": {"type": "string"}, "value": _ANY_VALUE},
        "required": ["key"],
    },
}
_NANOS = {
    "anyOf": [{"type": "integer", "minimum": 0}, {"type": "string", "pattern": "^[0-9]{1,20}$"}]
}
_SPAN = {
    "type": "object",
    "properties": {
        "traceId": _id_schema("16 bytes, hex"),
        "spanId": _id_schema("8 bytes, hex"),
        "parentSpanId": _id_schema("8 bytes, hex"),
        "name": {"type": "string"},
        "kind": {"type": "integer"},
        "startTimeUnixNano": _NANOS,
        "endTimeUnixNano": _NANOS,
        "attributes": _KEY_VALUES,
        "events": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {
                    "timeUnixNano": _NANOS,
                    "name": {"type": "string"},
                    "attributes": _KEY_VALUES,
                },
            },
        },
        "status": {
            "type": "object",
            "properties": {"code": {"type": "integer"}, "message": {"type": "string"}},
        },
    },
}
REQUEST_SCHEMA: dict[str, Any] = {
    "type": "object",
    "description": "ExportTraceServiceRequest in OTLP's JSON encoding (hex ids, lowerCamelCase "
    "keys, enums as integers); the same message as binary protobuf with "
    "Content-Type application/x-protobuf. Content-Encoding gzip is accepted.",
    "properties": {
        "resourceSpans": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {
                    "resource": {"type": "object", "properties": {"attributes": _KEY_VALUES}},
                    "scopeSpans": {
                        "type": "array",
                        "items": {
                            "type": "object",
                            "properties": {"spans": {"type": "array", "items": _SPAN}},
                        },
                    },
                },
            },
        }
    },
}
RESPONSE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "description": "ExportTraceServiceResponse; partialSuccess is present only when spans were "
    "rejected (each is kept, with its reason, at GET /api/v1/events/rejected).",
    "properties": {
        "partialSuccess": {
            "type": "object",
            "properties": {
                "rejectedSpans": {"anyOf": [{"type": "string"}, {"type": "integer"}]},
                "errorMessage": {"type": "string"},
            },
        }
    },
}
STATUS_SCHEMA: dict[str, Any] = {
    "type": "object",
    "description": "google.rpc.Status (JSON for a JSON request, protobuf for a protobuf one)",
    "properties": {
        "code": {"type": "integer"},
        "message": {"type": "string"},
        "details": {"type": "array"},
    },
}
_BINARY = {"schema": {"type": "string", "format": "binary"}}


def _error_doc(description: str) -> dict[str, Any]:
    return {
        "description": description,
        "content": {"application/json": {"schema": STATUS_SCHEMA}, otlp.PROTOBUF: _BINARY},
    }


_DOC = {
    "requestBody": {
        "required": True,
        "content": {"application/json": {"schema": REQUEST_SCHEMA}, otlp.PROTOBUF: _BINARY},
    }
}
_RESPONSES: dict[int | str, dict[str, Any]] = {
    200: {
        "description": "accepted (partialSuccess says how many spans were rejected, and why)",
        "content": {"application/json": {"schema": RESPONSE_SCHEMA}, otlp.PROTOBUF: _BINARY},
    },
    400: _error_doc("the body cannot be decoded (not retryable)"),
    401: _error_doc("no or bad token"),
    403: _error_doc("token not allowed for this job's model, or without the ingest scope"),
    413: _error_doc("over the body or event limit, after decompression (not retryable)"),
    415: _error_doc("Content-Type is neither application/x-protobuf nor application/json"),
    503: _error_doc("database busy: retry after Retry-After seconds"),
}
# gRPC codes in Status.code (the spec leaves it optional; clients may log it).
_GRPC = {400: 3, 401: 16, 403: 7, 413: 8, 415: 3, 429: 8, 503: 14}


def _answer(
    status: int, message: str, ctype: str, headers: dict[str, str] | None = None
) -> Response:
    return Response(
        content=otlp.encode_status(_GRPC.get(status, 2), message, ctype),
        status_code=status,
        media_type=ctype,
        headers=headers,
    )


@router.post(
    "/v1/traces",
    openapi_extra=_DOC,
    responses=_RESPONSES,
    response_class=Response,
    summary="OTLP/HTTP traces receiver",
)
async def post_traces(request: Request, db_session: SessionDep) -> Response:
    """Accept an OTLP ExportTraceServiceRequest: its spans become wire events (docs/OTLP.md)."""
    settings: Settings = request.app.state.settings
    raw_type = request.headers.get("content-type", "").split(";", 1)[0].strip().lower()
    ctype = otlp.PROTOBUF if raw_type == otlp.PROTOBUF else otlp.JSON
    limit = settings.max_body_bytes
    declared = request.headers.get("content-length")
    if declared and declared.isdigit() and int(declared) > limit:
        return _answer(413, f"body of {declared} bytes is over the {limit} byte limit", ctype)
    try:
        token = await run_in_threadpool(authenticate, request, db_session, "ingest")
    except HTTPException as err:
        return _answer(err.status_code, str(err.detail), ctype, err.headers)
    if raw_type not in (otlp.PROTOBUF, otlp.JSON):
        return _answer(
            415,
            f"Content-Type must be {otlp.PROTOBUF} or {otlp.JSON}, not {raw_type or 'missing'!r}",
            ctype,
        )
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            return _answer(413, f"body is over the {limit} byte limit; send smaller exports", ctype)
        chunks.append(chunk)
    try:
        body = otlp.decompress(b"".join(chunks), request.headers.get("content-encoding", ""), limit)
        message = otlp.decode(body, raw_type)
    except OverflowError as err:
        return _answer(413, str(err), ctype)
    except otlp.OtlpError as err:
        return _answer(400, str(err), ctype)
    mapped = otlp.map_request(message)
    if mapped.spans > settings.max_batch_events:
        return _answer(
            413,
            f"export of {mapped.spans} spans is over the {settings.max_batch_events} limit; "
            "lower the exporter's max_export_batch_size",
            ctype,
        )
    try:
        result, rejected_spans, reasons = await run_in_threadpool(
            _store, db_session, mapped, token, settings
        )
    except service.ModelNotAllowed as err:
        return _answer(403, str(err), ctype)
    except _Busy as err:
        return _answer(503, str(err), ctype, {"Retry-After": "1"})
    except _Refused as err:
        return _answer(400, str(err), ctype)
    count_ingest(accepted=result.accepted, duplicates=result.duplicates, rejected=result.rejected)
    hook = getattr(request.app.state, "on_ingested", None)
    if hook is not None and result.job_ids:
        await run_in_threadpool(hook, result.job_ids)
    text = ""
    if rejected_spans:
        jobs = sorted({r.job_id for r, _ in mapped.rejected if r.job_id} | set(result.job_ids))
        where = f" (kept at GET /api/v1/events/rejected?job_id={jobs[0]})" if jobs else ""
        text = f"{rejected_spans} of {mapped.spans} spans rejected{where}: " + "; ".join(
            reasons[:MAX_REASONS]
        )
    return Response(
        content=otlp.encode_response(rejected_spans, text, ctype),
        status_code=200,
        media_type=ctype,
    )


class _Busy(Exception):
    """Concurrency conflicts outlasted the retries: nothing stored."""


class _Refused(Exception):
    """The database refused a value the validation let through: nothing stored (400)."""


def _store(
    db_session: Any, mapped: otlp.Mapped, token: Any, settings: Settings
) -> tuple[service.IngestResult, int, list[str]]:
    """One transaction: neighbour points, ingest_batch of the events, the unmappable spans kept."""
    window = (settings.event_time_min, settings.event_time_max)
    base_events, base_sources = list(mapped.events), list(mapped.sources)

    def run() -> service.IngestResult:
        mapped.events, mapped.sources = list(base_events), list(base_sources)
        if mapped.points:
            stored = event_store.stored_copies(db_session=db_session, keys=otlp.point_keys(mapped))
            times = {}
            for key, (_row, payload) in stored.items():
                ts = orjson.loads(payload).get("ts")
                if isinstance(ts, int | float):
                    times[key] = float(ts)
            otlp.stitch_points(mapped, times)
        result = service.ingest_batch(
            db_session=db_session, events=mapped.events, token=token, time_window=window
        )
        now = time.time()
        event_store.add_rejected(
            db_session=db_session,
            rows=[
                {
                    "received_at": now,
                    "job_id": ref.job_id[:128] if ref.job_id else None,
                    "event_id": f"o{ref.trace[:32]}{ref.span[:16]}",
                    "batch_index": ref.index,
                    "error": service.storable(f"otlp: {why}"),
                    "raw": service.storable(orjson.dumps(ref.describe(), default=str).decode()),
                    "token_name": token.name if token is not None else None,
                }
                for ref, why in mapped.rejected
            ],
        )
        return result

    try:
        result = with_retries(db_session, run, retries=settings.ingest_retries)
    except DBAPIError as err:
        if is_retryable(err):
            raise _Busy(
                "the database is busy with conflicting writes; send the export again"
            ) from None
        log.warning("OTLP export refused by the database: %s", describe_error(err))
        raise _Refused(
            f"the database refused a value of this export ({type(err.orig or err).__name__})"
        ) from None
    bad_spans = {ref.index for ref, _ in mapped.rejected}
    reasons = [why for _, why in mapped.rejected]
    for r in result.rejected:
        span_index = mapped.sources[r["index"]]
        if span_index not in bad_spans:
            bad_spans.add(span_index)
            reasons.append(f"span #{span_index}: {r['error']}")
    if result.rejected:
        log.warning("OTLP: rejected %d events", len(result.rejected))
    return result, len(bad_spans), reasons
