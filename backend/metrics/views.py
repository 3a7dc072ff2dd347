"""Fleet REST over the metrics layer: ETT% trend, lost GPU-hours, regressions, failures (JSON, CSV).

Every answer here is summed from the per-UTC-day rollups, so its range is whole UTC days
(a sub-day bound answers 422, never a silently widened range); see docs/API.md.
"""

from __future__ import annotations

from typing import Any, Literal

from fastapi import APIRouter, Query
from fastapi.responses import Response

from backend.auth.deps import ReadAccess
from backend.deps import SessionDep, SettingsDep
from backend.ett.catalogue import COMPONENTS, FAILURE_KINDS
from backend.metrics import fleet as service
from backend.metrics.schemas import (
    FailuresByModel,
    FailureSeries,
    FleetEtt,
    LostAnswer,
    Regressions,
)
from backend.params import (
    alias_query,
    call_service,
    csv_response,
    end_query,
    parse_labels,
    pick_alias,
    start_query,
    time_range,
    with_rfc3339,
)

router = APIRouter(prefix="/fleet", tags=["fleet"])

Start = start_query()
End = end_query()
Bucket = Query(
    "day",
    description="'day', ISO 'week' (Monday 00:00 UTC) or calendar 'month' (the 1st, 00:00 UTC)",
)
ModelQ = Query(None, description="one model")
TeamQ = Query(None, description="the models this team owns")
OwnerAliasQ = alias_query("team", "the models this team owns")
LabelQ = Query(None, description="key=value, repeatable: jobs whose labels all match")
Format = Query("json", description="'json' or 'csv'")
CSV_JSON = {200: {"content": {"text/csv": {}}, "description": "JSON, or CSV with format=csv"}}


def _series_csv(answer: dict[str, Any], extra: list[str], name: str) -> Response:
    rows = with_rfc3339(answer["series"])
    return csv_response(rows, ["bucket", *extra, "partial"], name)


def _team(team: str | None, owner: str | None) -> str | None:
    return pick_alias("team", team, "owner", owner)


@router.get(
    "/ett",
    summary="Fleet ETT% per day or week, GPU-time weighted",
    response_model=FleetEtt,
    responses=CSV_JSON,
)
def fleet_ett(
    _auth: ReadAccess,
    db_session: SessionDep,
    start: str | None = Start,
    end: str | None = End,
    bucket: Literal["day", "week", "month"] = Bucket,
    model: str | None = ModelQ,
    team: str | None = TeamQ,
    owner: str | None = OwnerAliasQ,
    label: list[str] | None = LabelQ,
    format: Literal["json", "csv"] = Format,
) -> Any:
    """`{"series": [{"bucket", "ett_pct", "wall_gpu_h", "effective_gpu_h", "components_gpu_h"}]}`."""
    lo, hi = time_range(start, end, bucket=bucket, whole_days=True)
    answer = call_service(
        service.fleet_ett,
        db_session=db_session,
        start=lo,
        end=hi,
        bucket=bucket,
        model=model,
        owner=_team(team, owner),
        labels=parse_labels(label),
    )
    answer = {**answer, "start": lo, "end": hi}
    if format == "csv":
        cols = ["ett_pct", "wall_gpu_h", "effective_gpu_h", "lost_gpu_h"]
        cols += [f"components_gpu_h.{c}" for c in COMPONENTS]
        return _series_csv(answer, cols, "fleet-ett.csv")
    return with_rfc3339(answer)


