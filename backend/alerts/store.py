"""The SLOs and alert channels the database holds: synced from the SLO file, edited through the API."""

from __future__ import annotations

import time

from sqlalchemy import select
from sqlalchemy.orm import Session

from backend.alerts.delivery import Channel
from backend.alerts.models import AlertChannel, Slo
from backend.alerts.slos import ChannelSpec, SloFile, SloSpec, load_slo_file
from backend.config import Settings

# ---- SLOs and channels ----------------------------------------------------------------------------


def slo_file_for(settings: Settings) -> SloFile:
    """The SLO file in force: settings.slos_file, else the shipped defaults."""
    return load_slo_file(settings.slos_file)


def sync_from_file(*, db_session: Session, slo_file: SloFile, now: float | None = None) -> None:
    """Make the file's SLOs and channels the database's file-sourced rows (API rows stay)."""
    now = time.time() if now is None else now
    names = {s.name for s in slo_file.slos}
    existing = {s.name: s for s in db_session.scalars(select(Slo))}
    for spec in slo_file.slos:
        row = existing.get(spec.name)
        if row is not None and row.source == "api":
            continue  # an admin's edit through the API wins over the file
        _write_slo(db_session, row, spec, source="file", now=now)
    for name, row in existing.items():
        if row.source == "file" and name not in names:
            db_session.delete(row)
    wanted = {(owner, c.name): c for owner, specs in slo_file.channels.items() for c in specs}
    current = {(c.owner, c.name): c for c in db_session.scalars(select(AlertChannel))}
    for (owner, name), spec in wanted.items():
        row = current.get((owner, name))
        if row is not None and row.source == "api":
            continue
        _write_channel(db_session, row, owner, spec, source="file", now=now)
    for key, row in current.items():
        if row.source == "file" and key not in wanted:
            db_session.delete(row)
    db_session.flush()


def _write_slo(
    db_session: Session, row: Slo | None, spec: SloSpec, *, source: str, now: float
) -> Slo:
    if row is None:
        row = Slo(name=spec.name, created_at=now)
        db_session.add(row)
    row.owner, row.component, row.indicator = spec.owner, spec.component, spec.indicator
    row.objective, row.enabled, row.source = spec.objective, spec.enabled, source
    row.spec, row.updated_at = spec.to_doc(), now
    return row


def _write_channel(
    db_session: Session,
    row: AlertChannel | None,
    owner: str,
    spec: ChannelSpec,
    *,
    source: str,
    now: float,
) -> AlertChannel:
    if row is None:
        row = AlertChannel(owner=owner, name=spec.name, created_at=now)
        db_session.add(row)
    row.kind, row.target, row.options = spec.kind, spec.target, dict(spec.options)
    row.enabled, row.source = spec.enabled, source
    return row


def list_slos(*, db_session: Session, owner: str | None = None) -> list[SloSpec]:
    """Every SLO (optionally one owner's), as validated specs."""
    stmt = select(Slo).order_by(Slo.owner, Slo.name)
    if owner:
        stmt = stmt.where(Slo.owner == owner)
    return [SloSpec.model_validate(row.spec) for row in db_session.scalars(stmt)]


def get_slo(*, db_session: Session, name: str) -> SloSpec | None:
    """One SLO by name, or None."""
    row = db_session.get(Slo, name)
    return SloSpec.model_validate(row.spec) if row else None


def put_slo(*, db_session: Session, spec: SloSpec, now: float | None = None) -> SloSpec:
    """Create or replace an SLO through the admin API (it then overrides the file's)."""
    _write_slo(
        db_session, db_session.get(Slo, spec.name), spec, source="api", now=now or time.time()
    )
    db_session.flush()
    return spec


def delete_slo(*, db_session: Session, name: str) -> bool:
    """Remove an SLO; its firing alerts resolve on the next evaluation."""
    row = db_session.get(Slo, name)
    if row is None:
        return False
    db_session.delete(row)
    db_session.flush()
    return True


def put_channel(
    *, db_session: Session, owner: str, spec: ChannelSpec, now: float | None = None
) -> AlertChannel:
    """Create or replace one of an owner's channels through the admin API."""
    row = db_session.scalar(
        select(AlertChannel).where(AlertChannel.owner == owner, AlertChannel.name == spec.name)
    )
    row = _write_channel(db_session, row, owner, spec, source="api", now=now or time.time())
    db_session.flush()
    return row


def channels_for(*, db_session: Session, owner: str) -> list[Channel]:
    """The enabled channels of one owner."""
    rows = db_session.scalars(
        select(AlertChannel)
        .where(AlertChannel.owner == owner, AlertChannel.enabled.is_(True))
        .order_by(AlertChannel.name)
    )
    return [
        Channel(
            kind=r.kind, target=r.target, owner=r.owner, name=r.name, options=dict(r.options or {})
        )  # type: ignore[arg-type]
        for r in rows
    ]


def list_channels(*, db_session: Session, owner: str | None = None) -> list[AlertChannel]:
    """Channel rows (optionally of one owner)."""
    stmt = select(AlertChannel).order_by(AlertChannel.owner, AlertChannel.name)
    if owner:
        stmt = stmt.where(AlertChannel.owner == owner)
    return list(db_session.scalars(stmt))
