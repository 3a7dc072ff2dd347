"""What the owners page can change: silences and acknowledgements, behind an admin token.

The dashboard reads without a token (like the REST reads by default), but every write here
needs the same admin token that `POST /api/v1/silences` and `/alerts/{fp}/ack` need.
"""

from __future__ import annotations

import math
import time

from sqlalchemy.orm import Session

from backend.alerts import acks
from backend.alerts import silences as alert_silences
from backend.auth import service as auth_service
from backend.auth.models import ApiToken
from backend.timefmt import rfc3339
from dashboard import data
from dashboard.context import current


class ActionRefused(ValueError):
    """The action was not done; str() says why, in words for the page."""


def _admin(db_session: Session, token: str | None) -> ApiToken:
    if not token or not token.strip():
        raise ActionRefused(
            "Paste an admin token first (create one with `ett token create "
            "--name you --scope admin`)."
        )
    try:
        row = auth_service.resolve(db_session=db_session, secret=token.strip())
    except auth_service.TokenRefused as err:
        raise ActionRefused(_sentence(str(err))) from None
    if not auth_service.allows_scope(row, "admin"):
        raise ActionRefused(f"Token {row.name!r} has scope {row.scope!r}; this needs admin.")
    return row


def create_silence(
    *,
    token: str | None,
    owner: str | None,
    component: str | None,
    model: str | None,
    hours: float | None,
    comment: str | None,
    now: float | None = None,
) -> str:
    """Create a silence from now for `hours`; returns what was done, or raises ActionRefused.

    The rules (comment, maximum duration, actor) are the service's, as for the REST API.
    """
    now = time.time() if now is None else now
    try:
        seconds = float(hours) * 3600 if hours is not None else math.nan
    except (TypeError, ValueError):
        seconds = math.nan
    if not math.isfinite(seconds):
        raise ActionRefused("Give the duration in hours, e.g. 4.")
    with data.session() as s:
        who = _admin(s, token)
        try:
            row = alert_silences.create_silence(
                db_session=s,
                owner=owner,
                component=component,
                model=model,
                starts_at=now,
                ends_at=now + seconds,
                comment=comment,
                created_by=who.name,
                max_duration_s=current().settings.silence_max_duration_s,
                now=now,
            )
        except ValueError as err:
            raise ActionRefused(_sentence(str(err))) from None
        s.commit()
        matchers = ", ".join(
            f"{k}={v}"
            for k, v in (("owner", row.owner), ("component", row.component), ("model", row.model))
            if v
        )
        return f"Silence #{row.id} ({matchers}) is active until {rfc3339(row.ends_at)}."


def _sentence(text: str) -> str:
    text = text[:1].upper() + text[1:]
    return text if text.endswith(".") else text + "."


def expire_silence(*, token: str | None, silence_id: int | None, now: float | None = None) -> str:
    """End a silence now."""
    if silence_id is None:
        raise ActionRefused("Pick the silence to expire.")
    with data.session() as s:
        _admin(s, token)
        if not alert_silences.expire_silence(db_session=s, silence_id=int(silence_id), now=now):
            raise ActionRefused(f"There is no silence #{silence_id}.")
        s.commit()
    return f"Silence #{silence_id} has expired."


def acknowledge(
    *, token: str | None, fingerprint: str | None, comment: str | None, now: float | None = None
) -> str:
    """Acknowledge an alert's current episode."""
    if not fingerprint:
        raise ActionRefused("Pick the alert to acknowledge.")
    with data.session() as s:
        who = _admin(s, token)
        try:
            ack = acks.acknowledge(
                db_session=s,
                fingerprint=fingerprint,
                acknowledged_by=who.name,
                comment=comment or "",
                now=now,
            )
        except ValueError as err:
            raise ActionRefused(_sentence(str(err))) from None
        if ack is None:
            raise ActionRefused("That alert no longer exists.")
        s.commit()
    return f"Alert acknowledged by {who.name}."
