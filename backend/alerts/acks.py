"""Acknowledgements: who took an alert's current episode in hand."""

from __future__ import annotations

import time
from collections.abc import Sequence

from sqlalchemy import select
from sqlalchemy.orm import Session

from backend.alerts.models import Acknowledgement, AlertState
from backend.alerts.silences import SILENCE_COMMENT_MAX
from backend.text import clean_tree, text_problem


def acknowledge(
    *,
    db_session: Session,
    fingerprint: str,
    acknowledged_by: str,
    comment: str = "",
    now: float | None = None,
) -> Acknowledgement | None:
    """Record that someone took the alert's current episode in hand; None if no such alert.

    acknowledged_by is the name of the token that asks; a bad comment raises ValueError.
    """
    comment = (comment or "").strip()
    if len(comment) > SILENCE_COMMENT_MAX:
        raise ValueError(f"the comment is longer than {SILENCE_COMMENT_MAX} characters")
    clean_tree(comment, "comment")
    if not acknowledged_by:
        raise ValueError("an acknowledgement needs an actor: the name of the admin token")
    if text_problem(fingerprint) or len(fingerprint) > 64:
        return None
    state = db_session.get(AlertState, fingerprint)
    if state is None:
        return None
    ack = Acknowledgement(
        fingerprint=fingerprint,
        episode=state.episode,
        acknowledged_by=acknowledged_by,
        comment=comment,
        created_at=time.time() if now is None else now,
    )
    db_session.add(ack)
    db_session.flush()
    return ack


def acks_for(
    *, db_session: Session, fingerprints: Sequence[str]
) -> dict[str, list[Acknowledgement]]:
    """Acknowledgements per alert, newest first."""
    if not fingerprints:
        return {}
    out: dict[str, list[Acknowledgement]] = {}
    for ack in db_session.scalars(
        select(Acknowledgement)
        .where(Acknowledgement.fingerprint.in_(list(fingerprints)))
        .order_by(Acknowledgement.created_at.desc())
    ):
        out.setdefault(ack.fingerprint, []).append(ack)
    return out
