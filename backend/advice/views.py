"""Advice REST: a model's checkpoint interval, a job's init critical path and fast-batch."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from fastapi import APIRouter, HTTPException, Query

from backend.advice import service
from backend.auth.deps import ReadAccess
from backend.deps import SessionDep, SettingsDep
from backend.params import call_service, epoch, with_rfc3339

router = APIRouter(tags=["advice"])


@router.get(
    "/models/{model}/checkpoint-advice",
    summary="Checkpoint interval advice (Eq. 2, Fig. 3) from the model's measured jobs",
)
def checkpoint_advice(
    model: str,
    _auth: ReadAccess,
    db_session: SessionDep,
    start: datetime | None = Query(None, description="jobs submitted from (default end - 30 d)"),
    end: datetime | None = Query(None, description="jobs submitted before (default now)"),
    points: int = Query(60, ge=5, le=500, description="points on the WTT curve"),
) -> Any:
    """CSBT, failure rate, current and optimal interval, WTT curve, minutes a day, UTT."""
    lo, hi = epoch(start), epoch(end)
    if lo is not None and hi is not None and lo >= hi:
        raise HTTPException(422, "start must be before end")
    return with_rfc3339(
        call_service(
            service.checkpoint_advice,
            db_session=db_session,
            model=model,
            start=lo,
            end=hi,
            points=points,
        )
    )


@router.get(
    "/jobs/{job_id}/critical-path",
    summary="Each attempt's init critical path (Fig. 2) and the fast-batch what-if (Eq. 4)",
)
def critical_path(
    job_id: str, _auth: ReadAccess, db_session: SessionDep, settings: SettingsDep
) -> Any:
    """`{"job_id", "attempts": [{attempt, path, phases, fast_batch, ...}], "fast_batch"}`."""
    return with_rfc3339(
        call_service(service.critical_path, db_session=db_session, job_id=job_id, settings=settings)
    )
