"""POST /api/v1/events: wire protocol v1 (SPEC section 3)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import AsyncIterator
from typing import Any

import orjson
from fastapi import APIRouter, HTTPException, Query, Request, Response
from pydantic import BaseModel, Field
from sqlalchemy.exc import DBAPIError
from starlette.concurrency import run_in_threadpool

from backend.auth.deps import ReadAccess, authenticate
from backend.config import Settings
from backend.db import Database, describe_error, is_lock_timeout, is_retryable, with_retries
from backend.deps import SessionDep
from backend.events import store as event_store
from backend.health import count_ingest
from backend.timefmt import rfc3339
from ingest import service
from ingest.schema import batch_openapi_schema, event_json_schema

log = logging.getLogger("ett.ingest")
router = APIRouter(tags=["ingest"])


class Rejection(BaseModel):
    """One event the batch could not store, and why."""

    index: int
    event_id: str | None
    error: str


class IngestResponse(BaseModel):
    """Counts for one batch."""

    accepted: int
    duplicates: int
    rejected: list[Rejection]
    held: int = Field(
        0,
        description="events of a model-scoped token kept aside until their job's "
        "job_submitted names its model (docs/PROTOCOL.md)",
    )


class RejectedEventRead(BaseModel):
    """A rejected event as kept for operators."""

    received_at: str
    job_id: str | None
    event_id: str | None
    batch_index: int
    error: str
    raw: str
    token_name: str | None


def _parse(body: bytes) -> Any:
    try:
        return orjson.loads(body)
    except orjson.JSONDecodeError:
        pass
    try:
        # orjson refuses NaN/Infinity and lone surrogates; json takes them, so that the event,
        # not the batch, is refused (ingest.schema.check_values says why).
        return json.loads(body)
    except RecursionError:
        raise HTTPException(
            400, "body is nested too deeply (over about 1,000 levels); events are flat objects"
        ) from None
    except (ValueError, UnicodeDecodeError) as err:
        raise HTTPException(400, f"body is not valid JSON: {err}") from None


async def _read_body(request: Request, limit: int) -> bytes:
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise HTTPException(
                413, f"body is over the {limit} byte limit; split the batch and send it again"
            )
        chunks.append(chunk)
    return b"".join(chunks)


_BODY_DOC = {
    "requestBody": {
        "required": True,
        "content": {"application/json": {"schema": batch_openapi_schema()}},
    }
}


@router.post(
    "/events",
    response_model=IngestResponse,
    openapi_extra=_BODY_DOC,
    responses={
        400: {"description": "body not JSON or not {'events': [...]}"},
        401: {"description": "no or bad token"},
        403: {"description": "token not allowed for this job's model"},
        413: {"description": "over 10,000 events or 5 MiB"},
        415: {"description": "not application/json"},
        503: {
            "description": "concurrency conflicts outlasted the retries, or a job's row stayed "
            "locked past ETT_LOCK_TIMEOUT_S: nothing stored, resend after Retry-After"
        },
    },
)
async def post_events(request: Request) -> Response:
    """Store a batch of events; valid ones are kept even when others are rejected."""
    settings = request.app.state.settings
    declared = request.headers.get("content-length")
    if declared and declared.isdigit() and int(declared) > settings.max_body_bytes:
        raise HTTPException(
            413, f"body of {declared} bytes is over the {settings.max_body_bytes} byte limit"
        )
    try:
        events = await _read_events(request, settings)
    except HTTPException:
        # A bad token is told before a bad body, as it always was.
        await run_in_threadpool(authenticate, request, None, "ingest")
        raise
    result = await _store_waiting_for_locks(request, events, settings)
    count_ingest(accepted=result.accepted, duplicates=result.duplicates, rejected=result.rejected)
    hook = getattr(request.app.state, "on_ingested", None)
    if hook is not None and result.job_ids:
        await run_in_threadpool(hook, result.job_ids)
    # The counts as IngestResponse documents them, written directly: FastAPI's validation and
    # serialization of the response model cost more than the whole answer.
    answer = {
        "accepted": result.accepted,
        "duplicates": result.duplicates,
        "rejected": [
            {"index": r["index"], "event_id": r["event_id"], "error": r["error"]}
            for r in result.rejected
        ],
        "held": result.held,
    }
    return Response(orjson.dumps(answer), media_type="application/json")


async def _read_events(request: Request, settings: Settings) -> list[Any]:
    """The batch's events, or the HTTPException (415, 413, 400) its body deserves."""
    ctype = request.headers.get("content-type", "").split(";", 1)[0].strip().lower()
    if ctype != "application/json":
        raise HTTPException(
            415, f"content type must be application/json, not {ctype or 'missing'!r}"
        )
    body = await _read_body(request, settings.max_body_bytes)
    doc = _parse(body)
    if not isinstance(doc, dict) or not isinstance(doc.get("events"), list):
        raise HTTPException(400, 'body must be a JSON object {"events": [ ... ]}')
    events = doc["events"]
    if len(events) > settings.max_batch_events:
        raise HTTPException(
            413,
            f"batch of {len(events)} events is over the {settings.max_batch_events} event "
            "limit; split it",
        )
    return events


