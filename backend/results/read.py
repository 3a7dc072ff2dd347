"""The read model of computed jobs: one job's answer, job lists, Level-1 columns, statuses."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from sqlalchemy import exists, func, or_, select
from sqlalchemy.orm import Session

from backend.config import Settings
from backend.ett.catalogue import attempt_label, failure_cause, failure_domain, is_planned
from backend.ett.models import JobInterval, JobResult
from backend.fleet import weights
from backend.fleet.models import FleetJobDay
from backend.jobs import quarantine
from backend.jobs.models import Job, Model
from backend.jobs.team import job_team, team_clause


class Uncomputable(ValueError):
    """A job that cannot be computed into an answer; the message says why (REST answers 422)."""


SORTS: dict[str, Any] = {
    "ett_pct": JobResult.ett_pct,
    "gpu_hours_lost": JobResult.gpu_hours_lost,
    "submitted_at": JobResult.submitted_at,
    "e2e_s": JobResult.e2e_s,
}
# Sorts by the GPU-hours a job lost in the list's `component` (its whole life).
COMPONENT_SORT = "component_gpu_h"


def _component_gpu_s(component: str) -> Any:
    """Per job, the GPU-seconds it spent in `component` (from the per-job fleet day table)."""
    return (
        select(FleetJobDay.job_id, func.sum(FleetJobDay.gpu_s).label("gpu_s"))
        .where(FleetJobDay.component == component)
        .group_by(FleetJobDay.job_id)
        .subquery()
    )


def _failure_times(f: Mapping[str, Any], fmt: Callable[[float], Any]) -> dict[str, Any]:
    """One stored failure with its times through `fmt`; one stored before causes gets its
    kind's cause, domain and plan."""
    kind = f.get("kind", "unknown")
    out = {
        "cause": failure_cause(kind, None),
        "domain": failure_domain(kind, None),
        "planned": is_planned(kind, None),
        "rank": None,
        **f,
        "ts": fmt(f["ts"]),
    }
    out["cascade"] = [{**c, "ts": fmt(c["ts"])} for c in f.get("cascade") or []]
    return out


def _format_times(doc: dict[str, Any], fmt: Callable[[float], Any]) -> dict[str, Any]:
    """A stored result (epoch floats) with its time fields passed through `fmt`."""
    out = dict(doc)
    out.pop("spans", None)  # stored for the advice, not part of the REST answer
    out.pop("live", None)  # stored for the live state (GET /api/v1/live), not for this answer
    for key in ("submitted_at", "ended_at", "live_tail_start"):
        if out.get(key) is not None:
            out[key] = fmt(out[key])
    l1 = dict(out.get("l1") or {})
    l1["failures"] = [_failure_times(f, fmt) for f in l1.get("failures", [])]
    out["l1"] = l1
    out["attempts"] = [
        {
            # Results stored before attempts had words: from the number alone.
            "label": attempt_label(a.get("attempt"), bool(a.get("in_place"))),
            **a,
            "started_at": fmt(a["started_at"]),
            "ended_at": None if a.get("ended_at") is None else fmt(a["ended_at"]),
        }
        for a in out.get("attempts", [])
    ]
    return out


def job_ett(
    *,
    db_session: Session,
    job_id: str,
    settings: Settings | None = None,
    fmt: Callable[[float], Any] | None = None,
    now: float | None = None,
) -> dict[str, Any] | None:
    """One job's full answer, as stored: an open job's is its provisional answer, which the
    recompute worker keeps fresh (extended per batch, refreshed every OPEN_JOB_REFRESH_S).

    No raw event is read here. None when the job has no stored answer yet; raises
    Uncomputable when its recompute fails (the job is quarantined) and nothing is stored.
    """
    fmt = fmt or (lambda t: t)
    row = db_session.get(JobResult, job_id)
    if row is None:
        held = quarantine.status(db_session=db_session, job_id=job_id)
        if held is not None:
            raise Uncomputable(str(held["error"]))
        return None
    doc = _format_times(row.result, fmt)
    ivs = db_session.execute(
        select(
            JobInterval.start,
            JobInterval.end,
            JobInterval.attempt,
            JobInterval.component,
            JobInterval.phase,
            JobInterval.gpus,
        )
        .where(JobInterval.job_id == job_id)
        .order_by(JobInterval.start)
    )
    job_gpus = doc.get("gpus")
    doc["intervals"] = [
        {
            "start": fmt(s),
            "end": fmt(e),
            "attempt": a,
            "component": c,
            "phase": p,
            "gpus": weights.interval_gpus(g, job_gpus),
        }
        for s, e, a, c, p, g in ivs
    ]
    return doc


# The job list's columns of job_results, in the order of its rows.
LIST_COLUMNS = (
    "job_id",
    "model",
    "gpus",
    "status",
    "provisional",
    "submitted_at",
    "ended_at",
    "e2e_s",
    "effective_s",
    "ett_pct",
    "gpu_hours_lost",
    "nof",
    "tts_s",
    "recovery_s",
    "computed_at",
)


