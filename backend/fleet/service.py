"""Fleet analytics over the day rollups; every function is keyword-only and returns plain data.

Times in and out are epoch seconds (the views format them). Scope filters, shared by all queries:
`model` (one model), `owner` (the models whose owning team is this owner) and `labels`
({key: value}, jobs whose submission labels all match; served from the per-job day table, since
the rollups do not keep labels). Unknown models or owners raise LookupError; bad arguments
ValueError.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from typing import Any

from sqlalchemy import delete, func, insert, select
from sqlalchemy.orm import Session

from backend.config import Settings
from backend.db import insert_for
from backend.ett.catalogue import COMPONENTS, FAILURE_KINDS
from backend.ett.models import JobInterval, JobResult
from backend.ett.partition import EFFECTIVE
from backend.exporter.ledger import book_jobs
from backend.fleet.days import bucket_start, bucket_starts, day_start, split_by_day
from backend.fleet.models import (
    NO_MODEL,
    NO_PHASE,
    FleetDayRollup,
    FleetDayTotal,
    FleetFailure,
    FleetJob,
    FleetJobDay,
)
from backend.jobs.models import Job, Model
from backend.owners import service as owners_service
from backend.owners.mapping import Resolver
from backend.timefmt import parse_instant

LOST_BY = ("component", "phase", "owner", "system")
_ZERO = 1e-6
_CHUNK = 500


# ---- keeping the rollups current ------------------------------------------------------------


def _ts(value: Any) -> float | None:
    return None if value is None else parse_instant(value).ts


def _chunks(items: Sequence[Any], n: int) -> Iterable[Sequence[Any]]:
    for i in range(0, len(items), n):
        yield items[i : i + n]


def job_facts(l1: dict[str, Any] | None, attempts: list[Any] | None) -> tuple[int, int, int]:
    """(attempts, attempts not caused by a preemption, NoF) from a job's result."""
    failures = (l1 or {}).get("failures") or []
    numbers = [a.get("attempt") for a in attempts or [] if isinstance(a, dict)]
    n_attempts = len(numbers)
    last = max((n for n in numbers if n is not None), default=-1)
    preempted_restarts = sum(
        1
        for f in failures
        if f.get("kind") == "preemption" and f.get("attempt") is not None and f["attempt"] < last
    )
    return n_attempts, n_attempts - preempted_restarts, len(failures)


def refresh_job_rollups(*, db_session: Session, job_ids: Iterable[str]) -> None:
    """Bring the fleet tables in line with these jobs' current job_results/job_intervals.

    Call it in the same transaction, after a recompute has written the jobs' rows (a job
    whose result is gone has its contribution removed). Cost: linear in the jobs' intervals.
    """
    ids = sorted(set(job_ids))
    for chunk in _chunks(ids, _CHUNK):
        _refresh_chunk(db_session, list(chunk))
    # Finished jobs' first final result (or a correction of it) goes to the /metrics ledger.
    book_jobs(db_session=db_session, job_ids=ids)


