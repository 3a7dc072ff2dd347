"""Advice REST: a model's checkpoint interval, a job's init critical path and fast-batch."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Query

from backend.advice import service
from backend.advice.schemas import CheckpointAdvice, CriticalPath
from backend.auth.deps import ReadAccess
from backend.deps import SessionDep, SettingsDep
from backend.params import (
    alias_query,
    call_service,
    end_query,
    pick_alias,
    start_query,
    submitted_range,
    with_rfc3339,
)

router = APIRouter(tags=["advice"])


@router.get(
    "/models/{model}/checkpoint-advice",
    summary="Checkpoint interval advice (Eq. 2, Fig. 3) from the model's measured jobs",
    response_model=CheckpointAdvice,
)
def checkpoint_advice(
    model: str,
    _auth: ReadAccess,
    db_session: SessionDep,
    submitted_after: str | None = start_query(
        "fit on jobs submitted at or after", "submitted_before - 30 days"
    ),
    submitted_before: str | None = end_query(
        "fit on jobs submitted before (a date is inclusive)", "now"
    ),
    start: str | None = alias_query("submitted_after", "jobs submitted at or after"),
    end: str | None = alias_query("submitted_before", "jobs submitted before"),
    points: int = Query(60, ge=5, le=500, description="points on the WTT curve"),
) -> Any:
    """CSBT, failure rate, current and optimal interval, WTT curve, minutes a day, UTT."""
    lo, hi = submitted_range(
        pick_alias("submitted_after", submitted_after, "start", start),
        pick_alias("submitted_before", submitted_before, "end", end),
        names=("submitted_after", "submitted_before"),
    )
    answer = call_service(
        service.checkpoint_advice,
        db_session=db_session,
        model=model,
        start=lo,
        end=hi,
        points=points,
    )
    return with_rfc3339(
        {**answer, "submitted_after": answer["start"], "submitted_before": answer["end"]}
    )


@router.get(
    "/jobs/{job_id}/critical-path",
    summary="Each attempt's init critical path (Fig. 2) and the fast-batch what-if (Eq. 4)",
    response_model=CriticalPath,
)
def critical_path(
    job_id: str, _auth: ReadAccess, db_session: SessionDep, settings: SettingsDep
) -> Any:
    """`{"job_id", "attempts": [{attempt, path, phases, fast_batch, ...}], "fast_batch"}`."""
    return with_rfc3339(
        call_service(service.critical_path, db_session=db_session, job_id=job_id, settings=settings)
    )
