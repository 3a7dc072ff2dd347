"""Fleet REST: ETT% trend, lost GPU-hours, regressions, failures (JSON, or CSV for tables)."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from fastapi import APIRouter, Query
from fastapi.responses import Response

from backend.auth.deps import ReadAccess
from backend.deps import SessionDep, SettingsDep
from backend.ett.catalogue import COMPONENTS, FAILURE_KINDS
from backend.metrics import fleet as service
from backend.params import (
    call_service,
    csv_response,
    parse_labels,
    time_range,
    with_rfc3339,
)

router = APIRouter(prefix="/fleet", tags=["fleet"])

Start = Query(
    None, description="range start (RFC 3339, date or epoch seconds); default end - 180 days"
)
End = Query(None, description="range end, exclusive (default now)")
Bucket = Query("day", description="'day' or ISO 'week' (Monday 00:00 UTC)")
ModelQ = Query(None, description="one model")
OwnerQ = Query(None, description="the models of this owning team")
LabelQ = Query(None, description="key=value, repeatable: jobs whose labels all match")
Format = Query("json", description="'json' or 'csv'")


def _series_csv(answer: dict[str, Any], extra: list[str], name: str) -> Response:
    rows = with_rfc3339(answer["series"])
    return csv_response(rows, ["bucket", *extra], name)


@router.get("/ett", summary="Fleet ETT% per day or week, GPU-time weighted")
def fleet_ett(
    _auth: ReadAccess,
    db_session: SessionDep,
    start: datetime | None = Start,
    end: datetime | None = End,
    bucket: Literal["day", "week"] = Bucket,
    model: str | None = ModelQ,
    owner: str | None = OwnerQ,
    label: list[str] | None = LabelQ,
    format: Literal["json", "csv"] = Format,
) -> Any:
    """`{"series": [{"bucket", "ett_pct", "wall_gpu_h", "effective_gpu_h", "components_gpu_h"}]}`."""
    lo, hi = time_range(start, end, bucket=bucket)
    answer = call_service(
        service.fleet_ett,
        db_session=db_session,
        start=lo,
        end=hi,
        bucket=bucket,
        model=model,
        owner=owner,
        labels=parse_labels(label),
    )
    if format == "csv":
        cols = ["ett_pct", "wall_gpu_h", "effective_gpu_h", "lost_gpu_h"]
        cols += [f"components_gpu_h.{c}" for c in COMPONENTS]
        return _series_csv(answer, cols, "fleet-ett.csv")
    return with_rfc3339(answer)


@router.get("/lost", summary="Lost GPU-hours by component, phase, owner or system")
def lost(
    _auth: ReadAccess,
    db_session: SessionDep,
    settings: SettingsDep,
    start: datetime | None = Start,
    end: datetime | None = End,
    by: Literal["component", "phase", "owner", "system"] = Query("component"),
    model: str | None = ModelQ,
    owner: str | None = OwnerQ,
    label: list[str] | None = LabelQ,
    format: Literal["json", "csv"] = Format,
) -> Any:
    """`{"by", "start", "end", "total_gpu_h", "rows": [{<by>, "gpu_h", "share", "components"}]}`."""
    lo, hi = time_range(start, end)
    rows = call_service(
        service.lost_gpu_hours,
        db_session=db_session,
        settings=settings,
        start=lo,
        end=hi,
        by=by,
        model=model,
        owner=owner,
        labels=parse_labels(label),
    )
    if format == "csv":
        return csv_response(rows, [by, "gpu_h", "share"], f"lost-by-{by}.csv")
    return with_rfc3339(
        {
            "by": by,
            "start": lo,
            "end": hi,
            "total_gpu_h": sum(r["gpu_h"] for r in rows),
            "rows": rows,
        }
    )


@router.get("/regressions", summary="Models whose ETT% fell most between two ranges")
def regressions(
    _auth: ReadAccess,
    db_session: SessionDep,
    before_start: datetime | None = Query(None, description="default: after_start - 30 days"),
    before_end: datetime | None = Query(None, description="default: after_start"),
    after_start: datetime | None = Query(None, description="default: after_end - 30 days"),
    after_end: datetime | None = Query(None, description="default: now"),
    limit: int = Query(20, ge=1, le=500),
    owner: str | None = OwnerQ,
    label: list[str] | None = LabelQ,
    format: Literal["json", "csv"] = Format,
) -> Any:
    """`{"before": {start, end}, "after": {start, end}, "models": [...]}`, largest fall first."""
    a_lo, a_hi = time_range(
        after_start, after_end, default_days=30, names=("after_start", "after_end")
    )
    b_lo, b_hi = time_range(
        before_start, before_end, default_days=30, now=a_lo, names=("before_start", "before_end")
    )
    rows = call_service(
        service.regressions,
        db_session=db_session,
        before_start=b_lo,
        before_end=b_hi,
        after_start=a_lo,
        after_end=a_hi,
        limit=limit,
        owner=owner,
        labels=parse_labels(label),
    )
    if format == "csv":
        cols = ["model", "owner", "ett_pct_before", "ett_pct_after", "delta_pp", "driver"]
        cols += ["driver_share_pp", "lost_gpu_h_after", "wall_gpu_h_after"]
        return csv_response(rows, cols, "regressions.csv")
    return with_rfc3339(
        {
            "before": {"start": b_lo, "end": b_hi},
            "after": {"start": a_lo, "end": a_hi},
            "models": rows,
        }
    )


_FAILURE_COLS = [
    "failures",
    *(f"nof_by_kind.{k}" for k in FAILURE_KINDS),
    "jobs",
    "attempts",
    "attempts_per_job",
    "attempts_per_job_excl_preemption",
    "wall_gpu_h",
    "failures_per_1000_gpu_h",
]


@router.get("/failures", summary="Failures per day or week: NoF by kind, attempts per job, rate")
def failures(
    _auth: ReadAccess,
    db_session: SessionDep,
    start: datetime | None = Start,
    end: datetime | None = End,
    bucket: Literal["day", "week"] = Bucket,
    model: str | None = ModelQ,
    owner: str | None = OwnerQ,
    label: list[str] | None = LabelQ,
    format: Literal["json", "csv"] = Format,
) -> Any:
    """`{"series": [{"bucket", "failures", "nof_by_kind", "attempts_per_job", ...}], "total"}`."""
    lo, hi = time_range(start, end, bucket=bucket)
    answer = call_service(
        service.failure_series,
        db_session=db_session,
        start=lo,
        end=hi,
        bucket=bucket,
        model=model,
        owner=owner,
        labels=parse_labels(label),
    )
    if format == "csv":
        return _series_csv(answer, _FAILURE_COLS, "failures.csv")
    return with_rfc3339(answer)


@router.get("/failures/by-model", summary="Failures per model over a range")
def failures_by_model(
    _auth: ReadAccess,
    db_session: SessionDep,
    start: datetime | None = Start,
    end: datetime | None = End,
    owner: str | None = OwnerQ,
    label: list[str] | None = LabelQ,
    format: Literal["json", "csv"] = Format,
) -> Any:
    """`{"start", "end", "models": [{"model", "failures", "nof_by_kind", ...}]}`."""
    lo, hi = time_range(start, end)
    rows = call_service(
        service.failures_by_model,
        db_session=db_session,
        start=lo,
        end=hi,
        owner=owner,
        labels=parse_labels(label),
    )
    if format == "csv":
        return csv_response(rows, ["model", *_FAILURE_COLS], "failures-by-model.csv")
    return with_rfc3339({"start": lo, "end": hi, "models": rows})