def _refresh_chunk(s: Session, ids: list[str]) -> None:
    results = {
        r.job_id: r
        for r in s.execute(
            select(
                JobResult.job_id,
                JobResult.model,
                JobResult.gpus,
                JobResult.submitted_at,
                JobResult.result["l1"].label("l1"),
                JobResult.result["attempts"].label("attempts"),
            ).where(JobResult.job_id.in_(ids))
        )
    }
    per_job: dict[str, list[tuple[float, float, str, str | None]]] = defaultdict(list)
    for job_id, start, end, comp, phase in s.execute(
        select(
            JobInterval.job_id,
            JobInterval.start,
            JobInterval.end,
            JobInterval.component,
            JobInterval.phase,
        ).where(JobInterval.job_id.in_(ids))
    ):
        per_job[job_id].append((start, end, comp, phase))

    delta: dict[tuple[float, str, str, str], list[float]] = defaultdict(lambda: [0.0, 0.0])
    for day, comp, phase, model, wall_s, gpu_s in s.execute(
        select(
            FleetJobDay.day,
            FleetJobDay.component,
            FleetJobDay.phase,
            FleetJobDay.model,
            FleetJobDay.wall_s,
            FleetJobDay.gpu_s,
        ).where(FleetJobDay.job_id.in_(ids))
    ):
        d = delta[(day, model, comp, phase)]
        d[0] -= wall_s
        d[1] -= gpu_s

    new_days: list[dict[str, Any]] = []
    new_failures: list[dict[str, Any]] = []
    new_jobs: list[dict[str, Any]] = []
    for job_id, r in results.items():
        model = r.model or NO_MODEL
        gpus = r.gpus or 1
        for (day, comp, phase), wall_s in split_by_day(per_job.get(job_id, ())).items():
            ph = phase or NO_PHASE
            new_days.append(
                {
                    "job_id": job_id,
                    "day": day,
                    "component": comp,
                    "phase": ph,
                    "model": model,
                    "wall_s": wall_s,
                    "gpu_s": wall_s * gpus,
                }
            )
            d = delta[(day, model, comp, ph)]
            d[0] += wall_s
            d[1] += wall_s * gpus
        l1 = r.l1 if isinstance(r.l1, dict) else {}
        for i, f in enumerate(l1.get("failures") or []):
            ts = _ts(f.get("ts"))
            if ts is None:
                continue
            new_failures.append(
                {
                    "job_id": job_id,
                    "idx": i,
                    "model": model,
                    "ts": ts,
                    "day": day_start(ts),
                    "kind": f.get("kind") or "unknown",
                    "inferred": bool(f.get("inferred")),
                    "attempt": f.get("attempt"),
                }
            )
        if r.submitted_at is not None:
            attempts, excl, nof = job_facts(l1, r.attempts if isinstance(r.attempts, list) else [])
            new_jobs.append(
                {
                    "job_id": job_id,
                    "model": model,
                    "day": day_start(r.submitted_at),
                    "gpus": gpus,
                    "attempts": attempts,
                    "attempts_excl_preemption": excl,
                    "nof": nof,
                }
            )

    for table in (FleetJobDay, FleetFailure, FleetJob):
        s.execute(delete(table).where(table.job_id.in_(ids)))
    for table, rows in (
        (FleetJobDay, new_days),
        (FleetFailure, new_failures),
        (FleetJob, new_jobs),
    ):
        for part in _chunks(rows, 2000):
            s.execute(insert(table), list(part))
    _apply_delta(s, delta)


def _upsert_add(s: Session, table: Any, keys: list[str], rows: list[dict[str, Any]]) -> None:
    """Add rows' wall_s/gpu_s to existing rows with the same key, inserting the missing ones."""
    stmt = insert_for(s, table)
    stmt = stmt.on_conflict_do_update(
        index_elements=keys,
        set_={
            "wall_s": table.c.wall_s + stmt.excluded.wall_s,
            "gpu_s": table.c.gpu_s + stmt.excluded.gpu_s,
        },
    )
    for part in _chunks(rows, _CHUNK):
        s.execute(stmt, list(part))


def _apply_delta(s: Session, delta: dict[tuple[float, str, str, str], list[float]]) -> None:
    """Add the differences to the rollup and the totals (in key order, against deadlocks)."""
    totals: dict[tuple[float, str, str], list[float]] = defaultdict(lambda: [0.0, 0.0])
    rows = []
    for (day, model, comp, phase), (wall, gpu) in sorted(delta.items()):
        if abs(wall) <= _ZERO and abs(gpu) <= _ZERO:
            continue
        rows.append(
            {
                "day": day,
                "model": model,
                "component": comp,
                "phase": phase,
                "wall_s": wall,
                "gpu_s": gpu,
            }
        )
        t = totals[(day, comp, phase)]
        t[0] += wall
        t[1] += gpu
    if not rows:
        return
    _upsert_add(s, FleetDayRollup.__table__, ["day", "model", "component", "phase"], rows)
    _upsert_add(
        s,
        FleetDayTotal.__table__,
        ["day", "component", "phase"],
        [
            {"day": k[0], "component": k[1], "phase": k[2], "wall_s": v[0], "gpu_s": v[1]}
            for k, v in sorted(totals.items())
        ],
    )
    days = sorted({r["day"] for r in rows})
    models = sorted({r["model"] for r in rows})
    s.execute(
        delete(FleetDayRollup).where(
            FleetDayRollup.day.in_(days),
            FleetDayRollup.model.in_(models),
            func.abs(FleetDayRollup.wall_s) < _ZERO,
        )
    )
    s.execute(
        delete(FleetDayTotal).where(
            FleetDayTotal.day.in_(days), func.abs(FleetDayTotal.wall_s) < _ZERO
        )
    )


def rebuild_rollups(*, db_session: Session) -> int:
    """Recompute every fleet table from job_results/job_intervals; returns the jobs seen."""
    for table in (FleetJobDay, FleetFailure, FleetJob, FleetDayRollup, FleetDayTotal):
        db_session.execute(delete(table))
    ids = list(db_session.execute(select(JobResult.job_id).order_by(JobResult.job_id)).scalars())
    refresh_job_rollups(db_session=db_session, job_ids=ids)
    return len(ids)


