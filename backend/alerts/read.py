"""Reads: alert instances, the delivery log, and the documents REST and the owners page show."""

from __future__ import annotations

import math
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlencode

from sqlalchemy import case, func, select
from sqlalchemy.orm import Session

from backend.alerts.acks import acks_for
from backend.alerts.models import (
    Acknowledgement,
    AlertEpisode,
    AlertState,
    Delivery,
    Notification,
    Silence,
)
from backend.alerts.silences import list_silences, silenced_by
from backend.alerts.slos import UNIT_DECIMALS, SloSpec
from backend.alerts.store import list_channels, list_slos
from backend.params import rounded
from backend.timefmt import format_duration, rfc3339

# ---- reads ------------------------------------------------------------------------------------


def _alert_filters(
    owner: str | None,
    state: str | None,
    component: str | None,
    model: str | None,
    slo: str | None,
) -> list[Any]:
    pairs = (
        (AlertState.owner, owner),
        (AlertState.state, state),
        (AlertState.component, component),
        (AlertState.model, model),
        (AlertState.slo_name, slo),
    )
    return [column == value for column, value in pairs if value]


def list_alerts(
    *,
    db_session: Session,
    owner: str | None = None,
    state: str | None = None,
    component: str | None = None,
    model: str | None = None,
    slo: str | None = None,
    limit: int = 500,
) -> list[AlertState]:
    """Alert instances, firing first, then by most recent change."""
    stmt = select(AlertState).where(*_alert_filters(owner, state, component, model, slo))
    # Ordered in SQL: the limit must keep the firing alerts, not any `limit` rows.
    rank = case(
        {"firing": 0, "pending": 1, "resolved": 2, "inactive": 3},
        value=AlertState.state,
        else_=9,
    )
    recent = func.coalesce(AlertState.fired_at, AlertState.last_evaluated_at, 0.0)
    return list(
        db_session.scalars(stmt.order_by(rank, recent.desc(), AlertState.fingerprint).limit(limit))
    )


def count_alerts(
    *,
    db_session: Session,
    owner: str | None = None,
    state: str | None = None,
    component: str | None = None,
    model: str | None = None,
    slo: str | None = None,
) -> int:
    """How many alert instances match the filters (the list's `total`, past its limit)."""
    stmt = select(func.count()).select_from(AlertState)
    return int(
        db_session.scalar(stmt.where(*_alert_filters(owner, state, component, model, slo))) or 0
    )


def list_deliveries(
    *, db_session: Session, owner: str | None = None, limit: int = 200
) -> list[Delivery]:
    """The delivery log, newest first."""
    stmt = select(Delivery).order_by(Delivery.at.desc(), Delivery.id.desc()).limit(limit)
    if owner:
        stmt = stmt.where(Delivery.owner == owner)
    return list(db_session.scalars(stmt))


def _notified(status: str | None, delivered: list[str] | None, silenced: bool) -> str:
    """The channels an episode's firing notice reached, in words."""
    if delivered:
        return ", ".join(delivered)
    if status is None:
        return "none: silenced" if silenced else "none"
    if status == "undeliverable":
        return "none: no channel configured"
    return f"none yet ({status})"


