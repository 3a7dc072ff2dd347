"""The FastAPI application: REST under /api/v1, /healthz, the dashboard at /."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

from fastapi import Depends, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from fastapi_offline import FastAPIOffline
from sqlalchemy.exc import DataError, DBAPIError
from sqlalchemy.exc import TimeoutError as PoolTimeout

from backend import migrate, runtime
from backend.alerts import exported as alerts_exported
from backend.api import api_router, root_router
from backend.config import Settings, get_settings
from backend.db import Database, describe_error, is_lock_timeout, is_retryable, with_retries
from backend.exporter.views import install_metrics
from backend.params import DeprecationHeaders, enforce_read_bounds
from backend.results.recompute import recompute_isolated, recompute_jobs
from backend.workers import PeriodicWorker
from dashboard.app import mount_dashboard

log = logging.getLogger("ett")

DESCRIPTION = (
    "Effective Training Time (ETT%) for a training fleet: every second of every job attributed "
    "to the component and team that owns it. Ingest: `POST /api/v1/events` (wire protocol v1)."
)


# A row lock held longer than ETT_LOCK_TIMEOUT_S (a frozen worker's claim, a long recompute).
LOCKED_DETAIL = (
    "a row this request writes (a job's) is locked by another transaction, such as a recompute, "
    "for longer than ETT_LOCK_TIMEOUT_S; nothing was stored, send it again"
)
LOCKED_RETRY_AFTER = "2"


def _describe_validation(err: RequestValidationError) -> str:
    parts = []
    for e in err.errors():
        loc = [str(p) for p in e.get("loc", ()) if p not in ("query", "path", "body")]
        parts.append(f"{'.'.join(loc) or 'request'}: {e.get('msg')}")
    return "; ".join(parts)


def create_app(
    settings: Settings | None = None,
    *,
    database: Database | None = None,
    check_schema: bool = True,
    start_workers: bool = True,
    with_dashboard: bool = True,
    workers: Callable[[], list[PeriodicWorker]] | None = None,
) -> FastAPI:
    """Build the app; refuses (SchemaOutOfDate) when the database is behind the migrations.

    With start_workers the lifespan starts `workers()` (by default the composition root's
    workers of the "all" role, backend.runtime) and stops them on shutdown.
    """
    settings = settings or get_settings()
    db = database or runtime.build_database(settings)
    if check_schema:
        migrate.check_schema(db.engine)

    running: list[PeriodicWorker] = []

    @asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        if start_workers:
            built = workers() if workers is not None else runtime.build_workers(settings, db)
            runtime.start_all(built)
            running.extend(built)
        try:
            yield
        finally:
            runtime.stop_all(running)
            running.clear()

    # /docs and /redoc from Swagger UI and ReDoc files shipped in the fastapi-offline wheel
    # (served under /static-offline-docs), not from a CDN: GPU clusters are often offline.
    app = FastAPIOffline(
        title="ETT% fleet observability",
        version="0.1.0",
        description=DESCRIPTION,
        lifespan=lifespan,
    )
    _plain_validation_errors(app)
    app.add_middleware(DeprecationHeaders)
    app.state.settings = settings
    app.state.db = db
    app.state.on_ingested = _ingest_hook(settings, db)

    @app.exception_handler(RequestValidationError)
    async def _validation(_request: Request, err: RequestValidationError) -> JSONResponse:
        return JSONResponse(
            status_code=422,
            content={"detail": _describe_validation(err), "errors": _jsonable(err.errors())},
        )

    @app.exception_handler(DBAPIError)
    async def _database_refused(_request: Request, err: DBAPIError) -> JSONResponse:
        # The net under every route: what the database refuses is the client's 4xx (a value it
        # cannot hold) or a 503 to retry (a concurrency conflict), never a bare 500.
        if is_retryable(err):
            return JSONResponse(
                status_code=503,
                content={"detail": "the database is busy with conflicting writes; retry"},
                headers={"Retry-After": "1"},
            )
        if err.connection_invalidated:
            # The server dropped the connection (a restart, a failover) where no rerun was safe.
            return JSONResponse(
                status_code=503,
                content={"detail": "the connection to the database was lost; retry"},
                headers={"Retry-After": "1"},
            )
        if is_lock_timeout(err):
            return JSONResponse(
                status_code=503,
                content={"detail": LOCKED_DETAIL},
                headers={"Retry-After": LOCKED_RETRY_AFTER},
            )
        if isinstance(err, DataError):
            return JSONResponse(
                status_code=422,
                content={"detail": f"a value cannot be stored: {describe_error(err)}"},
            )
        log.error("database error: %s", describe_error(err))
        return JSONResponse(status_code=500, content={"detail": "internal database error"})

    @app.exception_handler(PoolTimeout)
    async def _pool_exhausted(_request: Request, err: PoolTimeout) -> JSONResponse:
        # Every pooled connection is busy (ETT_DB_POOL_TIMEOUT_S passed): retry, never a 500.
        log.warning("no database connection free: %s", err)
        return JSONResponse(
            status_code=503,
            content={"detail": "every database connection is busy; retry shortly"},
            headers={"Retry-After": "1"},
        )

    @app.get("/healthz", tags=["health"])
    def healthz() -> JSONResponse:
        """Liveness and readiness: the database answers and its schema is at head."""
        try:
            current = migrate.check_schema(db.engine)  # reading the revision needs the database
        except Exception as err:  # noqa: BLE001 - any failure means not ready
            return JSONResponse(status_code=503, content={"status": "error", "detail": str(err)})
        return JSONResponse({"status": "ok", "database": db.dialect, "schema": sorted(current)})

    # Every API route is held to the read bounds (backend/params.py), new ones included.
    app.include_router(api_router, prefix="/api/v1", dependencies=[Depends(enforce_read_bounds)])
    app.include_router(root_router)
    install_metrics(app, settings, db, alerts=alerts_exported)
    if with_dashboard:
        mount_dashboard(app, settings=settings, database=db)
    return app


def build_app(
    settings: Settings | None = None,
    *,
    role: runtime.Role = "all",
    database: Database | None = None,
    check_schema: bool = True,
    with_dashboard: bool = True,
) -> FastAPI:
    """The HTTP app of an "api" or "all" process (an "all" app runs the workers in its lifespan)."""
    settings = settings or runtime.build_settings()
    db = database or runtime.build_database(settings)
    if role == "worker":
        raise ValueError("the worker role serves no HTTP app; use run_workers")
    return create_app(
        settings,
        database=db,
        check_schema=check_schema,
        start_workers=role == "all",
        with_dashboard=with_dashboard,
        workers=lambda: runtime.build_workers(settings, db, role),
    )


def serve(
    host: str,
    port: int,
    *,
    role: str | None = None,
    announce: Callable[[str], None] = print,
) -> None:
    """Serve the app of `role` (else ETT_SERVE_ROLE, else all) on host:port until stopped.

    Raises ValueError for an unknown role or the worker role (it serves nothing) and
    SchemaOutOfDate when the database is behind the migrations, before anything is bound.
    """
    import uvicorn

    settings = runtime.build_settings()
    chosen = runtime.resolve_role(role, settings)
    if chosen == "worker":
        raise ValueError("`ett serve --role worker` serves nothing: run `ett worker`")
    application = build_app(settings, role=chosen)
    announce(
        f"ETT% serving ({chosen}) on http://{host}:{port}/  (API docs: http://{host}:{port}/docs)"
    )
    from backend.serving import Limits, fit_file_limit, guarded_protocol

    runtime.freeze_startup_heap()

    limits = Limits(
        header_timeout_s=settings.http_header_timeout_s,
        body_timeout_s=settings.http_body_timeout_s,
        keep_alive_timeout_s=settings.http_keep_alive_timeout_s,
        max_connections=fit_file_limit(settings.http_max_connections),
    )
    uvicorn.run(
        application,
        host=host,
        port=port,
        log_level=settings.log_level,
        http=guarded_protocol(limits),
        timeout_keep_alive=settings.http_keep_alive_timeout_s,
    )


def _plain_validation_errors(app: FastAPI) -> None:
    """Document 422 answers as they are: `{"detail": "<words>"}` (not FastAPI's error list)."""
    build = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            doc = build()
            schemas = doc.get("components", {}).get("schemas", {})
            if "HTTPValidationError" in schemas:
                schemas["HTTPValidationError"] = {
                    "title": "HTTPValidationError",
                    "type": "object",
                    "properties": {
                        "detail": {"type": "string", "description": "what is wrong, in words"},
                        "errors": {"type": "array", "items": {"type": "object"}},
                    },
                    "required": ["detail"],
                }
            app.openapi_schema = doc
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]


def _jsonable(errors: list[Any]) -> list[dict[str, Any]]:
    return [{"loc": list(e.get("loc", ())), "msg": str(e.get("msg"))} for e in errors]


def _ingest_hook(settings: Settings, db: Database) -> Callable[[list[str]], None] | None:
    """Inline mode recomputes touched jobs before answering; background mode leaves marks."""
    if settings.recompute_mode != "inline":
        return None

    def hook(job_ids: list[str]) -> None:
        # The events are stored already: a recompute that fails here leaves the jobs marked
        # for the recompute worker (and its quarantine) rather than failing the batch.
        with db.session() as s:
            try:
                with_retries(
                    s,
                    lambda: recompute_jobs(db_session=s, job_ids=job_ids, settings=settings),
                    retries=settings.ingest_retries,
                )
                return
            except Exception:  # noqa: BLE001 - never answer 5xx for events already stored
                s.rollback()
            try:
                # One job at a time: the ones that fail are quarantined, the others computed.
                recompute_isolated(db_session=s, job_ids=job_ids, settings=settings)
            except Exception:  # noqa: BLE001 - the worker picks up what is still marked
                s.rollback()
                log.warning("inline recompute of %d jobs failed; left to the worker", len(job_ids))

    return hook
