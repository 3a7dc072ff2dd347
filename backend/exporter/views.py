"""GET /metrics: Prometheus text or OpenMetrics, chosen from the Accept header."""

from __future__ import annotations

from fastapi import APIRouter, FastAPI, Request, Response
from prometheus_client import CollectorRegistry
from prometheus_client.exposition import choose_encoder
from starlette.concurrency import run_in_threadpool

from backend.auth.deps import ReadAccess
from backend.config import Settings
from backend.db import Database
from backend.deps import SessionDep
from backend.exporter.collector import AlertFacts, DatabaseCollector
from backend.health import PROCESS_COLLECTORS, RequestTimer

router = APIRouter(tags=["metrics"])


def build_registry(
    settings: Settings, database: Database, *, alerts: AlertFacts | None = None
) -> CollectorRegistry:
    """A registry of this app's database collector and the process' health collectors."""
    registry = CollectorRegistry(auto_describe=False)
    for collector in PROCESS_COLLECTORS:
        registry.register(collector)
    registry.register(DatabaseCollector(database, settings, alerts=alerts))
    return registry


@router.get(
    "/metrics",
    response_class=Response,
    responses={
        200: {
            "description": "Prometheus text format 0.0.4, or OpenMetrics 1.0 when the Accept "
            "header asks for application/openmetrics-text.",
            "content": {"text/plain": {}, "application/openmetrics-text": {}},
        },
        401: {"description": "ETT_READ_TOKEN_REQUIRED=true and no or bad bearer token"},
    },
)
async def metrics(request: Request, _access: ReadAccess, db_session: SessionDep) -> Response:
    """Every exported metric (docs/PROMETHEUS.md); a read token when reads need one."""
    # The token check's transaction ends here: on SQLite it would lock out the collector's own.
    db_session.rollback()
    encoder, content_type = choose_encoder(request.headers.get("accept", ""))
    registry: CollectorRegistry = request.app.state.metrics_registry
    body = await run_in_threadpool(encoder, registry)
    return Response(content=body, media_type=content_type)


def install_metrics(
    app: FastAPI, settings: Settings, database: Database, *, alerts: AlertFacts | None = None
) -> None:
    """Add GET /metrics and the request timer to the app (before the dashboard's catch-all).

    `alerts` (the composition root passes `backend.alerts.exported`) feeds the alert families.
    """
    app.state.metrics_registry = build_registry(settings, database, alerts=alerts)
    app.add_middleware(RequestTimer)
    app.include_router(router)
