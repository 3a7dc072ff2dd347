"""REST: the job list and one job's ETT answer (partition, Level 1, phases, intervals)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter, HTTPException, Query
from fastapi.responses import JSONResponse

from backend.auth.deps import ReadAccess
from backend.deps import SessionDep, SettingsDep
from backend.ett.catalogue import COMPONENTS, JOB_STATUSES
from backend.jobs import quarantine
from backend.params import (
    alias_query,
    end_query,
    parse_labels,
    parse_time_param,
    pick_alias,
    round_for,
    round_number,
    rounded,
    start_query,
)
from backend.results import read
from backend.results.schemas import JobEtt, JobPage, JobSummary, JobUncomputable
from backend.timefmt import rfc3339

router = APIRouter(tags=["jobs"])
# The job answer's second-valued maps, whose keys are component and waste names, not units.
JOB_ETT_ROUNDING: dict[str, int | None] = {"components": 3, "wasted": 3}

# Open jobs' states, every job_ended status (backend.ett.catalogue.JOB_ENDS), abandoned, unknown.
LIST_STATUSES: tuple[str, ...] = ("pending", "running", *JOB_STATUSES, "abandoned", "unknown")
JobStatus = Literal[LIST_STATUSES]  # type: ignore[valid-type]
Component = Literal[COMPONENTS]  # type: ignore[valid-type]
SortKey = Literal[
    "ett_pct",
    "-ett_pct",
    "gpu_hours_lost",
    "-gpu_hours_lost",
    "submitted_at",
    "-submitted_at",
    "e2e_s",
    "-e2e_s",
    "component_gpu_h",
    "-component_gpu_h",
]


@router.get("/jobs", response_model=JobPage)
def list_jobs(
    db_session: SessionDep,
    _access: ReadAccess,
    model: str | None = None,
    team: Annotated[
        str | None, Query(description="the job's team: its owner label, else its model's team")
    ] = None,
    owner: str | None = alias_query("team", "the job's team"),
    label: Annotated[list[str] | None, Query(description="key=value, repeatable")] = None,
    status: JobStatus | None = None,
    component: Annotated[
        Component | None,
        Query(
            description="jobs with time in this Level-2 component inside [start, end); each "
            "job then has its GPU-hours in it (component_gpu_h, over its whole life), which "
            "sort=component_gpu_h orders by"
        ),
    ] = None,
    start: str | None = start_query(
        "jobs whose lifetime overlaps [start, end): still running at or after", "none"
    ),
    end: str | None = end_query("jobs submitted before (a date is inclusive)", "none"),
    sort: Annotated[
        SortKey,
        Query(description="a column, '-' first for descending; component_gpu_h needs component"),
    ] = "-submitted_at",
    limit: Annotated[int, Query(ge=1, le=1000)] = 50,
    offset: Annotated[int, Query(ge=0)] = 0,
) -> JobPage:
    """Jobs with their ETT%, lost GPU-hours and Level-1 headline numbers; filter, sort, page.

    Without start and end every job is listed (the list is also a lookup by id).
    """
    lo, hi = parse_time_param(start, "start"), parse_time_param(end, "end")
    if lo is not None and hi is not None and lo >= hi:
        raise HTTPException(422, "start must be before end")
    if sort.lstrip("-") == read.COMPONENT_SORT and component is None:
        raise HTTPException(422, f"sort={sort} needs component= (the component to sort by)")
    rows, total = read.list_jobs(
        db_session=db_session,
        model=model,
        owner=pick_alias("team", team, "owner", owner),
        labels=parse_labels(label),
        status=status,
        component=component,
        start=lo,
        end=hi,
        sort=sort,
        limit=limit,
        offset=offset,
    )
    jobs = [
        JobSummary(
            **{
                k: round_number(v, round_for(k)) if isinstance(v, float) else v
                for k, v in r.items()
                if k not in ("submitted_at", "ended_at", "computed_at")
            },
            team=r.get("owner"),
            submitted_at=rfc3339(r["submitted_at"]),
            ended_at=rfc3339(r["ended_at"]),
        )
        for r in rows
    ]
    return JobPage(
        total=total, limit=limit, offset=offset, start=rfc3339(lo), end=rfc3339(hi), jobs=jobs
    )


@router.get(
    "/jobs/{job_id:path}/ett",
    response_model=JobEtt,
    responses={
        404: {"description": "no events were ingested for the job"},
        422: {"model": JobUncomputable, "description": "nothing could be computed for the job"},
    },
)
def get_job_ett(
    job_id: str, db_session: SessionDep, settings: SettingsDep, _access: ReadAccess
) -> Any:
    """One job's ETT answer: components, wasted, l1, phases, warnings and attributed intervals.

    `quarantine` is null, or the error of a job whose computation fails (then the answer is
    422 when nothing could be computed for it).
    """
    try:
        doc = read.job_ett(db_session=db_session, job_id=job_id, settings=settings, fmt=rfc3339)
    except read.Uncomputable as err:
        db_session.rollback()
        held = quarantine.status(db_session=db_session, job_id=job_id)
        error = held["error"] if held else str(err)
        return JSONResponse(
            status_code=422,
            content={
                "detail": f"job {job_id!r} cannot be computed: {error}",
                "quarantine": _quarantine_read(held),
            },
        )
    if doc is None:
        raise HTTPException(
            404,
            f"job {job_id!r} not found: no events were ingested for it, or they are not "
            "accounted yet (the recompute worker stores each job's answer; retry shortly)",
        )
    doc["quarantine"] = _quarantine_read(quarantine.status(db_session=db_session, job_id=job_id))
    return rounded(doc, by_key=JOB_ETT_ROUNDING)


def _quarantine_read(held: dict[str, Any] | None) -> dict[str, Any] | None:
    if held is None:
        return None
    return {k: rfc3339(v) if k.endswith("_at") else v for k, v in held.items()}
