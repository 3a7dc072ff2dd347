"""Which transaction computes a job: a Postgres advisory lock per job, not the job's row.

A worker's recompute of one job holds the job's claim for its whole transaction, but not the
`jobs` row, which ingest's dirty mark writes: the worker takes the row only for its final
update (derived fields and the dirty flag), so ingest waits on a recompute for at most that
update's commit. The claim is a transaction-level advisory lock, released at commit, rollback,
or when the server ends the session (a frozen worker: ETT_IDLE_IN_TRANSACTION_TIMEOUT_S).
An ingest that replaces a stored event takes the claim too (backend.ett.store.forget_states),
so no recompute can save a state computed from the copy it replaced.

SQLite has one writer at a time: there the claim is the database's write lock, taken by a
write to the job's row.
"""

from __future__ import annotations

from sqlalchemy import text
from sqlalchemy.orm import Session

# The advisory lock's first key: these locks' namespace (the second is hashtext(job_id)).
CLAIM_NAMESPACE = 2029

_TRY = text("SELECT pg_try_advisory_xact_lock(:ns, hashtext(:job_id))")
_WAIT = text("SELECT pg_advisory_xact_lock(:ns, hashtext(:job_id))")


def is_postgres(db_session: Session) -> bool:
    """True when the session's database is Postgres (the claims are advisory locks)."""
    return db_session.get_bind().dialect.name == "postgresql"


def try_claim(db_session: Session, job_id: str) -> bool:
    """Take the job's claim for this transaction if no other transaction holds it (Postgres)."""
    return bool(db_session.scalar(_TRY, {"ns": CLAIM_NAMESPACE, "job_id": job_id}))


def claim(db_session: Session, job_id: str) -> None:
    """Take the job's claim for this transaction, waiting (bounded by lock_timeout; Postgres)."""
    db_session.execute(_WAIT, {"ns": CLAIM_NAMESPACE, "job_id": job_id})
