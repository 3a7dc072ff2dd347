"""REST for SLOs, alerts, silences, acknowledgements and an owner's status (SPEC section 5)."""

from __future__ import annotations

import time
from typing import Annotated, Any, Literal

from fastapi import APIRouter, HTTPException, Path, Query, Response
from pydantic import BaseModel, Field

from backend.alerts import acks, read, store
from backend.alerts import silences as alert_silences
from backend.alerts.models import AckCreate, Silence, SilenceCreate
from backend.alerts.schemas import (
    AckRead,
    AlertRead,
    ChannelRead,
    ChannelRef,
    EpisodeList,
    OwnerStatus,
    SilenceRead,
)
from backend.alerts.slos import ChannelSpec, SloSpec
from backend.auth.deps import AdminAccess, ReadAccess
from backend.deps import SessionDep, SettingsDep
from backend.params import check_time
from backend.text import CleanStr
from backend.timefmt import parse_duration, parse_instant, rfc3339

router = APIRouter(tags=["alerts"])

AlertStateName = Literal["inactive", "pending", "firing", "resolved"]
SloName = Annotated[CleanStr, Path(max_length=128)]


class SloRead(BaseModel):
    """One SLO as the API shows it (durations in seconds and in words)."""

    name: str
    owner: str
    component: str
    phase: str | None
    indicator: str
    percentile: float | None
    failure_kind: str | None
    objective: float = Field(description="in the SLO's unit")
    unit: str = Field(description="the unit of the objective and of alert values")
    window_s: float
    window: str
    for_s: float
    hysteresis: float
    severity: str
    model: str | None
    labels: dict[str, str]
    per_model: bool
    runbook_url: str | None
    description: str | None
    enabled: bool


class SloList(BaseModel):
    """GET /slos: every SLO, and how many."""

    items: list[SloRead]
    total: int = Field(description="how many SLOs match (all of them are listed)")


class AlertList(BaseModel):
    """GET /alerts: the alert instances of one page (firing first), and how many match."""

    items: list[AlertRead]
    total: int = Field(description="how many instances match the filters, past the limit too")
    limit: int


def _slo_read(spec: SloSpec) -> SloRead:
    return SloRead(**read.slo_doc(spec))


@router.get("/slos", response_model=SloList)
def get_slos(
    db_session: SessionDep,
    _: ReadAccess,
    owner: Annotated[CleanStr | None, Query(max_length=128)] = None,
) -> SloList:
    """Every SLO (from the SLO file and the admin API), optionally one owner's."""
    items = [_slo_read(s) for s in store.list_slos(db_session=db_session, owner=owner)]
    return SloList(items=items, total=len(items))


@router.get("/slos/{name}", response_model=SloRead)
def get_slo(name: SloName, db_session: SessionDep, _: ReadAccess) -> SloRead:
    """One SLO."""
    spec = store.get_slo(db_session=db_session, name=name)
    if spec is None:
        raise HTTPException(404, f"no SLO named {name!r}")
    return _slo_read(spec)


@router.put("/slos/{name}", response_model=SloRead)
def put_slo(name: SloName, spec: SloSpec, db_session: SessionDep, _: AdminAccess) -> SloRead:
    """Create or replace an SLO (admin); it then overrides a file SLO of the same name."""
    if spec.name != name:
        raise HTTPException(400, f"the body's name {spec.name!r} differs from the path's {name!r}")
    store.put_slo(db_session=db_session, spec=spec)
    db_session.commit()
    return _slo_read(spec)


@router.delete("/slos/{name}", status_code=204)
def delete_slo(name: SloName, db_session: SessionDep, _: AdminAccess) -> Response:
    """Delete an SLO (admin); its firing alerts resolve on the next evaluation."""
    if not store.delete_slo(db_session=db_session, name=name):
        raise HTTPException(404, f"no SLO named {name!r}")
    db_session.commit()
    return Response(status_code=204)


@router.get("/alerts", response_model=AlertList)
def get_alerts(
    db_session: SessionDep,
    _: ReadAccess,
    owner: Annotated[CleanStr | None, Query(max_length=128)] = None,
    state: AlertStateName | None = None,
    component: Annotated[CleanStr | None, Query(max_length=64)] = None,
    model: Annotated[CleanStr | None, Query(max_length=256)] = None,
    slo: Annotated[CleanStr | None, Query(max_length=128)] = None,
    limit: int = Query(500, ge=1, le=5000),
) -> dict[str, Any]:
    """Alert instances (filters: owner, state, component, model, slo), firing first."""
    filters = {"owner": owner, "state": state, "component": component, "model": model, "slo": slo}
    states = read.list_alerts(db_session=db_session, limit=limit, **filters)
    return {
        "items": read.alert_docs(db_session=db_session, states=states, now=time.time()),
        "total": read.count_alerts(db_session=db_session, **filters),
        "limit": limit,
    }


@router.get("/alerts/episodes", response_model=EpisodeList)
def get_episodes(
    db_session: SessionDep,
    _: ReadAccess,
    start: Annotated[str | None, Query(description="RFC 3339 or epoch seconds")] = None,
    end: Annotated[str | None, Query(description="RFC 3339 or epoch seconds; default now")] = None,
    owner: Annotated[CleanStr | None, Query(max_length=128)] = None,
    component: Annotated[CleanStr | None, Query(max_length=64)] = None,
    limit: int = Query(500, ge=1, le=5000),
) -> dict[str, Any]:
    """Alert episodes firing at some time in [start, end) (default: the last 30 days), newest
    first: start, end, peak, who acknowledged, the channels notified."""
    try:
        hi = check_time(parse_instant(end).ts, "end") if end is not None else time.time()
        lo = check_time(parse_instant(start).ts, "start") if start is not None else hi - 30 * 86400
    except ValueError as err:
        raise HTTPException(422, str(err)) from err
    items = read.episode_docs(
        db_session=db_session, start=lo, end=hi, owner=owner, component=component, limit=limit
    )
    return {"items": items, "total": len(items)}


