"""Silences: the rules a silence must meet, their storage, and which alert a silence mutes."""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from typing import Any

from sqlalchemy import or_, select
from sqlalchemy.orm import Session

from backend.alerts.models import Silence
from backend.text import clean_tree
from backend.timefmt import format_duration

# ---- silences ------------------------------------------------------------------------


SILENCE_COMMENT_MAX = 4096
SILENCE_MATCHER_MAX = {"owner": 128, "component": 64, "model": 256}


def check_silence(
    *,
    owner: str | None,
    component: str | None,
    model: str | None,
    starts_at: float,
    ends_at: float,
    comment: str | None,
    created_by: str | None,
    now: float,
    max_duration_s: float,
) -> dict[str, Any]:
    """The one set of silence rules (REST and dashboard): the row's fields, or ValueError."""
    matchers: dict[str, str | None] = {}
    for key, value in (("owner", owner), ("component", component), ("model", model)):
        value = (value or "").strip() or None
        if value is not None:
            if len(value) > SILENCE_MATCHER_MAX[key]:
                raise ValueError(f"{key} is longer than {SILENCE_MATCHER_MAX[key]} characters")
            clean_tree(value, key)
        matchers[key] = value
    if not any(matchers.values()):
        raise ValueError("a silence needs at least one matcher (owner, component or model)")
    comment = (comment or "").strip()
    if not comment:
        raise ValueError(
            "a silence needs a comment that says why (whoever reads it later needs it)"
        )
    if len(comment) > SILENCE_COMMENT_MAX:
        raise ValueError(f"the comment is longer than {SILENCE_COMMENT_MAX} characters")
    clean_tree(comment, "comment")
    if not created_by:
        raise ValueError("a silence needs an actor: the name of the admin token that creates it")
    if not (math.isfinite(starts_at) and math.isfinite(ends_at)):
        raise ValueError("a silence's start and end must be finite times")
    if ends_at <= starts_at:
        raise ValueError("a silence must end after it starts")
    if ends_at <= now:
        raise ValueError("that silence would already have ended; give an end in the future")
    limit = format_duration(max_duration_s)
    if ends_at - starts_at > max_duration_s:
        raise ValueError(
            f"a silence may last at most {limit} (ETT_SILENCE_MAX_DURATION_S); this one lasts "
            f"{format_duration(round(ends_at - starts_at))}. Make it shorter and renew it if needed"
        )
    if starts_at - now > max_duration_s:
        raise ValueError(f"a silence may start at most {limit} from now")
    return {
        **matchers,
        "starts_at": float(starts_at),
        "ends_at": float(ends_at),
        "comment": comment,
        "created_by": created_by,
    }


def create_silence(
    *,
    db_session: Session,
    owner: str | None,
    component: str | None,
    model: str | None,
    starts_at: float,
    ends_at: float,
    comment: str | None,
    created_by: str,
    max_duration_s: float,
    now: float | None = None,
) -> Silence:
    """Mute notices of alerts matching every given matcher, from starts_at to ends_at.

    The rules are check_silence's; created_by is the name of the token that asks.
    """
    now = time.time() if now is None else now
    fields = check_silence(
        owner=owner,
        component=component,
        model=model,
        starts_at=starts_at,
        ends_at=ends_at,
        comment=comment,
        created_by=created_by,
        now=now,
        max_duration_s=max_duration_s,
    )
    row = Silence(**fields, created_at=now)
    db_session.add(row)
    db_session.flush()
    return row


def list_silences(
    *, db_session: Session, active_at: float | None = None, owner: str | None = None
) -> list[Silence]:
    """Silences, newest first; only those in force at active_at when given."""
    stmt = select(Silence).order_by(Silence.created_at.desc(), Silence.id.desc())
    if active_at is not None:
        stmt = stmt.where(Silence.starts_at <= active_at, Silence.ends_at > active_at)
    if owner:
        stmt = stmt.where(or_(Silence.owner == owner, Silence.owner.is_(None)))
    return list(db_session.scalars(stmt))


def expire_silence(*, db_session: Session, silence_id: int, now: float | None = None) -> bool:
    """End a silence now; False if there is no such silence."""
    row = db_session.get(Silence, silence_id)
    if row is None:
        return False
    now = time.time() if now is None else now
    row.ends_at = min(row.ends_at, now)
    row.starts_at = min(row.starts_at, row.ends_at)
    db_session.flush()
    return True


def silence_matches(silence: Silence, labels: dict[str, str]) -> bool:
    """Whether every matcher the silence sets equals the alert's label."""
    for key in ("owner", "component", "model"):
        want = getattr(silence, key)
        if want is not None and labels.get(key) != want:
            return False
    return True


def silenced_by(silences: Sequence[Silence], labels: dict[str, str]) -> Silence | None:
    """The first silence that mutes an alert with these labels, or None."""
    return next((s for s in silences if silence_matches(s, labels)), None)