def episode_docs(
    *,
    db_session: Session,
    start: float,
    end: float,
    owner: str | None = None,
    component: str | None = None,
    limit: int = 500,
) -> list[dict[str, Any]]:
    """The alert episodes that were firing at some time in [start, end), newest first: start,
    end, peak, who acknowledged, and the channels the firing notice reached (RFC 3339 times)."""
    stmt = select(AlertEpisode, AlertState.labels).join(
        AlertState, AlertState.fingerprint == AlertEpisode.fingerprint
    )
    stmt = stmt.where(
        AlertEpisode.fired_at < end,
        (AlertEpisode.resolved_at.is_(None)) | (AlertEpisode.resolved_at >= start),
    )
    if owner:
        stmt = stmt.where(AlertEpisode.owner == owner)
    if component:
        stmt = stmt.where(AlertEpisode.component == component)
    rows = db_session.execute(
        stmt.order_by(AlertEpisode.fired_at.desc(), AlertEpisode.id.desc()).limit(limit)
    ).all()
    fps = sorted({e.fingerprint for e, _labels in rows})
    acked: dict[tuple[str, int], list[str]] = {}
    notices: dict[tuple[str, int], tuple[str, list[str] | None]] = {}
    if fps:
        for a in db_session.scalars(
            select(Acknowledgement)
            .where(Acknowledgement.fingerprint.in_(fps))
            .order_by(Acknowledgement.created_at)
        ):
            acked.setdefault((a.fingerprint, a.episode), []).append(a.acknowledged_by)
        for fp, episode, status, delivered in db_session.execute(
            select(
                Notification.fingerprint,
                Notification.episode,
                Notification.status,
                Notification.delivered_channels,
            ).where(Notification.fingerprint.in_(fps), Notification.kind == "firing")
        ):
            notices[(fp, episode)] = (status, delivered)
    out = []
    for e, labels in rows:
        key = (e.fingerprint, e.episode)
        status, delivered = notices.get(key, (None, None))
        silenced = e.silenced_by is not None
        out.append(
            {
                "fingerprint": e.fingerprint,
                "episode": e.episode,
                "slo": e.slo_name,
                "owner": e.owner,
                "component": e.component,
                "model": e.model,
                "host": (labels or {}).get("host"),
                "breach_started_at": rfc3339(e.breach_started_at),
                "fired_at": rfc3339(e.fired_at),
                "resolved_at": rfc3339(e.resolved_at),
                "peak": e.peak,
                "objective": e.objective,
                "silenced": silenced,
                "acknowledged_by": acked.get(key, []),
                "notice": status or ("silenced" if silenced else None),
                "channels": list(delivered or []),
                "notified": _notified(status, delivered, silenced),
            }
        )
    return out


# ---- read documents (the REST answers and the owners page) ----------------------------------------


def alert_doc(
    state: AlertState, acks: list[Any], silenced: bool, unit: str | None = None
) -> dict[str, Any]:
    """One alert instance as the API and the owners page show it (RFC 3339 times, values
    rounded for their SLO's unit: `rounded_in`)."""
    details = state.details or {}
    digits = UNIT_DECIMALS.get(unit) if unit else None
    doc = {
        "fingerprint": state.fingerprint,
        "slo": state.slo_name,
        "owner": state.owner,
        "component": state.component,
        "model": state.model,
        "severity": state.severity,
        "state": state.state,
        "value": state.value,
        "objective": state.objective,
        "unit": unit,
        "labels": state.labels,
        "breach_started_at": rfc3339(state.breach_started_at),
        "fired_at": rfc3339(state.fired_at),
        "resolved_at": rfc3339(state.resolved_at),
        "last_evaluated_at": rfc3339(state.last_evaluated_at),
        "episode": state.episode,
        "notified": state.notified_firing,
        "silenced": silenced,
        "jobs": details.get("jobs", 0),
        "models": details.get("models", []),
        "job_drivers": details.get("job_drivers", []),
        "acknowledged": bool(acks and acks[0].episode == state.episode),
        "acknowledgements": [
            {
                "by": a.acknowledged_by,
                "comment": a.comment,
                "episode": a.episode,
                "at": rfc3339(a.created_at),
            }
            for a in acks
        ],
    }
    return rounded_in(doc, digits)


def rounded_in(doc: dict[str, Any], digits: int | None) -> dict[str, Any]:
    """A copy with every `value` and `objective` at the unit's decimals (None: 6 significant
    digits) and other floats by their own field's unit (docs/API.md "Units and rounding")."""
    return rounded(doc, by_key={"value": digits, "objective": digits})


# The range datetime can show; a stored time outside it (an absurd silence) is shown clamped.
_MIN_SHOWN = datetime(1, 1, 2, tzinfo=UTC).timestamp()
_MAX_SHOWN = datetime(9999, 12, 31, tzinfo=UTC).timestamp()