def list_jobs(
    *,
    db_session: Session,
    model: str | None = None,
    owner: str | None = None,
    labels: Mapping[str, str] | None = None,
    status: str | None = None,
    start: float | None = None,
    end: float | None = None,
    sort: str = "-submitted_at",
    limit: int = 50,
    offset: int = 0,
    search: str | None = None,
    component: str | None = None,
) -> tuple[list[dict[str, Any]], int]:
    """Computed jobs matching the filters (overlapping [start, end)), one page, and the total.

    `search` keeps the jobs whose id or model starts with it; `component` those with time in
    that Level-2 component inside [start, end) (a chart's bar: its bucket and component), and
    each row then has `component_gpu_h` (the GPU-hours the job spent in it over its whole life),
    which `sort` may name (component_gpu_h).
    """
    descending = sort.startswith("-")
    per_comp = _component_gpu_s(component) if component is not None else None
    if sort.lstrip("-") == COMPONENT_SORT:
        if per_comp is None:
            raise ValueError(f"sort={sort} needs component=")
        column = func.coalesce(per_comp.c.gpu_s, 0.0)
    else:
        column = SORTS[sort.lstrip("-")]
    where = []
    if model is not None:
        where.append(JobResult.model == model)
    if status is not None:
        where.append(JobResult.status == status)
    if search:
        where.append(
            or_(
                JobResult.job_id.startswith(search, autoescape=True),
                JobResult.model.startswith(search, autoescape=True),
            )
        )
    if start is not None:
        where.append(JobResult.ended_at >= start)
    if end is not None:
        where.append(JobResult.submitted_at < end)
    if component is not None:
        spent = [JobInterval.job_id == JobResult.job_id, JobInterval.component == component]
        if start is not None:
            spent.append(JobInterval.end > start)
        if end is not None:
            spent.append(JobInterval.start < end)
        where.append(exists().where(*spent))
    for key, value in (labels or {}).items():
        where.append(Job.labels[key].as_string() == value)
    if owner is not None:
        where.append(team_clause(owner))
    # The count joins only what its filters need: over a whole fleet it is the costly part.
    counted = select(func.count()).select_from(JobResult)
    if labels or owner is not None:
        counted = counted.join(Job, Job.job_id == JobResult.job_id)
    if owner is not None:
        counted = counted.outerjoin(Model, Model.name == JobResult.model)
    total = int(db_session.scalar(counted.where(*where)) or 0)
    # The page reads the columns it shows, not the stored result documents.
    extra = [per_comp.c.gpu_s] if per_comp is not None else []
    stmt = (
        select(*(getattr(JobResult, c) for c in LIST_COLUMNS), Job.labels, Model.owner, *extra)
        .join(Job, Job.job_id == JobResult.job_id)
        .outerjoin(Model, Model.name == JobResult.model)
        .where(*where)
    )
    if per_comp is not None:
        stmt = stmt.outerjoin(per_comp, per_comp.c.job_id == JobResult.job_id)
    order = column.desc() if descending else column.asc()
    stmt = stmt.order_by(order, JobResult.job_id).limit(limit).offset(offset)
    rows = []
    for values in db_session.execute(stmt):
        row = dict(zip(LIST_COLUMNS, values[: len(LIST_COLUMNS)], strict=True))
        job_labels, model_owner = values[len(LIST_COLUMNS)], values[len(LIST_COLUMNS) + 1]
        row["owner"] = job_team(job_labels, model_owner)
        row["labels"] = job_labels or {}
        if per_comp is not None:
            row["component_gpu_h"] = float(values[-1] or 0.0) / 3600.0
        rows.append(row)
    return rows, total


def level1_rows(
    *,
    db_session: Session,
    start: float,
    end: float,
    model: str | None = None,
    owner: str | None = None,
    labels: Mapping[str, str] | None = None,
) -> list[tuple[float, float, float, float, int]]:
    """(submitted_at, GPU weight, tts_s, recovery_s, nof) of the jobs submitted in [start, end).

    The Level-1 columns alone (no stored result documents), for the fleet's Level-1 view. A
    job's GPU weight is the GPUs it held on average over its wall time (per-attempt GPUs).
    """
    stmt = (
        select(
            JobResult.submitted_at,
            JobResult.gpus,
            JobResult.tts_s,
            JobResult.recovery_s,
            JobResult.nof,
            JobResult.e2e_s,
            JobResult.e2e_gpu_s,
        )
        .join(Job, Job.job_id == JobResult.job_id)
        .where(JobResult.submitted_at >= start, JobResult.submitted_at < end)
    )
    if model is not None:
        stmt = stmt.where(JobResult.model == model)
    for key, value in (labels or {}).items():
        stmt = stmt.where(Job.labels[key].as_string() == value)
    if owner is not None:
        stmt = stmt.outerjoin(Model, Model.name == JobResult.model).where(team_clause(owner))
    return [
        (t, weights.job_weight(gpus, e2e_s, e2e_gpu_s), tts, rec, nof)
        for t, gpus, tts, rec, nof, e2e_s, e2e_gpu_s in db_session.execute(stmt)
    ]


def job_statuses(*, db_session: Session) -> list[str]:
    """The distinct job statuses stored (the Jobs page's status filter)."""
    return sorted(db_session.scalars(select(JobResult.status).distinct()))
