"""Models REST: the list with current ETT%, trend, owner and lost GPU-hours; one model's page."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from fastapi import APIRouter, Query

from backend.auth.deps import ReadAccess
from backend.deps import SessionDep, SettingsDep
from backend.params import call_service, csv_response, time_range, with_rfc3339
from backend.workloads import service

router = APIRouter(prefix="/models", tags=["models"])


@router.get("", summary="Models: current ETT%, trend, owner, GPU-hours lost")
def list_models(
    _auth: ReadAccess,
    db_session: SessionDep,
    start: datetime | None = Query(None, description="window start (default end - 30 days)"),
    end: datetime | None = Query(None, description="window end (default now)"),
    q: str | None = Query(None, max_length=256, description="substring of the model name"),
    owner: str | None = Query(None),
    sort: Literal["lost_gpu_h", "ett_pct", "trend_pp", "wall_gpu_h", "name"] = Query("lost_gpu_h"),
    order: Literal["asc", "desc"] = Query("desc"),
    limit: int = Query(100, ge=1, le=1000),
    offset: int = Query(0, ge=0),
    format: Literal["json", "csv"] = Query("json"),
) -> Any:
    """`{"start", "end", "total", "models": [{model, owner, ett_pct, trend_pp, lost_gpu_h, ...}]}`.

    The trend compares the window with the window of the same length just before it.
    """
    lo, hi = time_range(start, end, default_days=30)
    rows, total = call_service(
        service.list_models,
        db_session=db_session,
        start=lo,
        end=hi,
        q=q,
        owner=owner,
        sort=sort,
        descending=order == "desc",
        limit=limit,
        offset=offset,
    )
    if format == "csv":
        cols = ["model", "owner", "tier", "jobs", "ett_pct", "previous_ett_pct", "trend_pp"]
        cols += ["wall_gpu_h", "lost_gpu_h", "top_lost_component"]
        return csv_response(rows, cols, "models.csv")
    return with_rfc3339({"start": lo, "end": hi, "total": total, "models": rows})


@router.get("/{model}", summary="One model: headline, trend, series, lost by owner, jobs")
def get_model(
    model: str,
    _auth: ReadAccess,
    db_session: SessionDep,
    settings: SettingsDep,
    start: datetime | None = Query(None, description="default end - 180 days"),
    end: datetime | None = Query(None, description="default now"),
    bucket: Literal["day", "week"] = Query("day"),
    job_limit: int = Query(200, ge=1, le=5000),
) -> Any:
    """The model page's numbers; 404 for an unknown model."""
    lo, hi = time_range(start, end, bucket=bucket)
    return with_rfc3339(
        call_service(
            service.model_page,
            db_session=db_session,
            model=model,
            start=lo,
            end=hi,
            bucket=bucket,
            settings=settings,
            job_limit=job_limit,
        )
    )
