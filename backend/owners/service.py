"""The current owner mapping: the newest API version, else ETT_OWNERS_FILE, else the defaults."""

from __future__ import annotations

import time
from typing import Any

from sqlalchemy import delete, select, update
from sqlalchemy.orm import Session

from backend.config import Settings
from backend.ett.catalogue import resolve_phase
from backend.ett.models import JobInterval
from backend.jobs.models import Job
from backend.owners.mapping import (
    DEFAULT_FILE,
    OwnerMapping,
    Resolver,
    as_document,
    load_file,
    parse_document,
)
from backend.owners.models import OwnerMappingVersion


def _latest(db_session: Session) -> OwnerMappingVersion | None:
    stmt = select(OwnerMappingVersion).order_by(OwnerMappingVersion.id.desc()).limit(1)
    return db_session.execute(stmt).scalar_one_or_none()


def file_mapping(*, settings: Settings | None) -> tuple[OwnerMapping, str]:
    """The mapping from ETT_OWNERS_FILE (source 'file') or the shipped defaults ('default')."""
    if settings is not None and settings.owners_file is not None:
        return load_file(settings.owners_file), "file"
    return load_file(DEFAULT_FILE), "default"


def current_mapping(*, db_session: Session, settings: Settings | None) -> OwnerMapping:
    """The mapping in force (an API version wins over the file)."""
    row = _latest(db_session)
    if row is not None:
        return parse_document(row.document)
    return file_mapping(settings=settings)[0]


def resolver(*, db_session: Session, settings: Settings | None) -> Resolver:
    """A Resolver over the mapping in force."""
    return Resolver(current_mapping(db_session=db_session, settings=settings))


def describe(*, db_session: Session, settings: Settings | None) -> dict[str, Any]:
    """The mapping in force as GET answers it: source, version, document and flattened rows."""
    row = _latest(db_session)
    if row is not None:
        mapping = parse_document(row.document)
        meta: dict[str, Any] = {
            "source": "api",
            "version": row.id,
            "updated_at": row.created_at,
            "updated_by": row.created_by,
        }
    else:
        mapping, source = file_mapping(settings=settings)
        path = settings.owners_file if settings and settings.owners_file else DEFAULT_FILE
        meta = {"source": source, "version": None, "updated_at": None, "file": str(path)}
    return {**meta, **as_document(mapping), "rows": Resolver(mapping).rows()}


def put_mapping(
    *, db_session: Session, document: dict[str, Any], actor: str | None
) -> OwnerMapping:
    """Store a new version (validated); every rollup query uses it from now on."""
    mapping = parse_document(document)
    db_session.add(
        OwnerMappingVersion(document=as_document(mapping), created_at=time.time(), created_by=actor)
    )
    db_session.flush()
    return mapping


def reset_mapping(*, db_session: Session) -> int:
    """Forget every API version, so the file (or the defaults) is in force again."""
    result = db_session.execute(delete(OwnerMappingVersion))
    return int(result.rowcount or 0)


def custom_phase_components(*, db_session: Session, settings: Settings | None) -> dict[str, str]:
    """`custom.*` phase -> component for the ETT engine's `compute_job(custom_phases=...)`."""
    return resolver(db_session=db_session, settings=settings).custom_phase_components()


# Training and waste pieces come from progress and checkpoint events, never from the mapping.
_LAYERED = ("effective_training", "wasted_training")


def stale_job_ids(*, db_session: Session, settings: Settings | None) -> list[str]:
    """Jobs whose stored intervals put a custom phase under another component than the mapping.

    Only phases the catalogue does not know are checked (the mapping decides their component);
    a catalogue phase's component never depends on the owners mapping.
    """
    custom = custom_phase_components(db_session=db_session, settings=settings)
    pairs = db_session.execute(
        select(JobInterval.phase, JobInterval.component)
        .where(JobInterval.phase.is_not(None))
        .distinct()
    ).all()
    moved: set[str] = set()
    for phase, component in pairs:
        if resolve_phase(phase).known or component in _LAYERED:
            continue
        if resolve_phase(phase, custom).component != component:
            moved.add(phase)
    if not moved:
        return []
    stmt = select(JobInterval.job_id).where(JobInterval.phase.in_(sorted(moved))).distinct()
    return sorted(db_session.scalars(stmt))


def mark_for_reaccount(*, db_session: Session, settings: Settings | None) -> int:
    """Mark dirty (for recompute) every job the mapping in force would account differently."""
    job_ids = stale_job_ids(db_session=db_session, settings=settings)
    now = time.time()
    for i in range(0, len(job_ids), 500):
        db_session.execute(
            update(Job)
            .where(Job.job_id.in_(job_ids[i : i + 500]))
            .values(dirty=True, updated_at=now)
        )
    return len(job_ids)
