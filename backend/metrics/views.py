"""Fleet REST over the metrics layer: ETT% trend, lost GPU-hours, regressions, failures (JSON, CSV).

Every answer here is summed from the per-UTC-day rollups, so its range is whole UTC days
(a sub-day bound answers 422, never a silently widened range); see docs/API.md.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, Query
from fastapi.responses import Response

from backend.auth.deps import ReadAccess
from backend.deps import SessionDep, SettingsDep
from backend.ett.catalogue import COMPONENTS, FAILURE_KINDS, LOST_COMPONENTS
from backend.metrics import fleet, nodes, reliability
from backend.metrics.schemas import (
    FailuresByModel,
    FailureSeries,
    FleetEtt,
    LostAnswer,
    MttfAnswer,
    NodesAnswer,
    Regressions,
)
from backend.params import (
    alias_help,
    call_service,
    csv_response,
    end_help,
    end_query,
    parse_labels,
    pick_alias,
    start_help,
    start_query,
    time_range,
    with_rfc3339,
)

router = APIRouter(prefix="/fleet", tags=["fleet"])

CSV_JSON = {200: {"content": {"text/csv": {}}, "description": "JSON, or CSV with format=csv"}}
DRIVERS_LIMIT = 20
BUCKET_HELP = "'day', ISO 'week' (Monday 00:00 UTC) or calendar 'month' (the 1st, 00:00 UTC)"


# The query parameters the fleet routes share, declared once (docs/API.md gives their
# meaning). Each route takes the widest of these it answers: FleetSeries has all eight.
@dataclass
class FleetScope:
    """Which jobs an answer covers (team, labels) and how it is written (format)."""

    team: Annotated[
        str | None, Query(description="the jobs of this team (owner label, else the model's team)")
    ] = None
    owner: Annotated[
        str | None,
        Query(
            deprecated=True,
            description=alias_help(
                "team", "the jobs of this team (owner label, else the model's team)"
            ),
        ),
    ] = None
    label: Annotated[
        list[str] | None, Query(description="key=value, repeatable: jobs whose labels all match")
    ] = None
    format: Annotated[Literal["json", "csv"], Query(description="'json' or 'csv'")] = "json"

    def filters(self) -> dict[str, Any]:
        """The metrics layer's filter arguments (owner: the team; 422 on a malformed label)."""
        return {
            "owner": pick_alias("team", self.team, "owner", self.owner),
            "labels": parse_labels(self.label),
        }


@dataclass
class FleetRange(FleetScope):
    """A scope over whole UTC days [start, end)."""

    start: Annotated[str | None, Query(description=start_help(), examples=["-180d"])] = None
    end: Annotated[str | None, Query(description=end_help())] = None

    def range(self, bucket: str | None = None) -> tuple[float, float]:
        """[start, end) in epoch seconds, whole UTC days (422 otherwise, or over a bound)."""
        return time_range(self.start, self.end, bucket=bucket, whole_days=True)


@dataclass
class FleetModelRange(FleetRange):
    """A range scope that may be narrowed to one model."""

    model: Annotated[str | None, Query(description="one model")] = None

    def filters(self) -> dict[str, Any]:
        """The scope's filters and the model."""
        return {**super().filters(), "model": self.model}


@dataclass
class FleetSeries(FleetModelRange):
    """A model range scope cut into day, week or month buckets."""

    bucket: Annotated[Literal["day", "week", "month"], Query(description=BUCKET_HELP)] = "day"

    def range(self, bucket: str | None = None) -> tuple[float, float]:
        """[start, end), held to the bounds of the scope's bucket."""
        return super().range(bucket or self.bucket)


@dataclass
class WholeDays:
    """A range of whole UTC days [start, end), fleet-wide (no team or label filter)."""

    start: Annotated[str | None, Query(description=start_help(), examples=["-30d"])] = None
    end: Annotated[str | None, Query(description=end_help())] = None

    def range(self) -> tuple[float, float]:
        """[start, end) in epoch seconds, whole UTC days (422 otherwise)."""
        return time_range(self.start, self.end, whole_days=True)


def _series_csv(answer: dict[str, Any], extra: list[str], name: str) -> Response:
    rows = with_rfc3339(answer["series"])
    return csv_response(rows, ["bucket", *extra, "partial"], name)


@router.get(
    "/ett",
    summary="Fleet ETT% per day or week, GPU-time weighted",
    response_model=FleetEtt,
    responses=CSV_JSON,
)
def fleet_ett(
    _auth: ReadAccess, db_session: SessionDep, q: Annotated[FleetSeries, Depends()]
) -> Any:
    """`{"series": [{"bucket", "ett_pct", "wall_gpu_h", "effective_gpu_h", "components_gpu_h"}]}`."""
    lo, hi = q.range()
    answer = call_service(
        fleet.fleet_ett,
        db_session=db_session,
        start=lo,
        end=hi,
        bucket=q.bucket,
        **q.filters(),
    )
    answer = {**answer, "start": lo, "end": hi}
    if q.format == "csv":
        cols = ["ett_pct", "wall_gpu_h", "effective_gpu_h", "lost_gpu_h"]
        cols += [f"components_gpu_h.{c}" for c in COMPONENTS]
        return _series_csv(answer, cols, "fleet-ett.csv")
    return with_rfc3339(answer)