# ---- scope ----------------------------------------------------------------------------------


def scope_models(
    *, db_session: Session, model: str | None = None, owner: str | None = None
) -> list[str] | None:
    """The model names a query is limited to (None: all); LookupError for unknown names."""
    out: list[str] | None = None
    if model is not None:
        if db_session.get(Model, model) is None:
            raise LookupError(f"unknown model {model!r}")
        out = [model]
    if owner is not None:
        owned = list(db_session.execute(select(Model.name).where(Model.owner == owner)).scalars())
        if not owned:
            raise LookupError(f"unknown owner {owner!r}: no model has this owning team")
        out = owned if out is None else [m for m in out if m in owned]
    return out


def _label_clauses(labels: dict[str, str] | None) -> list[Any]:
    return [Job.labels[k].as_string() == v for k, v in (labels or {}).items()]


def gpu_rows(
    *,
    db_session: Session,
    start: float,
    end: float,
    group: Sequence[str],
    models: list[str] | None = None,
    labels: dict[str, str] | None = None,
) -> list[tuple[Any, ...]]:
    """Rows of (*group columns, wall_s, gpu_s) summed over the UTC days meeting [start, end).

    Reads the smallest table that can answer: the fleet totals when nothing filters by model,
    the per-model rollup when something does, the per-job day table when labels do.
    """
    if models is not None and not models:
        return []
    if labels:
        src: Any = FleetJobDay
    elif models is None and "model" not in group:
        src = FleetDayTotal
    else:
        src = FleetDayRollup
    cols = [getattr(src, g) for g in group]
    stmt = select(*cols, func.sum(src.wall_s), func.sum(src.gpu_s)).where(
        src.day >= day_start(start), src.day < end
    )
    if labels:
        stmt = stmt.join(Job, Job.job_id == src.job_id).where(*_label_clauses(labels))
    if models is not None:
        stmt = stmt.where(src.model.in_(models))
    if cols:
        stmt = stmt.group_by(*cols)
    return [tuple(r) for r in db_session.execute(stmt)]


def _point(components: dict[str, float]) -> dict[str, Any]:
    wall = sum(components.values())
    eff = components.get(EFFECTIVE, 0.0)
    return {
        "ett_pct": ett_pct(components),
        "wall_gpu_h": wall / 3600.0,
        "effective_gpu_h": eff / 3600.0,
        "lost_gpu_h": (wall - eff) / 3600.0,
        "components_gpu_h": {c: v / 3600.0 for c, v in components.items()},
    }


def _empty_components() -> dict[str, float]:
    return dict.fromkeys(COMPONENTS, 0.0)


# ---- fleet ETT% -----------------------------------------------------------------------------


def fleet_ett(
    *,
    db_session: Session,
    start: float,
    end: float,
    bucket: str = "day",
    model: str | None = None,
    owner: str | None = None,
    labels: dict[str, str] | None = None,
) -> dict[str, Any]:
    """GPU-time weighted ETT% per day or ISO week: {"series": [...], "total": {...}}.

    Each point: bucket (epoch start), ett_pct (None when no GPU-time), wall_gpu_h,
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
    )
    return series_from_rows(
        [(day, comp, gpu) for day, comp, _wall, gpu in rows], start=start, end=end, bucket=bucket
    )


def series_from_rows(
    rows: Iterable[tuple[float, str, float]], *, start: float, end: float, bucket: str
) -> dict[str, Any]:
    """The fleet_ett answer from (day, component, GPU-seconds) rows; pure."""
    per: dict[float, dict[str, float]] = {
        b: _empty_components() for b in bucket_starts(start, end, bucket)
    }
    total = _empty_components()
    for day, comp, gpu in rows:
        b = bucket_start(day, bucket)
        comps = per.setdefault(b, _empty_components())
        comps[comp] = comps.get(comp, 0.0) + gpu
        total[comp] = total.get(comp, 0.0) + gpu
    series = [{"bucket": b, **_point(c)} for b, c in sorted(per.items())]
    return {"bucket": bucket, "start": start, "end": end, "series": series, "total": _point(total)}


# ---- lost GPU-hours -------------------------------------------------------------------------


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
) -> list[dict[str, Any]]:
    """Lost GPU-hours over the range grouped by component, phase, owner or system, largest first.

    Each row: {by: name, gpu_h, share (of all lost), components: {component: gpu_h}}. Owners and
    systems come from the owner mapping in force, so a PUT to /owners changes this at once.
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
    )
    res = owners_service.resolver(db_session=db_session, settings=settings)
    return lost_from_rows([(c, p, gpu) for c, p, _wall, gpu in rows], by=by, resolver=res)


