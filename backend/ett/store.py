"""Result storage: write one job's engine answer into job_results, job_intervals and attempts.

The rows a recompute replaces (and the job's derived fields in `jobs`); the caller owns the
transaction. Reads of these rows are in backend.results.read; who calls store is backend.results.recompute.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import Any

from sqlalchemy import delete, insert, update
from sqlalchemy.orm import Session

from backend.db import insert_for
from backend.ett.engine import JobETT
from backend.ett.incremental import AccountState
from backend.ett.models import JobAccountingState, JobInterval, JobResult
from backend.jobs import claims
from backend.jobs.models import Attempt, AttemptHost, Job, Model

_INSERT_CHUNK = 5_000


def _ensure_model(db_session: Session, name: str) -> None:
    stmt = insert_for(db_session, Model.__table__).values(
        name=name, owner=None, labels={}, created_at=time.time()
    )
    db_session.execute(stmt.on_conflict_do_nothing(index_elements=["name"]))


def _chunks(rows: list[dict[str, Any]]) -> Iterable[list[dict[str, Any]]]:
    for i in range(0, len(rows), _INSERT_CHUNK):
        yield rows[i : i + _INSERT_CHUNK]


def host_rows(job_id: str, result: JobETT) -> list[dict[str, Any]]:
    """The attempt_hosts rows of a job's answer: one per (attempt, host), with the attempt's
    span, GPUs and the failures of that attempt (count, first kind and cause, TTR GPU-seconds)."""
    by_attempt: dict[int, list[Any]] = {}
    for f in result.l1.failures:
        by_attempt.setdefault(f.attempt, []).append(f)
    rows: list[dict[str, Any]] = []
    for a in result.attempts:
        if not a.hosts:
            continue
        gpus = a.gpus or result.gpus or 1
        fails = sorted(by_attempt.get(a.attempt, []), key=lambda f: f.ts)
        first = fails[0] if fails else None
        ended = a.ended_at if a.ended_at is not None else result.ended_at
        base = {
            "job_id": job_id,
            "attempt": a.attempt,
            "model": result.model,
            "started_at": a.started_at,
            "ended_at": max(ended, a.started_at),
            "gpus": gpus,
            "failures": len(fails),
            "failure_ts": None if first is None else first.ts,
            "failure_kind": None if first is None else first.kind[:16],
            # A failure's cause, where the engine gives one (issue 27 item 1); else its kind.
            "failure_cause": None
            if first is None
            else str(getattr(first, "cause", None) or first.kind)[:64],
            "ttr_gpu_s": sum(max(0.0, f.ttr_s) for f in fails) * gpus,
        }
        rows.extend({**base, "host": h[:256]} for h in a.hosts)
    return rows


def store_extension(*, db_session: Session, job_id: str, result: JobETT, since: float) -> None:
    """Store an extended open job's answer: its job_results row and its intervals ending at or
    after `since` (the settled point the extension started from; the earlier ones are final).

    Attempts and the job's derived fields are unchanged by an extension (only windows and
    heartbeats of the live attempt extend it).
    """
    db_session.execute(
        update(JobResult)
        .where(JobResult.job_id == job_id)
        .values(**_result_columns(result), computed_at=time.time())
    )
    db_session.execute(
        delete(JobInterval).where(JobInterval.job_id == job_id, JobInterval.end >= since)
    )
    rows = [_interval_row(job_id, iv) for iv in result.intervals if iv.end >= since]
    for chunk in _chunks(rows):
        db_session.execute(insert(JobInterval.__table__), chunk)


def _result_columns(result: JobETT) -> dict[str, Any]:
    return {
        "model": result.model,
        "gpus": result.gpus,
        "status": (result.status or "unknown")[:16],
        "provisional": result.provisional,
        "submitted_at": result.submitted_at,
        "ended_at": result.ended_at,
        "e2e_s": result.e2e_s,
        "effective_s": result.effective_s,
        "ett_pct": result.ett_pct,
        "gpu_hours_lost": result.gpu_hours_lost,
        "e2e_gpu_s": result.e2e_gpu_s,
        "effective_gpu_s": result.effective_gpu_s,
        "nof": result.l1.nof,
        "tts_s": result.l1.tts_s,
        "recovery_s": result.l1.recovery_s,
        "result": result.to_dict(with_intervals=False, with_spans=True),
    }


def _interval_row(job_id: str, iv: Any) -> dict[str, Any]:
    return {
        "job_id": job_id,
        "attempt": iv.attempt,
        "start": iv.start,
        "end": iv.end,
        "component": iv.component,
        "phase": iv.phase,
        "gpus": iv.gpus,
    }


def save_state(
    *,
    db_session: Session,
    job_id: str,
    state: AccountState | None,
    last_row: int | None,
    rows: int,
    rules: str,
) -> None:
    """Keep (or, with state None, drop) the job's settled accounting state."""
    db_session.execute(delete(JobAccountingState).where(JobAccountingState.job_id == job_id))
    if state is None or last_row is None:
        return
    db_session.execute(
        insert(JobAccountingState).values(
            job_id=job_id,
            last_event_row=last_row,
            event_rows=rows,
            rules=rules,
            settled_at=state.settled_at,
            computed_at=time.time(),
            state=state.to_json(),
        )
    )