# How long a batch waits for its turn behind this process's other batches of the same jobs.
TURN_WAIT_S = 30.0


class TurnTimeout(Exception):
    """A batch waited TURN_WAIT_S for its jobs' turn (answered 503)."""


class JobTurns:
    """In-process turns per job id: one batch per job at a time waits in the database.

    The others wait here, holding no pooled connection and no thread. So batches posted into
    jobs a frozen worker holds take at most one connection per job, whatever their number,
    and unrelated requests keep theirs. Locks are taken in job id order (no cycle).
    """

    def __init__(self) -> None:
        self._locks: dict[str, asyncio.Lock] = {}
        self._users: dict[str, int] = {}

    def free(self, job_ids: list[str]) -> bool:
        """Whether no batch holds or awaits any of these jobs: turn() takes them at once."""
        return not any(job_id in self._users for job_id in job_ids)

    @contextlib.asynccontextmanager
    async def turn(self, job_ids: list[str], timeout_s: float) -> AsyncIterator[None]:
        """Hold every job's turn, waiting at most timeout_s (TurnTimeout past it)."""
        ordered = sorted(set(job_ids))
        for job_id in ordered:
            self._users[job_id] = self._users.get(job_id, 0) + 1
            self._locks.setdefault(job_id, asyncio.Lock())
        held: list[asyncio.Lock] = []
        try:
            try:
                async with asyncio.timeout(timeout_s):
                    for job_id in ordered:
                        lock = self._locks[job_id]
                        await lock.acquire()
                        held.append(lock)
            except TimeoutError:
                raise TurnTimeout from None
            yield
        finally:
            for lock in held:
                lock.release()
            for job_id in ordered:
                self._users[job_id] -= 1
                if not self._users[job_id]:
                    del self._users[job_id], self._locks[job_id]


def _job_ids(events: list[Any]) -> list[str]:
    return [e["job_id"] for e in events if isinstance(e, dict) and isinstance(e.get("job_id"), str)]


async def _store_waiting_for_locks(
    request: Request, events: list[Any], settings: Settings
) -> service.IngestResult:
    """Authenticate and _store once this process's earlier batches of the same jobs are done
    (JobTurns).

    When no other batch holds or awaits the jobs, the batch takes their turns at once and is
    authenticated and stored in one worker thread: each thread hop cost about half a
    millisecond (docs/PERFORMANCE.md). Otherwise it is authenticated first, so that a bad token
    is answered at once rather than after the wait. In the database the batch waits for a
    locked job row (a recompute, a frozen worker's claim) at most ETT_LOCK_TIMEOUT_S; then the
    lock timeout goes to the app's handler (503).
    """
    # One JobTurns per event loop (asyncio locks belong to one; a test may drive an app from
    # several). Unused turns are dropped, so a reused loop id finds nothing stale.
    by_loop = getattr(request.app.state, "job_turns", None)
    if by_loop is None:
        by_loop = request.app.state.job_turns = {}
    turns = by_loop.setdefault(id(asyncio.get_running_loop()), JobTurns())
    db = request.app.state.db
    job_ids = _job_ids(events)
    try:
        if turns.free(job_ids):
            async with turns.turn(job_ids, TURN_WAIT_S):
                return await run_in_threadpool(
                    _authenticate_and_store, request, db, events, settings
                )
        token = await run_in_threadpool(authenticate, request, None, "ingest")
        async with turns.turn(job_ids, TURN_WAIT_S):
            return await run_in_threadpool(_store_in_session, db, events, token, settings)
    except TurnTimeout:
        log.warning("a batch waited %.0f s for its jobs' turn; answered 503", TURN_WAIT_S)
        raise HTTPException(
            503,
            f"this batch's jobs were busy with other batches for {TURN_WAIT_S:.0f} s; send it "
            "again",
            headers={"Retry-After": "2"},
        ) from None


def _authenticate_and_store(
    request: Request, db: Database, events: list[Any], settings: Settings
) -> service.IngestResult:
    """authenticate (401/403), then _store_in_session, in one worker thread."""
    token = authenticate(request, None, "ingest")
    return _store_in_session(db, events, token, settings)


def _store_in_session(
    db: Database, events: list[Any], token: Any, settings: Settings
) -> service.IngestResult:
    """_store in a session of its own, closed (rolled back if still open) afterwards."""
    with db.session() as db_session:
        return _store(db_session, events, token, settings)


