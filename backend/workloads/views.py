"""Models REST: the list with current ETT%, trend, team and lost GPU-hours; one model's page."""

from __future__ import annotations

from typing import Any, Literal

from fastapi import APIRouter, Query

from backend.auth.deps import ReadAccess
from backend.deps import SessionDep, SettingsDep
from backend.params import (
    alias_query,
    call_service,
    csv_response,
    end_query,
    pick_alias,
    start_query,
    time_range,
    with_rfc3339,
)
from backend.workloads import service
from backend.workloads.schemas import ModelList, ModelPage

router = APIRouter(prefix="/models", tags=["models"])

CSV_JSON = {200: {"content": {"text/csv": {}}, "description": "JSON, or CSV with format=csv"}}


def _with_team(row: dict[str, Any]) -> dict[str, Any]:
    return {**row, "team": row.get("owner")}


@router.get(
    "",
    summary="Models: current ETT%, trend, team, GPU-hours lost",
    response_model=ModelList,
    responses=CSV_JSON,
)
def list_models(
    _auth: ReadAccess,
    db_session: SessionDep,
    start: str | None = start_query(),
    end: str | None = end_query(),
    q: str | None = Query(None, max_length=256, description="substring of the model name"),
    team: str | None = Query(
        None, description="the jobs of this team (owner label, else the model's team)"
    ),
    owner: str | None = alias_query(
        "team", "the jobs of this team (owner label, else the model's team)"
    ),
    sort: Literal["lost_gpu_h", "ett_pct", "trend_pp", "wall_gpu_h", "name"] = Query("lost_gpu_h"),
    order: Literal["asc", "desc"] = Query("desc"),
    limit: int = Query(100, ge=1, le=1000),
    offset: int = Query(0, ge=0),
    format: Literal["json", "csv"] = Query("json"),
) -> Any:
    """`{"start", "end", "total", "models": [{model, team, ett_pct, trend_pp, lost_gpu_h, ...}]}`.

    The trend compares the range with the range of the same length just before it; it is null,
    with `trend_reason`, when that range holds under 3 jobs or too few GPU-hours.
    """
    lo, hi = time_range(start, end, whole_days=True)
    rows, total = call_service(
        service.list_models,
        db_session=db_session,
        start=lo,
        end=hi,
        q=q,
        owner=pick_alias("team", team, "owner", owner),
        sort=sort,
        descending=order == "desc",
        limit=limit,
        offset=offset,
    )
    rows = [_with_team(r) for r in rows]
    if format == "csv":
        cols = ["model", "team", "tier", "jobs", "ett_pct", "previous_ett_pct", "trend_pp"]
        cols += ["trend_reason", "previous_jobs"]
        cols += ["wall_gpu_h", "lost_gpu_h", "top_lost_component"]
        return csv_response(rows, cols, "models.csv")
    return with_rfc3339({"start": lo, "end": hi, "total": total, "models": rows})


@router.get(
    "/{model}",
    summary="One model: headline, trend, series, lost by owner, jobs",
    response_model=ModelPage,
)
def get_model(
    model: str,
    _auth: ReadAccess,
    db_session: SessionDep,
    settings: SettingsDep,
    start: str | None = start_query(),
    end: str | None = end_query(),
    bucket: Literal["day", "week", "month"] = Query("day"),
    job_limit: int = Query(200, ge=1, le=5000),
) -> Any:
    """The model page's numbers; 404 for an unknown model."""
    lo, hi = time_range(start, end, bucket=bucket, whole_days=True)
    page = call_service(
        service.model_page,
        db_session=db_session,
        model=model,
        start=lo,
        end=hi,
        bucket=bucket,
        settings=settings,
        job_limit=job_limit,
    )
    return with_rfc3339(_with_team(page))
