"""Every REST router, mounted under /api/v1 (and the OTLP receiver at /v1)."""

from fastapi import APIRouter

from backend.advice.views import router as advice_router
from backend.alerts.views import router as alerts_router
from backend.annotations.views import router as annotations_router
from backend.auth.views import router as tokens_router
from backend.compare.views import router as compare_router
from backend.live.views import router as live_router
from backend.metrics.views import router as fleet_router
from backend.owners.views import router as owners_router
from backend.planner.views import router as planner_router
from backend.results.views import router as ett_router
from backend.workloads.views import router as workloads_router
from ingest.otlp_views import router as otlp_router
from ingest.views import router as ingest_router

api_router = APIRouter()
api_router.include_router(ingest_router)
api_router.include_router(alerts_router)
api_router.include_router(ett_router)
api_router.include_router(owners_router)
api_router.include_router(fleet_router)
api_router.include_router(compare_router)
api_router.include_router(workloads_router)
api_router.include_router(advice_router)
api_router.include_router(planner_router)
api_router.include_router(tokens_router)
api_router.include_router(annotations_router)
api_router.include_router(live_router)

# Routes whose paths a standard fixes, mounted at the root: OTLP/HTTP's POST /v1/traces.
root_router = APIRouter()
root_router.include_router(otlp_router)
