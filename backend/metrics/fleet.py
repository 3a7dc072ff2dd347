"""Fleet answers: ETT% series, lost GPU-hours, regressions, failure series and per-model failures.

Times in and out are epoch seconds (the views format them). Scope filters, shared by all queries:
`model` (one model), `owner` (the team: the jobs of this team, `backend.jobs.team`) and
`labels` ({key: value}, jobs whose submission labels all match). Unknown models or owners raise
LookupError; bad arguments ValueError. `now` (default: the clock) decides which buckets are
still in progress, hence partial.
"""

from __future__ import annotations

import time
from collections import defaultdict
from typing import Any

from sqlalchemy.orm import Session

from backend.config import Settings
from backend.ett.catalogue import FAILURE_KINDS, LOST_COMPONENTS
from backend.fleet.days import bucket_start, bucket_starts
from backend.metrics import core
from backend.metrics.core import LOST_BY, ett_pct, lost_from_rows, series_from_rows
from backend.metrics.reads import (
    failure_counts,
    gpu_rows,
    job_counts,
    jobs_with_time,
    model_owners,
    scope_models,
)
from backend.owners import service as owners_service

__all__ = [
    "DRIVERS_BY",
    "LOST_BY",
    "by_model",
    "ett_pct",
    "failure_series",
    "failures_by_model",
    "fleet_ett",
    "gpu_rows",
    "lost_from_rows",
    "lost_drivers",
    "lost_gpu_hours",
    "model_owners",
    "regressions",
    "scope_models",
    "series_from_rows",
]


def fleet_ett(
    *,
    db_session: Session,
    start: float,
    end: float,
    bucket: str = "day",
    model: str | None = None,
    owner: str | None = None,
    labels: dict[str, str] | None = None,
    now: float | None = None,
) -> dict[str, Any]:
    """GPU-time weighted ETT% per day, ISO week or calendar month: {"series": [...], "total": {...}}.

    Each point: bucket (epoch start), partial, ett_pct (None when no GPU-time), wall_gpu_h,
    effective_gpu_h, lost_gpu_h, components_gpu_h {component: GPU-hours}.
    """
    models = scope_models(db_session=db_session, model=model, owner=owner)
    rows = gpu_rows(
        db_session=db_session,
        start=start,
        end=end,
        group=("day", "component"),
        models=models,
        labels=labels,
        team=owner,
    )
    return series_from_rows(
        [(day, comp, gpu) for day, comp, _wall, gpu in rows],
        start=start,
        end=end,
        bucket=bucket,
        now=time.time() if now is None else now,
    )


def lost_gpu_hours(
    *,
    db_session: Session,
    settings: Settings | None,
    start: float,
    end: float,
    by: str = "component",
    model: str | None = None,
    owner: str | None = None,
    labels: dict[str, str] | None = None,
    component: str | None = None,
) -> list[dict[str, Any]]:
    """Lost GPU-hours over the range grouped by component, phase, owner or system, largest first.

    Each row: {by: name, gpu_h, share (of all lost), components: {component: gpu_h}}. Owners and
    systems come from the owner mapping in force, so a PUT to /owners changes this at once.
    `component` limits the answer to that lost component.
    """
    if by not in LOST_BY:
        raise ValueError(f"by must be one of {list(LOST_BY)}, not {by!r}")
    models = scope_models(db_session=db_session, model=model, owner=owner)
    rows = gpu_rows(
        db_session=db_session,
        start=start,
        end=end,
        group=("component", "phase"),
        models=models,
        labels=labels,
        components=lost_components(component),
        team=owner,
    )
    res = owners_service.resolver(db_session=db_session, settings=settings)
    return lost_from_rows([(c, p, gpu) for c, p, _wall, gpu in rows], by=by, resolver=res)


# What a component's lost GPU-hours can be ranked by (GET /fleet/lost?by=model|job).
DRIVERS_BY = ("model", "job")


def lost_components(component: str | None) -> list[str] | None:
    """The lost components an answer is limited to (None: all); ValueError for an unknown one."""
    if component is None:
        return None
    if component not in LOST_COMPONENTS:
        raise ValueError(f"component must be one of {list(LOST_COMPONENTS)}, not {component!r}")
    return [component]


