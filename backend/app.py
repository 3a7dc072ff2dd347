"""The FastAPI application: REST under /api/v1, /healthz, the dashboard at /."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from fastapi_offline import FastAPIOffline

from backend import migrate
from backend.alerts.scheduled import make_alert_evaluator
from backend.api import api_router
from backend.config import Settings, get_settings
from backend.db import Database
from backend.ett.service import make_recompute_worker, recompute_jobs
from dashboard.app import mount_dashboard

log = logging.getLogger("ett")

DESCRIPTION = (
    "Effective Training Time (ETT%) for a training fleet: every second of every job attributed "
    "to the component and team that owns it. Ingest: `POST /api/v1/events` (wire protocol v1)."
)


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
) -> FastAPI:
    """Build the app; refuses (SchemaOutOfDate) when the database is behind the migrations."""
    settings = settings or get_settings()
    db = database or Database(settings.database_url)
    if check_schema:
        migrate.check_schema(db.engine)

    workers: list[Any] = []

    @asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        if start_workers:
            for factory in (make_recompute_worker, make_alert_evaluator):
                worker = factory(settings, db)
                if worker is not None:
                    worker.start()
                    workers.append(worker)
        try:
            yield
        finally:
            for worker in workers:
                worker.stop()
            workers.clear()

    # /docs and /redoc from Swagger UI and ReDoc files shipped in the fastapi-offline wheel
    # (served under /static-offline-docs), not from a CDN: GPU clusters are often offline.
    app = FastAPIOffline(
        title="ETT% fleet observability",
        version="0.1.0",
        description=DESCRIPTION,
        lifespan=lifespan,
    )
    app.state.settings = settings
    app.state.db = db
    app.state.on_ingested = _ingest_hook(settings, db)

    @app.exception_handler(RequestValidationError)
    async def _validation(_request: Request, err: RequestValidationError) -> JSONResponse:
        return JSONResponse(
            status_code=422,
            content={"detail": _describe_validation(err), "errors": _jsonable(err.errors())},
        )

    @app.get("/healthz", tags=["health"])
    def healthz() -> JSONResponse:
        """Liveness and readiness: the database answers and its schema is at head."""
        try:
            current = migrate.check_schema(db.engine)  # reading the revision needs the database
        except Exception as err:  # noqa: BLE001 - any failure means not ready
            return JSONResponse(status_code=503, content={"status": "error", "detail": str(err)})
        return JSONResponse({"status": "ok", "database": db.dialect, "schema": sorted(current)})

    app.include_router(api_router, prefix="/api/v1")
    if with_dashboard:
        mount_dashboard(app, settings=settings, database=db)
    return app


def _jsonable(errors: list[Any]) -> list[dict[str, Any]]:
    return [{"loc": list(e.get("loc", ())), "msg": str(e.get("msg"))} for e in errors]


def _ingest_hook(settings: Settings, db: Database) -> Callable[[list[str]], None] | None:
    """Inline mode recomputes touched jobs before answering; background mode leaves marks."""
    if settings.recompute_mode != "inline":
        return None

    def hook(job_ids: list[str]) -> None:
        with db.session() as s:
            recompute_jobs(db_session=s, job_ids=job_ids, settings=settings)
            s.commit()

    return hook