def shown_time(ts: float | None) -> str | None:
    """RFC 3339 for any stored time: out-of-range times are clamped, NaN reads as None."""
    if ts is None or math.isnan(ts):
        return None
    return rfc3339(min(max(ts, _MIN_SHOWN), _MAX_SHOWN))


def silence_doc(s: Silence, now: float) -> dict[str, Any]:
    """One silence as the API and the owners page show it (safe for any stored row)."""
    return {
        "id": s.id,
        "matchers": {k: getattr(s, k) for k in ("owner", "component", "model") if getattr(s, k)},
        "starts_at": shown_time(s.starts_at),
        "ends_at": shown_time(s.ends_at),
        "active": bool(s.starts_at <= now < s.ends_at),
        "comment": s.comment,
        "created_by": s.created_by,
        "created_at": shown_time(s.created_at),
    }


def alert_docs(
    *, db_session: Session, states: list[AlertState], now: float
) -> list[dict[str, Any]]:
    """Alert documents with their acknowledgements and whether a silence mutes them now."""
    acks = acks_for(db_session=db_session, fingerprints=[s.fingerprint for s in states])
    silences = list_silences(db_session=db_session, active_at=now)
    units = {spec.name: spec.unit for spec in list_slos(db_session=db_session)} if states else {}
    return [
        alert_doc(
            s,
            acks.get(s.fingerprint, []),
            silenced_by(silences, dict(s.labels or {})) is not None,
            units.get(s.slo_name),
        )
        for s in states
    ]


def slo_doc(spec: SloSpec) -> dict[str, Any]:
    """One SLO as the API shows it: the spec plus its window in words and its unit."""
    return {**spec.to_doc(), "window": format_duration(spec.window_s), "unit": spec.unit}


def owner_status(*, db_session: Session, owner: str, now: float, public_url: str) -> dict[str, Any]:
    """An owner's SLOs with state, alerts, active silences, channels and recent deliveries."""
    slos = list_slos(db_session=db_session, owner=owner)
    states = list_alerts(db_session=db_session, owner=owner)
    alerts = alert_docs(db_session=db_session, states=states, now=now)
    by_slo: dict[str, list[dict[str, Any]]] = {}
    for a in alerts:
        by_slo.setdefault(a["slo"], []).append(a)
    slo_rows = []
    for spec in slos:
        instances = by_slo.get(spec.name, [])
        worst = next((i["state"] for i in instances if i["state"] == "firing"), None) or next(
            (i["state"] for i in instances if i["state"] == "pending"), "ok"
        )
        slo_rows.append(
            {
                **slo_doc(spec),
                "status": worst if spec.enabled else "disabled",
                "instances": [
                    {k: i[k] for k in ("fingerprint", "model", "state", "value", "fired_at")}
                    for i in instances
                ],
            }
        )
    firing = [a for a in alerts if a["state"] in ("firing", "pending")]
    channels = list_channels(db_session=db_session, owner=owner)
    deliveries = list_deliveries(db_session=db_session, owner=owner, limit=50)
    return {
        "owner": owner,
        "status": "firing"
        if any(a["state"] == "firing" for a in firing)
        else ("pending" if firing else "ok"),
        "evaluated_at": rfc3339(max((s.last_evaluated_at for s in states), default=None)),
        "slos": slo_rows,
        "alerts": firing,
        "silences": [
            silence_doc(s, now)
            for s in list_silences(db_session=db_session, active_at=now, owner=owner)
        ],
        "channels": [{"name": c.name, "kind": c.kind, "enabled": c.enabled} for c in channels],
        "deliveries": [
            {
                "at": rfc3339(d.at),
                "channel": d.channel,
                "kind": d.kind,
                "attempt": d.attempt,
                "outcome": d.outcome,
                "status_code": d.status_code,
                "error": d.error,
                "fingerprint": d.fingerprint,
            }
            for d in deliveries
        ],
        "dashboard": f"{public_url.rstrip('/')}/owners?{urlencode({'owner': owner})}",
    }