@router.get(
    "/lost",
    summary="Lost GPU-hours by component, phase, owner or system",
    response_model=LostAnswer,
    response_model_exclude_unset=True,
    responses=CSV_JSON,
)
def lost(
    _auth: ReadAccess,
    db_session: SessionDep,
    settings: SettingsDep,
    start: str | None = Start,
    end: str | None = End,
    by: Literal["component", "phase", "owner", "system"] = Query(
        "component", description="group by component, phase, owner (of the component) or system"
    ),
    model: str | None = ModelQ,
    team: str | None = TeamQ,
    owner: str | None = OwnerAliasQ,
    label: list[str] | None = LabelQ,
    format: Literal["json", "csv"] = Format,
) -> Any:
    """`{"by", "start", "end", "total_gpu_h", "rows": [{<by>, "gpu_h", "share", "components"}]}`."""
    lo, hi = time_range(start, end, whole_days=True)
    rows = call_service(
        service.lost_gpu_hours,
        db_session=db_session,
        settings=settings,
        start=lo,
        end=hi,
        by=by,
        model=model,
        owner=_team(team, owner),
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


@router.get(
    "/regressions",
    summary="Models whose ETT% fell most between two ranges",
    response_model=Regressions,
    responses=CSV_JSON,
)
def regressions(
    _auth: ReadAccess,
    db_session: SessionDep,
    before_start: str | None = start_query("the earlier range's start", "after_start - 30 days"),
    before_end: str | None = end_query("the earlier range's end", "after_start"),
    after_start: str | None = start_query("the later range's start", "after_end - 30 days"),
    after_end: str | None = end_query("the later range's end"),
    limit: int = Query(20, ge=1, le=500),
    team: str | None = TeamQ,
    owner: str | None = OwnerAliasQ,
    label: list[str] | None = LabelQ,
    format: Literal["json", "csv"] = Format,
) -> Any:
    """`{"before": {start, end}, "after": {start, end}, "models": [...]}`, largest fall first."""
    a_lo, a_hi = time_range(
        after_start,
        after_end,
        default_days=30,
        names=("after_start", "after_end"),
        whole_days=True,
    )
    b_lo, b_hi = time_range(
        before_start,
        before_end,
        default_days=30,
        now=a_lo,
        names=("before_start", "before_end"),
        whole_days=True,
    )
    rows = call_service(
        service.regressions,
        db_session=db_session,
        before_start=b_lo,
        before_end=b_hi,
        after_start=a_lo,
        after_end=a_hi,
        limit=limit,
        owner=_team(team, owner),
        labels=parse_labels(label),
    )
    rows = [{**r, "team": r.get("owner")} for r in rows]
    if format == "csv":
        cols = ["model", "team", "ett_pct_before", "ett_pct_after", "delta_pp", "driver"]
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


@router.get(
    "/failures",
    summary="Failures per day or week: NoF by kind, attempts per job, rate",
    response_model=FailureSeries,
    responses=CSV_JSON,
)
def failures(
    _auth: ReadAccess,
    db_session: SessionDep,
    start: str | None = Start,
    end: str | None = End,
    bucket: Literal["day", "week", "month"] = Bucket,
    model: str | None = ModelQ,
    team: str | None = TeamQ,
    owner: str | None = OwnerAliasQ,
    label: list[str] | None = LabelQ,
    format: Literal["json", "csv"] = Format,
) -> Any:
    """`{"series": [{"bucket", "failures", "nof_by_kind", "attempts_per_job", ...}], "total"}`."""
    lo, hi = time_range(start, end, bucket=bucket, whole_days=True)
    answer = call_service(
        service.failure_series,
        db_session=db_session,
        start=lo,
        end=hi,
        bucket=bucket,
        model=model,
        owner=_team(team, owner),
        labels=parse_labels(label),
    )
    answer = {**answer, "start": lo, "end": hi}
    if format == "csv":
        return _series_csv(answer, _FAILURE_COLS, "failures.csv")
    return with_rfc3339(answer)


@router.get(
    "/failures/by-model",
    summary="Failures per model over a range",
    response_model=FailuresByModel,
    responses=CSV_JSON,
)
def failures_by_model(
    _auth: ReadAccess,
    db_session: SessionDep,
    start: str | None = Start,
    end: str | None = End,
    team: str | None = TeamQ,
    owner: str | None = OwnerAliasQ,
    label: list[str] | None = LabelQ,
    format: Literal["json", "csv"] = Format,
) -> Any:
    """`{"start", "end", "models": [{"model", "failures", "nof_by_kind", ...}]}`."""
    lo, hi = time_range(start, end, whole_days=True)
    rows = call_service(
        service.failures_by_model,
        db_session=db_session,
        start=lo,
        end=hi,
        owner=_team(team, owner),
        labels=parse_labels(label),
    )
    if format == "csv":
        return csv_response(rows, ["model", *_FAILURE_COLS], "failures-by-model.csv")
    return with_rfc3339({"start": lo, "end": hi, "models": rows})
