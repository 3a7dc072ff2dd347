"""Every REST router, mounted under /api/v1."""

from fastapi import APIRouter

from ingest.views import router as ingest_router

api_router = APIRouter()
api_router.include_router(ingest_router)
