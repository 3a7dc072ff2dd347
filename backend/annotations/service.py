"""Annotations: create and list (SQL only; the REST views and the dashboard call these)."""

from __future__ import annotations

import time
from typing import Any

from sqlalchemy import or_, select
from sqlalchemy.orm import Session

from backend.annotations.models import Annotation

MAX_LIST = 1_000


def create(
    *,
    db_session: Session,
    ts: float,
    title: str,
    model: str | None = None,
    team: str | None = None,
    link: str | None = None,
    created_by: str | None = None,
) -> dict[str, Any]:
    """Store one annotation and answer it."""
    row = Annotation(
        ts=ts,
        title=title,
        model=model,
        team=team,
        link=link,
        created_by=created_by,
        created_at=time.time(),
    )
    db_session.add(row)
    db_session.flush()
    return to_dict(row)


def list_annotations(
    *,
    db_session: Session,
    start: float | None = None,
    end: float | None = None,
    model: str | None = None,
    team: str | None = None,
    limit: int = MAX_LIST,
) -> list[dict[str, Any]]:
    """Annotations in [start, end), oldest first.

    With `model` (or `team`), the ones about that model (team) and the fleet-wide ones (no model
    or team): a chart of one model shows the rollouts that concern it and those of the fleet.
    """
    stmt = select(Annotation)
    if start is not None:
        stmt = stmt.where(Annotation.ts >= start)
    if end is not None:
        stmt = stmt.where(Annotation.ts < end)
    if model is not None:
        stmt = stmt.where(or_(Annotation.model == model, Annotation.model.is_(None)))
    if team is not None:
        stmt = stmt.where(or_(Annotation.team == team, Annotation.team.is_(None)))
    stmt = stmt.order_by(Annotation.ts, Annotation.id).limit(limit)
    return [to_dict(r) for r in db_session.scalars(stmt)]


def to_dict(row: Annotation) -> dict[str, Any]:
    """An annotation as a plain dict (times as epoch seconds)."""
    return {
        "id": row.id,
        "ts": row.ts,
        "title": row.title,
        "model": row.model,
        "team": row.team,
        "link": row.link,
        "created_by": row.created_by,
        "created_at": row.created_at,
    }
