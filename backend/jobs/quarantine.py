"""Quarantine: a job whose computation fails waits, with backoff, and carries its error.

A quarantined job never holds back the others: the recompute loop skips it until its next
try, and its error is what its REST answer and job page show. One log line per change of
state (in, out), never one per try.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any

from sqlalchemy import delete, select
from sqlalchemy.orm import Session

from backend.config import Settings
from backend.jobs.models import JobQuarantine

log = logging.getLogger("ett.quarantine")


def backoff_s(failures: int, settings: Settings | None) -> float:
    """Seconds until the next try after `failures` failures: doubling, capped."""
    base = settings.quarantine_backoff_s if settings else 30.0
    cap = settings.quarantine_backoff_max_s if settings else 3_600.0
    return float(min(cap, base * 2 ** max(0, failures - 1)))


def record_failure(
    *,
    db_session: Session,
    job_id: str,
    error: str,
    now: float,
    settings: Settings | None = None,
) -> JobQuarantine:
    """Put a job in quarantine, or count one more failure; the caller commits."""
    row = db_session.get(JobQuarantine, job_id)
    if row is None:
        row = JobQuarantine(
            job_id=job_id,
            error=error,
            failures=1,
            first_failed_at=now,
            last_failed_at=now,
            retry_at=now + backoff_s(1, settings),
        )
        db_session.add(row)
        log.warning(
            "job %s quarantined: its computation failed (%s); next try in %.0f s",
            job_id,
            error,
            row.retry_at - now,
        )
    else:
        row.failures += 1
        row.error = error
        row.last_failed_at = now
        row.retry_at = now + backoff_s(row.failures, settings)
    db_session.flush()
    return row


def release(*, db_session: Session, job_ids: Iterable[str]) -> int:
    """Take jobs out of quarantine (they computed); the caller commits. Returns how many."""
    ids = sorted(set(job_ids))
    if not ids:
        return 0
    gone = list(
        db_session.scalars(
            delete(JobQuarantine)
            .where(JobQuarantine.job_id.in_(ids))
            .returning(JobQuarantine.job_id)
        )
    )
    for job_id in gone:
        log.warning("job %s left quarantine: it computed", job_id)
    return len(gone)


def quarantined(*, db_session: Session, job_ids: Iterable[str]) -> set[str]:
    """Those of these jobs that are in quarantine."""
    ids = set(job_ids)
    if not ids:
        return set()
    # The quarantine is small; the ids may be every job (no IN list of 100,000 parameters).
    return set(db_session.scalars(select(JobQuarantine.job_id))) & ids


def waiting(now: float) -> Any:
    """A subquery of the jobs whose next try is after `now` (the recompute loop skips them)."""
    return select(JobQuarantine.job_id).where(JobQuarantine.retry_at > now)


def status(*, db_session: Session, job_id: str) -> dict[str, Any] | None:
    """A job's quarantine as the API shows it, or None when it is not quarantined."""
    row = db_session.get(JobQuarantine, job_id)
    if row is None:
        return None
    return {
        "error": row.error,
        "failures": row.failures,
        "first_failed_at": row.first_failed_at,
        "last_failed_at": row.last_failed_at,
        "retry_at": row.retry_at,
    }