def forget_states(*, db_session: Session, job_ids: Iterable[str]) -> None:
    """Drop these jobs' settled states (a stored event was replaced): the next compute is full.

    On Postgres this takes each job's claim first (backend.jobs.claims; it waits for a recompute
    of the job in progress, bounded by lock_timeout), so no recompute that read the replaced
    copy can save its state after this.
    """
    ids = sorted(set(job_ids))
    if not ids:
        return
    if claims.is_postgres(db_session):
        for job_id in ids:
            claims.claim(db_session, job_id)
    db_session.execute(delete(JobAccountingState).where(JobAccountingState.job_id.in_(ids)))


def store(
    *, db_session: Session, job_id: str, result: JobETT | None, write_job: bool = True
) -> dict[str, Any]:
    """Replace the job's job_results, job_intervals and attempts rows and its derived fields.

    Returns the derived fields; with write_job=False the caller writes them to `jobs` (a
    worker does, in its final update, so that it holds the job's row only for its commit).
    """
    db_session.execute(delete(JobInterval).where(JobInterval.job_id == job_id))
    db_session.execute(delete(JobResult).where(JobResult.job_id == job_id))
    db_session.execute(delete(AttemptHost).where(AttemptHost.job_id == job_id))
    db_session.execute(delete(Attempt).where(Attempt.job_id == job_id))
    if result is None:
        return {}
    db_session.execute(
        insert(JobResult).values(job_id=job_id, computed_at=time.time(), **_result_columns(result))
    )
    rows = [_interval_row(job_id, iv) for iv in result.intervals]
    # Core inserts: the ORM bulk path splits batches wherever a row's None columns differ.
    for chunk in _chunks(rows):
        db_session.execute(insert(JobInterval.__table__), chunk)
    attempts = [{"job_id": job_id, **a.to_dict()} for a in result.attempts]
    if attempts:
        db_session.execute(insert(Attempt.__table__), attempts)
    for chunk in _chunks(host_rows(job_id, result)):
        db_session.execute(insert(AttemptHost.__table__), chunk)
    derived: dict[str, Any] = {
        "gpus": result.gpus,
        "labels": result.labels,
        "config": result.config,
        "submitted_at": result.submitted_at,
        "ended_at": None if result.provisional else result.ended_at,
        "status": None if result.status is None else result.status[:16],
    }
    if result.model is not None:
        _ensure_model(db_session, result.model)
        derived["model"] = result.model
    if write_job:
        db_session.execute(update(Job).where(Job.job_id == job_id).values(**derived))
    return derived