def lost_from_rows(
    rows: Iterable[tuple[str, str | None, float]], *, by: str, resolver: Resolver
) -> list[dict[str, Any]]:
    """The lost_gpu_hours answer from (component, phase, GPU-seconds) rows; pure."""
    groups: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    for comp, phase, gpu in rows:
        if comp == EFFECTIVE:
            continue
        ph = phase or None
        if by == "component":
            key = comp
        elif by == "phase":
            key = ph or comp
        elif by == "owner":
            key = resolver.owner(comp, ph)
        else:
            key = resolver.system(comp, ph)
        groups[key][comp] += gpu
    total = sum(sum(c.values()) for c in groups.values())
    out = []
    for key, comps in groups.items():
        gpu = sum(comps.values())
        if gpu <= _ZERO:
            continue
        out.append(
            {
                by: key,
                "gpu_h": gpu / 3600.0,
                "share": gpu / total if total > 0 else None,
                "components": {c: v / 3600.0 for c, v in sorted(comps.items())},
            }
        )
    out.sort(key=lambda r: (-r["gpu_h"], r[by]))
    return out


# ---- regressions ----------------------------------------------------------------------------


def by_model(
    s: Session, lo: float, hi: float, models: list[str] | None, labels: dict[str, str] | None
) -> dict[str, dict[str, float]]:
    out: dict[str, dict[str, float]] = defaultdict(_empty_components)
    for model, comp, _wall, gpu in gpu_rows(
        db_session=s, start=lo, end=hi, group=("model", "component"), models=models, labels=labels
    ):
        out[model][comp] = out[model].get(comp, 0.0) + gpu
    return out


