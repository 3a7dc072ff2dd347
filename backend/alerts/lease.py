"""The evaluator lease: one conditional UPDATE on one row, so one replica evaluates at a time."""

from __future__ import annotations

import os
import socket
import time
import uuid

from sqlalchemy import or_, update
from sqlalchemy.orm import Session

from backend.alerts.models import EvaluatorLease
from backend.db import insert_for

LEASE_NAME = "alert-evaluator"


def default_holder() -> str:
    """An id for this evaluator process: host, pid and a random suffix."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"


# ---- lease ------------------------------------------------------------------------------------


def acquire_lease(
    *,
    db_session: Session,
    holder: str,
    ttl_s: float,
    now: float | None = None,
    name: str = LEASE_NAME,
) -> bool:
    """Take or renew the evaluator lease; True when this holder has it until now + ttl_s."""
    now = time.time() if now is None else now
    ins = insert_for(db_session, EvaluatorLease).values(
        name=name, holder=None, expires_at=0.0, acquired_at=None
    )
    db_session.execute(ins.on_conflict_do_nothing(index_elements=["name"]))
    db_session.commit()
    # One conditional UPDATE: the database serialises racing writers on the row.
    result = db_session.execute(
        update(EvaluatorLease)
        .where(
            EvaluatorLease.name == name,
            or_(
                EvaluatorLease.holder == holder,
                EvaluatorLease.holder.is_(None),
                EvaluatorLease.expires_at < now,
            ),
        )
        .values(holder=holder, expires_at=now + ttl_s, acquired_at=now)
    )
    db_session.commit()
    return result.rowcount == 1


def release_lease(*, db_session: Session, holder: str, name: str = LEASE_NAME) -> None:
    """Give the lease up (only if this holder has it)."""
    db_session.execute(
        update(EvaluatorLease)
        .where(EvaluatorLease.name == name, EvaluatorLease.holder == holder)
        .values(holder=None, expires_at=0.0)
    )
    db_session.commit()
