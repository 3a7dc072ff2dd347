"""Raw-event retention: monthly partitions on Postgres, and pruning the raw events of old jobs.

A row's partition key is `job_month`, the UTC month (YYYYMM) in which its job was first seen:
one value per job, so the key (job_id, event_id, job_month) is as unique as (job_id, event_id).
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime

from sqlalchemy import Connection, func, select, text, update
from sqlalchemy.exc import OperationalError
from sqlalchemy.orm import Session

from backend.db import is_retryable
from backend.timefmt import parse_duration

LOCK_NOT_AVAILABLE = "55P03"  # Postgres: lock_timeout ran out
PARTITION_RE = re.compile(r"^raw_events_p(\d{6})$")


def include_name(name: str | None, type_: str, parent_names: object) -> bool:
    """Alembic filter: raw_events' partitions are not tables of the ORM (autogenerate skips them)."""
    if type_ == "table" and name is not None:
        return not (PARTITION_RE.match(name) or name == "raw_events_default")
    return True


def month_of(epoch_s: float) -> int:
    """The UTC month of an epoch time, as YYYYMM."""
    d = datetime.fromtimestamp(epoch_s, UTC)
    return d.year * 100 + d.month


def next_month(month: int) -> int:
    """The month after a YYYYMM month."""
    return month + 1 if month % 100 < 12 else (month // 100 + 1) * 100 + 1


def month_start(month: int) -> float:
    """The epoch second at which a YYYYMM month begins (UTC)."""
    return datetime(month // 100, month % 100, 1, tzinfo=UTC).timestamp()


def parse_age(value: str) -> float:
    """Seconds in an age such as `400d` or `12w` (days or weeks only: `3m` is not months)."""
    try:
        seconds = parse_duration(value, units=("d", "w"))
    except ValueError:
        seconds = 0.0
    if seconds <= 0:
        raise ValueError(
            f"not an age: {value!r} (use a positive number of days or weeks: 400d, 12w)"
        )
    return seconds


def is_partitioned(conn: Connection) -> bool:
    """Whether raw_events is a partitioned table (Postgres after migration 0011)."""
    if conn.dialect.name != "postgresql":
        return False
    return bool(
        conn.scalar(
            text(
                "SELECT 1 FROM pg_partitioned_table p JOIN pg_class c ON c.oid = p.partrelid "
                "WHERE c.relname = 'raw_events' AND c.relnamespace = current_schema()::regnamespace"
            )
        )
    )


def partitions(conn: Connection) -> list[int]:
    """The monthly partitions of raw_events, as sorted YYYYMM months (DEFAULT not included)."""
    rows = conn.scalars(
        text(
            "SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid "
            "WHERE i.inhparent = 'raw_events'::regclass"
        )
    )
    return sorted(int(m.group(1)) for name in rows if (m := PARTITION_RE.match(name)))


def create_partition(conn: Connection, month: int) -> None:
    """Create the partition of one month (rows of it already in DEFAULT move into it)."""
    name = f"raw_events_p{month}"
    upper = next_month(month)
    moved = conn.scalar(
        text("SELECT count(*) FROM raw_events_default WHERE job_month >= :lo AND job_month < :hi"),
        {"lo": month, "hi": upper},
    )
    if moved:
        # A partition cannot be attached while DEFAULT holds rows of its range: take them out.
        conn.execute(
            text(
                f"CREATE TEMP TABLE _moving_{month} ON COMMIT DROP AS "
                f"SELECT * FROM raw_events_default WHERE job_month >= {month} "
                f"AND job_month < {upper}"
            )
        )
        conn.execute(
            text("DELETE FROM raw_events_default WHERE job_month >= :lo AND job_month < :hi"),
            {"lo": month, "hi": upper},
        )
    conn.execute(
        text(f"CREATE TABLE {name} PARTITION OF raw_events FOR VALUES FROM ({month}) TO ({upper})")
    )
    if moved:
        conn.execute(text(f"INSERT INTO raw_events SELECT * FROM _moving_{month}"))


def ensure_partitions(conn: Connection, *, now: float | None = None, ahead: int = 2) -> list[int]:
    """Create the partitions of this month and `ahead` months after it that are missing."""
    if not is_partitioned(conn):
        return []
    have = set(partitions(conn))
    month, made = month_of(time.time() if now is None else now), []
    for _ in range(ahead + 1):
        if month not in have:
            create_partition(conn, month)
            made.append(month)
        month = next_month(month)
    return made


@dataclass
class PruneReport:
    """What a prune did (or would do, on a dry run)."""

    cutoff: float
    dry_run: bool
    dropped: list[int] = field(default_factory=list)  # partitions (YYYYMM)
    kept: dict[int, list[str]] = field(default_factory=dict)  # partition -> straggler job ids
    jobs_pruned: list[str] = field(default_factory=list)
    rows_deleted: int = 0
    held_deleted: int = 0  # held events (for a job never submitted) received before the cutoff
    busy: list[int] = field(default_factory=list)  # partitions whose detach timed out: next time


# A job's raw events may go when it ended and its last event (by its own time; a job stored
# before jobs.last_event_at existed falls back to its end) are both before the cutoff, its
# final result is stored (not provisional, not abandoned: an abandoned job may still resume)
# and no recompute waits for it. A job pruned already qualifies (a prune stopped half-way).
_KEEPABLE = """
    SELECT j.job_id FROM jobs j JOIN job_results r ON r.job_id = j.job_id
    WHERE j.raw_pruned_at IS NOT NULL OR (
      j.ended_at IS NOT NULL AND j.ended_at < :cutoff
      AND COALESCE(j.last_event_at, j.ended_at) < :cutoff AND NOT j.dirty
      AND NOT r.provisional AND r.status <> 'abandoned')
"""


def _stragglers(db_session: Session, source: str, cutoff: float) -> tuple[list[str], list[str]]:
    """Jobs with rows in `source`: (prunable, stragglers that must keep their raw events)."""
    ids = set(db_session.scalars(text(f"SELECT DISTINCT job_id FROM {source}")))
    ok = set(db_session.scalars(text(_KEEPABLE), {"cutoff": cutoff})) & ids
    return sorted(ok), sorted(ids - ok)


def _mark_pruned(db_session: Session, job_ids: list[str], now: float) -> None:
    from backend.jobs.models import Job

    for k in range(0, len(job_ids), 500):
        db_session.execute(
            update(Job)
            .where(Job.job_id.in_(job_ids[k : k + 500]), Job.raw_pruned_at.is_(None))
            .values(raw_pruned_at=now)
        )


def _prune_held(db_session: Session, cutoff: float, dry_run: bool) -> int:
    """Delete (or count) the held events received before the cutoff: their job never came."""
    from backend.events.models import HeldEvent

    where = HeldEvent.received_at < cutoff
    if dry_run:
        return db_session.scalar(select(func.count()).select_from(HeldEvent).where(where)) or 0
    return db_session.execute(HeldEvent.__table__.delete().where(where)).rowcount or 0


def _detach_and_drop(db_session: Session, month: int, now: float, lock_timeout_ms: int) -> bool:
    """Detach one partition in a short transaction of its own, then drop it; False when busy.

    The caller has marked the partition's jobs pruned in this transaction. `DETACH ...
    CONCURRENTLY` is refused while raw_events has a DEFAULT partition, so the plain detach
    takes raw_events' lock for a moment: a bounded wait (lock_timeout) behind in-flight ingest,
    then the commit at once. Once detached nothing can write into it: if a job marked now was
    dirtied by an event that came meanwhile, everything is rolled back and the month kept.
    The detached table is dropped without touching raw_events.
    """
    name = f"raw_events_p{month}"
    db_session.execute(text(f"SET LOCAL lock_timeout = '{int(lock_timeout_ms)}ms'"))
    try:
        db_session.execute(text(f"ALTER TABLE raw_events DETACH PARTITION {name}"))
    except OperationalError as err:
        if not is_retryable(err) and getattr(err.orig, "sqlstate", None) != LOCK_NOT_AVAILABLE:
            raise
        db_session.rollback()
        return False
    dirtied = db_session.scalar(
        text("SELECT count(*) FROM jobs WHERE dirty AND raw_pruned_at = :now"), {"now": now}
    )
    if dirtied:
        db_session.rollback()
        return False
    db_session.commit()
    db_session.execute(text(f"DROP TABLE {name}"))
    db_session.commit()
    return True


def prune_raw(
    *,
    db_session: Session,
    older_than_s: float,
    now: float | None = None,
    dry_run: bool = False,
    lock_timeout_ms: int = 1000,
) -> PruneReport:
    """Drop (Postgres) or delete (SQLite) raw events of finished, stored jobs older than the age.

    A job qualifies when it ended and sent its last event before the cutoff, has a final stored
    result (not open, not abandoned) and is not dirty. On a partitioned table a month's
    partition goes as a whole once the month ended before the cutoff and every job in it
    qualifies; a partition with stragglers is kept and reported. Pruned jobs are marked
    (jobs.raw_pruned_at) so that recompute keeps their stored results, and ingest refuses
    their later events. Held events received before the cutoff are deleted. On Postgres each
    partition is marked, detached and committed in its own short transaction (ingest waits at
    most `lock_timeout_ms`; a partition that could not be detached is in `busy`); elsewhere the
    caller commits.
    """
    from backend.events.models import RawEvent

    now = time.time() if now is None else now
    report = PruneReport(cutoff=now - older_than_s, dry_run=dry_run)
    report.held_deleted = _prune_held(db_session, report.cutoff, dry_run)
    conn = db_session.connection()
    if is_partitioned(conn):
        if not dry_run:
            db_session.commit()
        for month in partitions(db_session.connection()):
            if month_start(next_month(month)) > report.cutoff:
                continue
            ok, late = _stragglers(db_session, f"raw_events_p{month}", report.cutoff)
            if late:
                report.kept[month] = late
                continue
            if not dry_run:
                _mark_pruned(db_session, ok, now)
                if not _detach_and_drop(db_session, month, now, lock_timeout_ms):
                    report.busy.append(month)
                    continue
            report.dropped.append(month)
            report.jobs_pruned.extend(ok)
        return report
    ok, _ = _stragglers(db_session, "raw_events", report.cutoff)
    report.jobs_pruned = ok
    for k in range(0, len(ok), 500):
        chunk = ok[k : k + 500]
        if dry_run:
            report.rows_deleted += len(
                db_session.scalars(select(RawEvent.id).where(RawEvent.job_id.in_(chunk))).all()
            )
        else:
            report.rows_deleted += db_session.execute(
                RawEvent.__table__.delete().where(RawEvent.job_id.in_(chunk))
            ).rowcount
    if not dry_run:
        _mark_pruned(db_session, ok, now)
    return report