@router.post("/alerts/{fingerprint}/ack", status_code=201, response_model=AckRead)
def ack_alert(
    fingerprint: Annotated[CleanStr, Path(max_length=64)],
    body: AckCreate,
    db_session: SessionDep,
    token: AdminAccess,
) -> dict[str, Any]:
    """Acknowledge an alert's current episode, as the admin token's name."""
    try:
        ack = acks.acknowledge(
            db_session=db_session,
            fingerprint=fingerprint,
            acknowledged_by=token.name,
            comment=body.comment,
        )
    except ValueError as err:
        raise HTTPException(422, str(err)) from err
    if ack is None:
        raise HTTPException(404, f"no alert with fingerprint {fingerprint!r}")
    db_session.commit()
    return {
        "fingerprint": fingerprint,
        "episode": ack.episode,
        "by": ack.acknowledged_by,
        "comment": ack.comment,
        "at": rfc3339(ack.created_at),
    }


@router.get("/silences", response_model=list[SilenceRead])
def get_silences(
    db_session: SessionDep,
    _: ReadAccess,
    active: bool = False,
    owner: Annotated[CleanStr | None, Query(max_length=128)] = None,
) -> list[dict[str, Any]]:
    """Silences, newest first; active=true keeps those in force now."""
    now = time.time()
    rows = alert_silences.list_silences(
        db_session=db_session, active_at=now if active else None, owner=owner
    )
    return [read.silence_doc(s, now) for s in rows]


@router.post("/silences", status_code=201, response_model=SilenceRead)
def post_silence(
    body: SilenceCreate, db_session: SessionDep, settings: SettingsDep, token: AdminAccess
) -> dict[str, Any]:
    """Create a silence: matchers on owner, component, model; an expiry; a required comment.

    The silence is recorded as created by the admin token's name. It may last at most
    ETT_SILENCE_MAX_DURATION_S (default 30 days).
    """
    now = time.time()
    try:
        starts = (
            check_time(parse_instant(body.starts_at).ts, "starts_at")
            if body.starts_at is not None
            else now
        )
        if body.ends_at is not None and body.duration is not None:
            raise ValueError("give either ends_at or duration, not both")
        if body.ends_at is not None:
            ends = check_time(parse_instant(body.ends_at).ts, "ends_at")
        elif body.duration is not None:
            ends = starts + parse_duration(body.duration)
        else:
            raise ValueError("give ends_at (RFC 3339 or epoch seconds) or a duration such as 2h")
        row = alert_silences.create_silence(
            db_session=db_session,
            owner=body.owner,
            component=body.component,
            model=body.model,
            starts_at=starts,
            ends_at=ends,
            comment=body.comment,
            created_by=token.name,
            max_duration_s=settings.silence_max_duration_s,
            now=now,
        )
    except ValueError as err:
        raise HTTPException(422, str(err)) from err
    db_session.commit()
    return read.silence_doc(row, now)


@router.delete("/silences/{silence_id}", response_model=SilenceRead)
def delete_silence(
    silence_id: Annotated[int, Path(ge=1, le=2**63 - 1)], db_session: SessionDep, _: AdminAccess
) -> dict[str, Any]:
    """Expire a silence now."""
    if not alert_silences.expire_silence(db_session=db_session, silence_id=silence_id):
        raise HTTPException(404, f"no silence {silence_id}")
    db_session.commit()
    return read.silence_doc(db_session.get(Silence, silence_id), time.time())


@router.put("/owners/{owner}/channels/{name}", response_model=ChannelRef)
def put_channel(
    owner: Annotated[CleanStr, Path(max_length=128)],
    name: str,
    spec: ChannelSpec,
    db_session: SessionDep,
    _: AdminAccess,
) -> dict[str, Any]:
    """Create or replace one of an owner's channels (admin)."""
    if spec.name != name:
        raise HTTPException(400, f"the body's name {spec.name!r} differs from the path's {name!r}")
    row = store.put_channel(db_session=db_session, owner=owner, spec=spec)
    db_session.commit()
    return {"owner": owner, "name": row.name, "kind": row.kind, "enabled": row.enabled}


@router.get("/owners/{owner}/channels", response_model=list[ChannelRead])
def get_channels(
    owner: Annotated[CleanStr, Path(max_length=128)], db_session: SessionDep, _: AdminAccess
) -> list[dict[str, Any]]:
    """An owner's channels with their targets (admin: targets can hold secrets)."""
    return [
        {
            "name": c.name,
            "kind": c.kind,
            "target": c.target,
            "options": c.options,
            "enabled": c.enabled,
            "source": c.source,
        }
        for c in store.list_channels(db_session=db_session, owner=owner)
    ]


@router.get("/owners/{owner}/status", response_model=OwnerStatus)
def owner_status(
    owner: Annotated[CleanStr, Path(max_length=128)],
    db_session: SessionDep,
    settings: SettingsDep,
    _: ReadAccess,
) -> dict[str, Any]:
    """An owner's SLOs with their current value and state, firing alerts, silences, deliveries."""
    return read.owner_status(
        db_session=db_session, owner=owner, now=time.time(), public_url=settings.public_url
    )