@router.get(
    "/lost",
    summary="Lost GPU-hours by component, phase, owner or system; a component's top models, jobs",
    response_model=LostAnswer,
    response_model_exclude_unset=True,
    responses=CSV_JSON,
)
def lost(
    _auth: ReadAccess,
    db_session: SessionDep,
    settings: SettingsDep,
    q: Annotated[FleetModelRange, Depends()],
    by: Literal["component", "phase", "owner", "system", "model", "job"] = Query(
        "component",
        description="group by component, phase, owner (of the component) or system; or rank "
        "the models or jobs that lost most (with component=, in that component)",
    ),
    component: Literal[LOST_COMPONENTS] | None = Query(  # type: ignore[valid-type]
        None, description="only the GPU-hours lost in this component"
    ),
    component_owner: str | None = Query(
        None,
        description="by=model or job: only the parts (component or phase) this component "
        "owner owns, as GET /owners maps them",
    ),
    top: int | None = Query(
        None,
        ge=1,
        le=1000,
        description="the most rows (default: 20 for by=model or job, every row otherwise); "
        "total_gpu_h counts them all",
    ),
) -> Any:
    """`{"by", "start", "end", "total_gpu_h", "rows": [{<by>, "gpu_h", "share", "components"}]}`.

    by=job rows carry `job_id` and `model`; by=model rows `model`.
    """
    lo, hi = q.range()
    scope = {"db_session": db_session, "settings": settings, "start": lo, "end": hi, "by": by}
    if by in fleet.DRIVERS_BY:
        rows = call_service(
            fleet.lost_drivers,
            component=component,
            component_owner=component_owner,
            **scope,
            **q.filters(),
        )
    else:
        rows = call_service(fleet.lost_gpu_hours, component=component, **scope, **q.filters())
    total = sum(r["gpu_h"] for r in rows)
    rows = rows[: top or (DRIVERS_LIMIT if by in fleet.DRIVERS_BY else None)]
    key = "job_id" if by == "job" else by
    if q.format == "csv":
        cols = [key, "model", "gpu_h", "share"] if by == "job" else [key, "gpu_h", "share"]
        return csv_response(rows, cols, f"lost-by-{by}.csv")
    return with_rfc3339({"by": by, "start": lo, "end": hi, "total_gpu_h": total, "rows": rows})


@router.get(
    "/regressions",
    summary="Models whose ETT% fell most between two ranges",
    response_model=Regressions,
    responses=CSV_JSON,
)
def regressions(
    _auth: ReadAccess,
    db_session: SessionDep,
    q: Annotated[FleetScope, Depends()],
    before_start: str | None = start_query("the earlier range's start", "after_start - 30 days"),
    before_end: str | None = end_query("the earlier range's end", "after_start"),
    after_start: str | None = start_query("the later range's start", "after_end - 30 days"),
    after_end: str | None = end_query("the later range's end"),
    limit: int = Query(20, ge=1, le=500),
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
        fleet.regressions,
        db_session=db_session,
        before_start=b_lo,
        before_end=b_hi,
        after_start=a_lo,
        after_end=a_hi,
        limit=limit,
        **q.filters(),
    )
    rows = [{**r, "team": r.get("owner")} for r in rows]
    if q.format == "csv":
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
    _auth: ReadAccess, db_session: SessionDep, q: Annotated[FleetSeries, Depends()]
) -> Any:
    """`{"series": [{"bucket", "failures", "nof_by_kind", "attempts_per_job", ...}], "total"}`."""
    lo, hi = q.range()
    answer = call_service(
        fleet.failure_series,
        db_session=db_session,
        start=lo,
        end=hi,
        bucket=q.bucket,
        **q.filters(),
    )
    answer = {**answer, "start": lo, "end": hi}
    if q.format == "csv":
        return _series_csv(answer, _FAILURE_COLS, "failures.csv")
    return with_rfc3339(answer)


@router.get(
    "/failures/by-model",
    summary="Failures per model over a range",
    response_model=FailuresByModel,
    responses=CSV_JSON,
)
def failures_by_model(
    _auth: ReadAccess, db_session: SessionDep, q: Annotated[FleetRange, Depends()]
) -> Any:
    """`{"start", "end", "models": [{"model", "failures", "nof_by_kind", ...}]}`."""
    lo, hi = q.range()
    rows = call_service(
        fleet.failures_by_model,
        db_session=db_session,
        start=lo,
        end=hi,
        **q.filters(),
    )
    if q.format == "csv":
        return csv_response(rows, ["model", *_FAILURE_COLS], "failures-by-model.csv")
    return with_rfc3339({"start": lo, "end": hi, "models": rows})


@router.get(
    "/nodes",
    summary="Per host: attempts, failures by cause, failures per node-day, TTR loss, lemon nodes",
    response_model=NodesAnswer,
)
def fleet_nodes(
    _auth: ReadAccess, db_session: SessionDep, q: Annotated[WholeDays, Depends()]
) -> Any:
    """`{"start", "end", "fleet", "test", "nodes": [...]}`: lemon nodes first (docs/API.md)."""
    lo, hi = q.range()
    return with_rfc3339(call_service(nodes.nodes, db_session=db_session, start=lo, end=hi))


@router.get(
    "/mttf",
    summary="MTTF by job size: effective training hours per unplanned failure",
    response_model=MttfAnswer,
)
def fleet_mttf(
    _auth: ReadAccess, db_session: SessionDep, q: Annotated[WholeDays, Depends()]
) -> Any:
    """`{"start", "end", "buckets": [{"gpus", "jobs", "effective_h", "unplanned_failures", "mttf_h"}]}`."""
    lo, hi = q.range()
    return with_rfc3339(
        call_service(reliability.mttf_by_size, db_session=db_session, start=lo, end=hi)
    )
