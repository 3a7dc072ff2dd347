"""Every REST router, mounted under /api/v1."""

from fastapi import APIRouter

from backend.alerts.views import router as alerts_router
from backend.ett.views import router as ett_router
from ingest.views import router as ingest_router

api_router = APIRouter()
api_router.include_router(ingest_router)
api_router.include_router(alerts_router)
api_router.include_router(ett_router)