def lost_drivers(
    *,
    db_session: Session,
    settings: Settings | None,
    start: float,
    end: float,
    by: str = "model",
    component: str | None = None,
    component_owner: str | None = None,
    model: str | None = None,
    owner: str | None = None,
    labels: dict[str, str] | None = None,
) -> list[dict[str, Any]]:
    """The models (by="model") or jobs (by="job") by GPU-hours lost over the range, largest
    first, in one lost component (else all) and, with `component_owner`, only in the parts
    (component or phase) that component owner owns.

    Each row: {model | job_id and model, gpu_h, share (of all lost in the answer), components}.
    """
    if by not in DRIVERS_BY:
        raise ValueError(f"by must be one of {list(DRIVERS_BY)}, not {by!r}")
    models = scope_models(db_session=db_session, model=model, owner=owner)
    comps = lost_components(component) or list(LOST_COMPONENTS)
    keys = ("job_id", "model") if by == "job" else ("model",)
    rows = gpu_rows(
        db_session=db_session,
        start=start,
        end=end,
        group=(*keys, "component", "phase"),
        models=models,
        labels=labels,
        components=comps,
        team=owner,
    )
    res = owners_service.resolver(db_session=db_session, settings=settings)
    groups: dict[tuple[Any, ...], dict[str, float]] = defaultdict(lambda: defaultdict(float))
    for *key, comp, phase, _wall, gpu in rows:
        if component_owner is not None and res.owner(comp, phase or None) != component_owner:
            continue
        groups[tuple(key)][comp] += gpu
    total = sum(sum(c.values()) for c in groups.values())
    out = []
    for key, parts in groups.items():
        gpu = sum(parts.values())
        if gpu <= core.ZERO:
            continue
        named = (
            {"job_id": key[0], "model": key[1] or None}
            if by == "job"
            else {"model": key[0] or None}
        )
        out.append(
            {
                **named,
                "gpu_h": core.gpu_h(gpu),
                "share": gpu / total if total > 0 else None,
                "components": {c: core.gpu_h(v) for c, v in sorted(parts.items())},
            }
        )
    name = "job_id" if by == "job" else "model"
    out.sort(key=lambda r: (-r["gpu_h"], r[name] or ""))
    return out


def by_model(
    s: Session,
    lo: float,
    hi: float,
    models: list[str] | None,
    labels: dict[str, str] | None,
    team: str | None = None,
) -> dict[str, dict[str, float]]:
    """Model -> GPU-seconds per component over the UTC days meeting [lo, hi) (one team's jobs)."""
    out: dict[str, dict[str, float]] = defaultdict(core.empty_components)
    for model, comp, _wall, gpu in gpu_rows(
        db_session=s,
        start=lo,
        end=hi,
        group=("model", "component"),
        models=models,
        labels=labels,
        team=team,
    ):
        out[model][comp] = out[model].get(comp, 0.0) + gpu
    return out


def regressions(
    *,
    db_session: Session,
    before_start: float,
    before_end: float,
    after_start: float,
    after_end: float,
    limit: int = 20,
    owner: str | None = None,
    labels: dict[str, str] | None = None,
) -> list[dict[str, Any]]:
    """The models whose ETT% fell most from the `before` range to the `after` range.

    Only models with GPU-time in both ranges, a base the trend rule accepts
    (`core.trend_reason`: enough jobs and GPU-hours before) and a fall; each row names the
    component whose share of wall GPU-time grew most (`driver`), by how many points, and the
    model's owner.
    """
    models = scope_models(db_session=db_session, owner=owner)
    before = by_model(db_session, before_start, before_end, models, labels, owner)
    after = by_model(db_session, after_start, after_end, models, labels, owner)
    base_jobs = jobs_with_time(
        db_session=db_session,
        start=before_start,
        end=before_end,
        models=models,
        labels=labels,
        team=owner,
    )
    owners = model_owners(db_session=db_session)
    out = []
    for model, comps_a in after.items():
        comps_b = before.get(model)
        n = base_jobs.get(model, 0)
        fall = core.regression(comps_b, comps_a, n) if comps_b is not None else None
        if fall is None:
            continue
        # The team of the jobs compared: the one filtered on, else the model's.
        team = owner if owner is not None else owners.get(model)
        out.append({"model": model or None, "owner": team, **fall})
    out.sort(key=lambda r: (r["delta_pp"], r["model"] or ""))
    return out[:limit]


