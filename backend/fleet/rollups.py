"""Keeping the fleet tables current: the writes behind every fleet read (backend/metrics reads).

A recompute calls `refresh_job_rollups` in its own transaction; `rebuild_rollups` starts over.
GPU-seconds are weighted here, once, with the rules of `backend.fleet.weights`: each
interval at the GPUs of its attempt, the job's outside attempts.
"""

from __future__ import annotations

import bisect
from collections import defaultdict
from collections.abc import Iterable, Sequence
from typing import Any

from sqlalchemy import delete, func, insert, select
from sqlalchemy.orm import Session

from backend.db import insert_for
from backend.ett.models import JobInterval, JobResult
from backend.fleet import weights
from backend.fleet.days import day_start, split_by_day
from backend.fleet.ledger import book_jobs
from backend.fleet.models import (
    NO_MODEL,
    NO_PHASE,
    FleetDayRollup,
    FleetDayTotal,
    FleetFailure,
    FleetJob,
    FleetJobDay,
)
from backend.timefmt import parse_instant

_ZERO = 1e-6
_CHUNK = 500


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


def refresh_extended_rollups(
    *, db_session: Session, job_id: str, result: Any, since: float
) -> None:
    """refresh_job_rollups for an open job extended in place (backend.ett.incremental): its
    intervals before `since` are unchanged, and so are its failures and its job row, so only
    its fleet_job_days from the UTC day of `since` on are rewritten, from `result`'s intervals
    (an extension from a folded state holds those of the kept pieces, which start by then).

    The cost is that of the days rewritten (usually one), not of the job's history. An
    interval crossing into that day counts from midnight on, as split_by_day cuts it.
    """
    s = db_session
    d0 = day_start(since)
    ivs = result.intervals
    if not ivs or (ivs[0].start > d0 and ivs[0].start != result.submitted_at):
        # The answer does not hold every interval of those days (a fold reached past d0).
        refresh_job_rollups(db_session=s, job_ids=[job_id])
        return
    model = result.model or NO_MODEL
    delta: dict[tuple[float, str, str, str], list[float]] = defaultdict(lambda: [0.0, 0.0])
    for day, comp, phase, old_model, wall_s, gpu_s in s.execute(
        select(
            FleetJobDay.day,
            FleetJobDay.component,
            FleetJobDay.phase,
            FleetJobDay.model,
            FleetJobDay.wall_s,
            FleetJobDay.gpu_s,
        ).where(FleetJobDay.job_id == job_id, FleetJobDay.day >= d0)
    ):
        d = delta[(day, old_model, comp, phase)]
        d[0] -= wall_s
        d[1] -= gpu_s
    first = bisect.bisect_right(ivs, d0, key=lambda iv: iv.end)
    tail = [(max(iv.start, d0), iv.end, iv.component, iv.phase, iv.gpus) for iv in ivs[first:]]
    new_days: list[dict[str, Any]] = []
    _add_job_days(new_days, delta, job_id, model, _job_days(tail, result.gpus))
    s.execute(delete(FleetJobDay).where(FleetJobDay.job_id == job_id, FleetJobDay.day >= d0))
    for part in _chunks(new_days, 2000):
        s.execute(insert(FleetJobDay), list(part))
    _apply_delta(s, delta)


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
    per_job: dict[str, list[tuple[float, float, str, str | None, int | None]]] = defaultdict(list)
    for job_id, start, end, comp, phase, gpus in s.execute(
        select(
            JobInterval.job_id,
            JobInterval.start,
            JobInterval.end,
            JobInterval.component,
            JobInterval.phase,
            JobInterval.gpus,
        ).where(JobInterval.job_id.in_(ids))
    ):
        per_job[job_id].append((start, end, comp, phase, gpus))

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
        gpus = weights.gpus_of(r.gpus)
        _add_job_days(new_days, delta, job_id, model, _job_days(per_job.get(job_id, ()), r.gpus))
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


def _add_job_days(
    new_days: list[dict[str, Any]],
    delta: Any,
    job_id: str,
    model: str,
    days: Any,
) -> None:
    """Append a job's (day, component, phase) rows to `new_days` and add them to `delta`."""
    for (day, comp, phase), (wall_s, gpu_s) in days:
        ph = phase or NO_PHASE
        new_days.append(
            {
                "job_id": job_id,
                "day": day,
                "component": comp,
                "phase": ph,
                "model": model,
                "wall_s": wall_s,
                "gpu_s": gpu_s,
            }
        )
        d = delta[(day, model, comp, ph)]
        d[0] += wall_s
        d[1] += gpu_s


def _job_days(
    intervals: Iterable[tuple[float, float, str, str | None, int | None]], job_gpus: Any
) -> list[tuple[tuple[float, str, str | None], tuple[float, float]]]:
    """One job's (wall, GPU) seconds per (UTC day, component, phase), each interval at its
    attempt's GPUs; in key order."""
    acc: dict[tuple[float, str, str | None], list[float]] = {}
    by_gpus: dict[int, list[tuple[float, float, str, str | None]]] = defaultdict(list)
    for start, end, comp, phase, gpus in intervals:
        by_gpus[weights.interval_gpus(gpus, job_gpus)].append((start, end, comp, phase))
    for gpus, group in by_gpus.items():
        for key, wall_s in split_by_day(group).items():
            a = acc.setdefault(key, [0.0, 0.0])
            a[0] += wall_s
            a[1] += weights.gpu_s(wall_s, gpus)
    return [(k, (v[0], v[1])) for k, v in sorted(acc.items(), key=lambda kv: repr(kv[0]))]


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