def ett_pct(components: dict[str, float]) -> float | None:
    """Effective GPU-time as a percentage of wall GPU-time (None when there is none)."""
    wall = sum(components.values())
    return components.get(EFFECTIVE, 0.0) / wall * 100.0 if wall > 0 else None


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

    Only models with GPU-time in both ranges and a fall; each row names the component whose share
    of wall GPU-time grew most (`driver`), by how many points, and the model's owner.
    """
    models = scope_models(db_session=db_session, owner=owner)
    before = by_model(db_session, before_start, before_end, models, labels)
    after = by_model(db_session, after_start, after_end, models, labels)
    owners = model_owners(db_session=db_session)
    out = []
    for model, comps_a in after.items():
        comps_b = before.get(model)
        ett_a, ett_b = ett_pct(comps_a), ett_pct(comps_b or {})
        if comps_b is None or ett_a is None or ett_b is None or ett_a >= ett_b:
            continue
        wall_a, wall_b = sum(comps_a.values()), sum(comps_b.values())
        shifts = {
            c: (comps_a.get(c, 0.0) / wall_a - comps_b.get(c, 0.0) / wall_b) * 100.0
            for c in set(comps_a) | set(comps_b)
            if c != EFFECTIVE
        }
        driver = max(sorted(shifts), key=lambda c: shifts[c])
        out.append(
            {
                "model": model or None,
                "owner": owners.get(model),
                "ett_pct_before": ett_b,
                "ett_pct_after": ett_a,
                "delta_pp": ett_a - ett_b,
                "wall_gpu_h_after": wall_a / 3600.0,
                "lost_gpu_h_after": (wall_a - comps_a.get(EFFECTIVE, 0.0)) / 3600.0,
                "driver": driver,
                "driver_share_pp": shifts[driver],
            }
        )
    out.sort(key=lambda r: (r["delta_pp"], r["model"] or ""))
    return out[:limit]


# ---- failures -------------------------------------------------------------------------------


def _failure_counts(
    s: Session,
    lo: float,
    hi: float,
    models: list[str] | None,
    labels: dict[str, str] | None,
    group: Sequence[str],
) -> list[tuple[Any, ...]]:
    if models is not None and not models:
        return []
    cols = [getattr(FleetFailure, g) for g in group]
    stmt = select(*cols, func.count()).where(
        FleetFailure.day >= day_start(lo), FleetFailure.day < hi
    )
    if labels:
        stmt = stmt.join(Job, Job.job_id == FleetFailure.job_id).where(*_label_clauses(labels))
    if models is not None:
        stmt = stmt.where(FleetFailure.model.in_(models))
    return [tuple(r) for r in s.execute(stmt.group_by(*cols))]


def _job_counts(
    s: Session,
    lo: float,
    hi: float,
    models: list[str] | None,
    labels: dict[str, str] | None,
    group: Sequence[str],
) -> list[tuple[Any, ...]]:
    if models is not None and not models:
        return []
    cols = [getattr(FleetJob, g) for g in group]
    stmt = select(
        *cols,
        func.count(),
        func.sum(FleetJob.attempts),
        func.sum(FleetJob.attempts_excl_preemption),
    ).where(FleetJob.day >= day_start(lo), FleetJob.day < hi)
    if labels:
        stmt = stmt.join(Job, Job.job_id == FleetJob.job_id).where(*_label_clauses(labels))
    if models is not None:
        stmt = stmt.where(FleetJob.model.in_(models))
    return [tuple(r) for r in s.execute(stmt.group_by(*cols))]


def _failure_point(
    kinds: dict[str, int], jobs: int, attempts: int, attempts_excl: int, wall_gpu_s: float
) -> dict[str, Any]:
    failures = sum(kinds.values())
    gpu_kh = wall_gpu_s / 3600.0 / 1000.0
    return {
        "failures": failures,
        "nof_by_kind": dict(kinds),
        "jobs": jobs,
        "attempts": attempts,
        "attempts_per_job": attempts / jobs if jobs else None,
        "attempts_per_job_excl_preemption": attempts_excl / jobs if jobs else None,
        "nof_per_job_by_kind": {k: v / jobs for k, v in kinds.items()} if jobs else None,
        "wall_gpu_h": wall_gpu_s / 3600.0,
        "failures_per_1000_gpu_h": failures / gpu_kh if gpu_kh > 0 else None,
        "failures_per_1000_gpu_h_by_kind": (
            {k: v / gpu_kh for k, v in kinds.items()} if gpu_kh > 0 else None
        ),
    }


def failure_series(
    *,
    db_session: Session,
    start: float,
    end: float,
    bucket: str = "day",
    model: str | None = None,
    owner: str | None = None,
    labels: dict[str, str] | None = None,
) -> dict[str, Any]:
    """Failures per day or week: NoF by kind, attempts per job, failures per 1,000 GPU-hours.

    Failures are dated by their own time; jobs and attempts by the job's submission day; the
    GPU-hours are the wall GPU-time inside the bucket. `attempts_per_job_excl_preemption` leaves
    out the attempts a preemption caused (the paper's section V-D test).
    """
    models = scope_models(db_session=db_session, model=model, owner=owner)
    starts = bucket_starts(start, end, bucket)
    kinds: dict[float, dict[str, int]] = {b: dict.fromkeys(FAILURE_KINDS, 0) for b in starts}
    jobs: dict[float, list[int]] = {b: [0, 0, 0] for b in starts}
    wall: dict[float, float] = dict.fromkeys(starts, 0.0)
    for day, kind, n in _failure_counts(db_session, start, end, models, labels, ("day", "kind")):
        k = kinds.setdefault(bucket_start(day, bucket), dict.fromkeys(FAILURE_KINDS, 0))
        k[kind] = k.get(kind, 0) + n
    for day, n, att, excl in _job_counts(db_session, start, end, models, labels, ("day",)):
        j = jobs.setdefault(bucket_start(day, bucket), [0, 0, 0])
        j[0] += n
        j[1] += int(att or 0)
        j[2] += int(excl or 0)
    for day, _w, gpu in gpu_rows(
        db_session=db_session, start=start, end=end, group=("day",), models=models, labels=labels
    ):
        b = bucket_start(day, bucket)
        wall[b] = wall.get(b, 0.0) + gpu
    keys = sorted(set(kinds) | set(jobs) | set(wall))
    series = [
        {
            "bucket": b,
            **_failure_point(
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
    total = _failure_point(tk, tj[0], tj[1], tj[2], sum(wall.values()))
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
    for model, kind, n in _failure_counts(
        db_session, start, end, models, labels, ("model", "kind")
    ):
        kinds[model][kind] = kinds[model].get(kind, 0) + n
    for model, n, att, excl in _job_counts(db_session, start, end, models, labels, ("model",)):
        jobs[model] = [n, int(att or 0), int(excl or 0)]
    for model, _w, gpu in gpu_rows(
        db_session=db_session, start=start, end=end, group=("model",), models=models, labels=labels
    ):
        wall[model] += gpu
    out = []
    for model in sorted(set(kinds) | set(jobs) | set(wall)):
        point = _failure_point(
            kinds.get(model, dict.fromkeys(FAILURE_KINDS, 0)),
            *jobs.get(model, [0, 0, 0]),
            wall.get(model, 0.0),
        )
        out.append({"model": model or None, **point})
    out.sort(key=lambda r: (-r["failures"], r["model"] or ""))
    return out


def model_owners(*, db_session: Session) -> dict[str, str | None]:
    """Model name -> owning team."""
    return dict(db_session.execute(select(Model.name, Model.owner)).all())