def _store(
    db_session: Any, events: list[Any], token: Any, settings: Settings
) -> service.IngestResult:
    """Store the batch in one transaction, retried on deadlocks; per event if it fails anyway."""
    window = (settings.event_time_min, settings.event_time_max)

    def work() -> service.IngestResult:
        # A job row locked past ETT_LOCK_TIMEOUT_S fails the batch with 55P03 (is_lock_timeout),
        # rather than holding a pooled connection for as long as the lock is held.
        return service.ingest_batch(
            db_session=db_session,
            events=events,
            token=token,
            time_window=window,
            max_held_per_job=settings.max_held_events_per_job,
            lock_timeout_s=settings.lock_timeout_s,
        )

    try:
        result = with_retries(db_session, work, retries=settings.ingest_retries)
    except service.ModelNotAllowed as err:
        raise HTTPException(403, str(err)) from None
    except DBAPIError as err:
        if is_lock_timeout(err) or err.connection_invalidated:
            raise  # the app's handler answers 503 with Retry-After
        if is_retryable(err):
            raise _busy(err) from None
        # A value the validation let through and the database refused: store what it takes.
        log.warning(
            "batch of %d events failed (%s); storing them one by one",
            len(events),
            describe_error(err),
        )
        result = _store_each(
            db_session,
            events,
            token,
            window,
            settings.ingest_retries,
            settings.max_held_events_per_job,
            settings.lock_timeout_s,
        )
    if result.rejected:
        log.warning("rejected %d of %d events", len(result.rejected), len(events))
    return result


def _store_each(
    db_session: Any,
    events: list[Any],
    token: Any,
    window: tuple[float, float],
    retries: int,
    max_held: int,
    lock_timeout_s: float,
) -> service.IngestResult:
    """Fallback: one transaction per event; the ones the database refuses are kept as rejected."""
    total = service.IngestResult()

    def one_event(raw: Any) -> service.IngestResult:
        return service.ingest_batch(
            db_session=db_session,
            events=[raw],
            token=token,
            time_window=window,
            max_held_per_job=max_held,
            lock_timeout_s=lock_timeout_s,
        )

    for index, raw in enumerate(events):
        try:
            one = with_retries(db_session, lambda raw=raw: one_event(raw), retries=retries)
        except DBAPIError as err:
            if is_lock_timeout(err) or err.connection_invalidated:
                raise
            if is_retryable(err):
                raise _busy(err) from None
            error = f"event: the database refused it ({type(err.orig or err).__name__})"
            with_retries(
                db_session,
                lambda raw=raw, index=index, error=error: service.keep_rejected(
                    db_session=db_session, raw=raw, index=index, error=error, token=token
                ),
                retries=retries,
            )
            event_id = raw.get("event_id") if isinstance(raw, dict) else None
            total.rejected.append(
                {
                    "index": index,
                    "event_id": service.storable(event_id)[:64]
                    if isinstance(event_id, str)
                    else None,
                    "error": error,
                }
            )
            continue
        total.accepted += one.accepted
        total.duplicates += one.duplicates
        total.held += one.held
        total.rejected += [{**r, "index": index} for r in one.rejected]
        total.job_ids = sorted(set(total.job_ids) | set(one.job_ids))
    return total


def _busy(err: Exception) -> HTTPException:
    log.warning("batch gave up after retries on a concurrency conflict: %s", describe_error(err))
    return HTTPException(
        503,
        "the database is busy with conflicting writes; send the batch again (events already "
        "stored are counted as duplicates)",
        headers={"Retry-After": "1"},
    )


@router.get("/events/rejected", response_model=list[RejectedEventRead])
def get_rejected(
    db_session: SessionDep,
    _access: ReadAccess,
    job_id: str | None = None,
    limit: int = Query(100, ge=1, le=1000),
    offset: int = Query(0, ge=0),
) -> list[RejectedEventRead]:
    """Events that ingest refused, newest first, with the reason."""
    rows = event_store.list_rejected(
        db_session=db_session, job_id=job_id, limit=limit, offset=offset
    )
    return [
        RejectedEventRead(
            received_at=rfc3339(r.received_at) or "",
            job_id=r.job_id,
            event_id=r.event_id,
            batch_index=r.batch_index,
            error=r.error,
            raw=r.raw,
            token_name=r.token_name,
        )
        for r in rows
    ]


class HeldEventRead(BaseModel):
    """An event held until its job's job_submitted names the job's model."""

    received_at: str
    job_id: str
    event_id: str
    token_name: str | None
    token_models: list[str]
    event: dict[str, Any]


class HeldPage(BaseModel):
    """Held events, newest first, and how many there are."""

    total: int
    events: list[HeldEventRead]


@router.get("/events/held", response_model=HeldPage)
def get_held(
    db_session: SessionDep,
    _access: ReadAccess,
    job_id: str | None = None,
    limit: int = Query(100, ge=1, le=1000),
    offset: int = Query(0, ge=0),
) -> HeldPage:
    """Events a model-scoped token sent for jobs whose job_submitted has not arrived yet."""
    total, rows = event_store.list_held(
        db_session=db_session, job_id=job_id, limit=limit, offset=offset
    )
    return HeldPage(
        total=total,
        events=[
            HeldEventRead(
                received_at=rfc3339(r.received_at) or "",
                job_id=r.job_id,
                event_id=r.event_id,
                token_name=r.token_name,
                token_models=list(r.token_models or []),
                event=dict(r.payload),
            )
            for r in rows
        ],
    )


@router.get("/schema/events", response_model=dict[str, Any], tags=["ingest"])
def get_event_schema(_access: ReadAccess) -> dict[str, Any]:
    """The JSON Schema of one wire event (docs/PROTOCOL.md), for emitters in any language."""
    return event_json_schema()