def failure_series(
    *,
    db_session: Session,
    start: float,
    end: float,
    bucket: str = "day",
    model: str | None = None,
    owner: str | None = None,
    labels: dict[str, str] | None = None,
    now: float | None = None,
) -> dict[str, Any]:
    """Failures per day, week or month: NoF by kind, attempts per job, failures per 1,000 GPU-hours.

    Failures are dated by their own time; jobs and attempts by the job's submission day; the
    GPU-hours are the wall GPU-time inside the bucket. `attempts_per_job_excl_preemption` leaves
    out the attempts a preemption caused (the paper's section V-D test). Partial buckets flagged.
    """
    now = time.time() if now is None else now
    models = scope_models(db_session=db_session, model=model, owner=owner)
    starts = bucket_starts(start, end, bucket)
    kinds: dict[float, dict[str, int]] = {b: dict.fromkeys(FAILURE_KINDS, 0) for b in starts}
    jobs: dict[float, list[int]] = {b: [0, 0, 0] for b in starts}
    wall: dict[float, float] = dict.fromkeys(starts, 0.0)
    for day, kind, n in failure_counts(
        db_session, start, end, models, labels, ("day", "kind"), owner
    ):
        k = kinds.setdefault(bucket_start(day, bucket), dict.fromkeys(FAILURE_KINDS, 0))
        k[kind] = k.get(kind, 0) + n
    for day, n, att, excl in job_counts(db_session, start, end, models, labels, ("day",), owner):
        j = jobs.setdefault(bucket_start(day, bucket), [0, 0, 0])
        j[0] += n
        j[1] += int(att or 0)
        j[2] += int(excl or 0)
    for day, _w, gpu in gpu_rows(
        db_session=db_session,
        start=start,
        end=end,
        group=("day",),
        models=models,
        labels=labels,
        team=owner,
    ):
        b = bucket_start(day, bucket)
        wall[b] = wall.get(b, 0.0) + gpu
    keys = sorted(set(kinds) | set(jobs) | set(wall))
    series = [
        {
            "bucket": b,
            "partial": core.is_partial(b, bucket, start=start, end=end, now=now),
            **core.failure_point(
                kinds.get(b, dict.fromkeys(FAILURE_KINDS, 0)),
                *jobs.get(b, [0, 0, 0]),
                wall.get(b, 0.0),
            ),
        }
        for b in keys
    ]
    tk: dict[str, int] = dict.fromkeys(FAILURE_KINDS, 0)
    for k in kinds.values():
        for name, v in k.items():
            tk[name] = tk.get(name, 0) + v
    tj = [sum(v[i] for v in jobs.values()) for i in range(3)]
    total = core.failure_point(tk, tj[0], tj[1], tj[2], sum(wall.values()))
    return {"bucket": bucket, "start": start, "end": end, "series": series, "total": total}


def failures_by_model(
    *,
    db_session: Session,
    start: float,
    end: float,
    owner: str | None = None,
    labels: dict[str, str] | None = None,
) -> list[dict[str, Any]]:
    """Per model over the range: NoF by kind, attempts per job, failures per 1,000 GPU-hours."""
    models = scope_models(db_session=db_session, owner=owner)
    kinds: dict[str, dict[str, int]] = defaultdict(lambda: dict.fromkeys(FAILURE_KINDS, 0))
    jobs: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0])
    wall: dict[str, float] = defaultdict(float)
    for model, kind, n in failure_counts(
        db_session, start, end, models, labels, ("model", "kind"), owner
    ):
        kinds[model][kind] = kinds[model].get(kind, 0) + n
    for model, n, att, excl in job_counts(
        db_session, start, end, models, labels, ("model",), owner
    ):
        jobs[model] = [n, int(att or 0), int(excl or 0)]
    for model, _w, gpu in gpu_rows(
        db_session=db_session,
        start=start,
        end=end,
        group=("model",),
        models=models,
        labels=labels,
        team=owner,
    ):
        wall[model] += gpu
    out = []
    for model in sorted(set(kinds) | set(jobs) | set(wall)):
        point = core.failure_point(
            kinds.get(model, dict.fromkeys(FAILURE_KINDS, 0)),
            *jobs.get(model, [0, 0, 0]),
            wall.get(model, 0.0),
        )
        out.append({"model": model or None, **point})
    out.sort(key=lambda r: (-r["failures"], r["model"] or ""))
    return out
