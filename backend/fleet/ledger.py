"""Booking finished jobs into the metrics ledger (called in the recompute's transaction)."""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Iterable, Sequence

from sqlalchemy import func, select, update
from sqlalchemy.orm import Session

from backend.db import insert_for
from backend.ett.models import JobResult
from backend.fleet.models import FAILURES, GPU_SECONDS, FleetFailure, FleetJobDay, LedgerEntry
from backend.jobs.models import Model

NO_TEAM = ""
_EPS = 1e-6
_CHUNK = 500

Key = tuple[str, str, str, str, str]  # series, model, team, key1, key2


def job_contributions(
    *, db_session: Session, job_ids: Sequence[str]
) -> tuple[dict[str, dict[tuple[str, str], float]], dict[str, dict[str, int]]]:
    """What each job contributes now: GPU-seconds per (component, phase) and failures per kind,
    from the per-job fleet tables (the ledger books these)."""
    gpu: dict[str, dict[tuple[str, str], float]] = defaultdict(dict)
    fail: dict[str, dict[str, int]] = defaultdict(dict)
    if not job_ids:
        return gpu, fail
    ids = sorted(job_ids)
    for job_id, comp, phase, gpu_s in db_session.execute(
        select(
            FleetJobDay.job_id,
            FleetJobDay.component,
            FleetJobDay.phase,
            func.sum(FleetJobDay.gpu_s),
        )
        .where(FleetJobDay.job_id.in_(ids))
        .group_by(FleetJobDay.job_id, FleetJobDay.component, FleetJobDay.phase)
    ):
        gpu[job_id][(comp, phase or "")] = float(gpu_s or 0.0)
    for job_id, kind, n in db_session.execute(
        select(FleetFailure.job_id, FleetFailure.kind, func.count())
        .where(FleetFailure.job_id.in_(ids))
        .group_by(FleetFailure.job_id, FleetFailure.kind)
    ):
        fail[job_id][kind] = int(n)
    return gpu, fail


def _current(s: Session, ids: list[str]) -> dict[str, dict[Key, float]]:
    """What each final job contributes now (read from the fleet tables just written)."""
    final = {
        job_id: (model or "", team or NO_TEAM)
        for job_id, model, team in s.execute(
            select(JobResult.job_id, JobResult.model, Model.owner)
            .outerjoin(Model, Model.name == JobResult.model)
            .where(JobResult.job_id.in_(ids), JobResult.provisional.is_(False))
        )
    }
    out: dict[str, dict[Key, float]] = {job_id: {} for job_id in final}
    if not final:
        return out
    gpu, fail = job_contributions(db_session=s, job_ids=sorted(final))
    for job_id, parts in gpu.items():
        model, team = final[job_id]
        for (comp, phase), gpu_s in parts.items():
            out[job_id][(GPU_SECONDS, model, team, comp, phase)] = gpu_s
    for job_id, kinds in fail.items():
        model, team = final[job_id]
        for kind, n in kinds.items():
            out[job_id][(FAILURES, model, team, kind, "")] = float(n)
    return out


def book_jobs(*, db_session: Session, job_ids: Iterable[str], now: float | None = None) -> int:
    """Book these jobs' final results; a job booked before gets corrections. Returns rows written.

    Provisional (open) jobs are left alone: a job that reopens keeps what it booked until it is
    final again, and then only the difference is written, as a correction.
    """
    now = time.time() if now is None else now
    ids = sorted(set(job_ids))
    written = 0
    for i in range(0, len(ids), _CHUNK):
        written += _book_chunk(db_session, ids[i : i + _CHUNK], now)
    return written


def _book_chunk(s: Session, ids: list[str], now: float) -> int:
    current = _current(s, ids)
    if not current:
        return 0
    booked: dict[str, dict[Key, float]] = defaultdict(dict)
    for row in s.execute(
        select(
            LedgerEntry.job_id,
            LedgerEntry.series,
            LedgerEntry.model,
            LedgerEntry.team,
            LedgerEntry.key1,
            LedgerEntry.key2,
            LedgerEntry.booked + LedgerEntry.added - LedgerEntry.removed,
        ).where(LedgerEntry.job_id.in_(sorted(current)))
    ):
        booked[row[0]][tuple(row[1:6])] = float(row[6])  # type: ignore[index]
    inserts: list[dict[str, object]] = []
    written = 0
    for job_id in sorted(current):
        now_rows, before = current[job_id], booked.get(job_id)
        if before is None:
            # First final store: the whole job is booked at once.
            inserts.extend(
                _row(job_id, key, booked=v, added=0.0, now=now)
                for key, v in sorted(now_rows.items())
                if abs(v) > _EPS
            )
            continue
        for key in sorted(set(now_rows) | set(before)):
            diff = now_rows.get(key, 0.0) - before.get(key, 0.0)
            if abs(diff) <= _EPS:
                continue
            if key not in before:
                inserts.append(_row(job_id, key, booked=0.0, added=diff, now=now))
                continue
            col = LedgerEntry.added if diff > 0 else LedgerEntry.removed
            s.execute(
                update(LedgerEntry)
                .where(
                    LedgerEntry.job_id == job_id,
                    LedgerEntry.series == key[0],
                    LedgerEntry.model == key[1],
                    LedgerEntry.team == key[2],
                    LedgerEntry.key1 == key[3],
                    LedgerEntry.key2 == key[4],
                )
                .values({col.key: col + abs(diff), "updated_at": now})
            )
            written += 1
    if inserts:
        # A concurrent booking of the same job (two replicas) keeps the first one's rows.
        stmt = insert_for(s, LedgerEntry.__table__).on_conflict_do_nothing()
        s.execute(stmt, inserts)
        written += len(inserts)
    return written


def _row(job_id: str, key: Key, *, booked: float, added: float, now: float) -> dict[str, object]:
    series, model, team, key1, key2 = key
    return {
        "job_id": job_id,
        "series": series,
        "model": model,
        "team": team,
        "key1": key1,
        "key2": key2,
        "booked": booked,
        "added": max(added, 0.0),
        "removed": max(-added, 0.0),
        "booked_at": now,
        "updated_at": now,
    }
