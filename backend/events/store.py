"""Raw-event storage: the writes ingest makes and the reads the engine makes, in one place.

Events arrive here already validated and normalized (backend.ett.timeline's form, times as epoch
seconds); deciding what to accept, dedupe and reject is ingest's work, not this module's.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import orjson
from sqlalchemy import (
    Text,
    cast,
    delete,
    func,
    select,
    text,
    tuple_,
    update,
)
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from backend.db import insert_for
from backend.events.models import HeldEvent, RawEvent, RejectedEvent
from backend.events.retention import month_of
from backend.jobs.models import Job

# Keys per SELECT of stored copies (an IN over tuples; SQLite's parameter limit allows this).
_KEY_CHUNK = 500


def event_time(event: Mapping[str, Any]) -> float:
    """The instant an event is about (its ts, else its start): the stored `ts` column."""
    return event["ts"] if "ts" in event else event["start"]


_PG_INSERT_RAW = (
    "INSERT INTO {table} (event_id, job_id, type, attempt, ts, received_at, payload, "
    "job_month) "
    "SELECT e->>'event_id', e->>'job_id', e->>'type', (e->>'attempt')::int, "
    "COALESCE((e->>'ts')::float8, (e->>'start')::float8), %(received_at)s, e, {month} "
    "FROM jsonb_array_elements(CAST(%(events)s AS jsonb)) AS e "
)
# A batch of one month (the common case) gives its month as one value; only a batch of several
# looks each job's month up in a JSON map, which cost about an eighth of the insert
# (docs/PERFORMANCE.md).
_PG_ONE_MONTH = "%(month)s"
_PG_MONTH_OF_JOB = "(CAST(%(months)s AS jsonb)->>(e->>'job_id'))::int"
_PG_RETURNING = "RETURNING job_id, event_id"
_PG_SKIP_KNOWN = "ON CONFLICT (job_id, event_id, job_month) DO NOTHING "
# Postgres SQLSTATE 23505 (unique_violation).
_UNIQUE_VIOLATION = "23505"


def _pg_target(
    db_session: Session, months: dict[str, int], known: Mapping[int, bool] | None = None
) -> str:
    """Where a Postgres batch's rows go: its month's partition when the whole batch is of one
    month that has one (routing each row through the parent costs about a quarter of ingest),
    else the partitioned parent, which routes each row (the DEFAULT partition included).

    `known`: months whose partition was found present or absent by the read of the batch's
    jobs (job_rows); any other month is looked up.
    """
    distinct = set(months.values())
    if len(distinct) == 1:
        month = distinct.pop()
        name = f"raw_events_p{month}"
        exists = (known or {}).get(month)
        if exists is None:
            found = db_session.execute(text("SELECT to_regclass(:n)"), {"n": name}).scalar()
            exists = found is not None
        if exists:
            return name
    return "raw_events"


class JobRow(NamedTuple):
    """What ingest reads of a stored job: its model, first-seen time and prune mark."""

    model: str | None
    created_at: float
    raw_pruned_at: float | None


@dataclass
class StoredJobs:
    """A batch's stored jobs by id, and which months' raw_events partitions exist (Postgres)."""

    rows: dict[str, JobRow] = field(default_factory=dict)
    partitions: dict[int, bool] = field(default_factory=dict)


# One round trip for what a batch reads before it writes: its jobs' rows and whether the
# partition of the month a new job would go to exists (the one-row side keeps that answer when
# no job is stored yet).
# The ids go as one JSON document: psycopg adapts a list of 200 strings in Python, which made
# the read cost twice the client CPU. They are joined to jobs: one probe of its primary key per
# id on a large table, a hash join on a small one. `= ANY(ARRAY(...))` tested every row of a
# small table against every id (1.2 ms against 0.27 for 200 ids in 400 jobs; 0.96 against
# 0.80 ms in 100,000).
_PG_JOB_ROWS = (
    "SELECT p.part, {lock}j.job_id, j.model, j.created_at, j.raw_pruned_at "
    "FROM (SELECT to_regclass(CAST(%(part)s AS text)) IS NOT NULL AS part{set_lock}) AS p "
    "LEFT JOIN (jsonb_array_elements_text(CAST(%(keys)s AS jsonb)) AS k(id) "
    "JOIN jobs AS j ON j.job_id = k.id) ON true"
)
# The same read bounding the transaction's lock waits from here on (SET LOCAL's set_config),
# one round trip fewer than a SET of its own. The read itself takes no row lock.
_PG_JOB_ROWS_BOUNDED = _PG_JOB_ROWS.format(
    lock="p.lock, ", set_lock=", set_config('lock_timeout', %(lock)s, true) AS lock"
)
_PG_JOB_ROWS = _PG_JOB_ROWS.format(lock="NULL, ", set_lock="")


def job_rows(
    *,
    db_session: Session,
    job_ids: Iterable[str],
    now: float,
    lock_timeout_s: float | None = None,
) -> StoredJobs:
    """The stored row of each of these jobs that has one; on Postgres in one statement, which
    also says whether the partition of now's month exists.

    `lock_timeout_s`: on Postgres the same statement bounds every later lock wait of the
    transaction, as backend.db.bound_lock_waits does (None or 0: no bound set).
    """
    found = StoredJobs()
    ordered = sorted(set(job_ids))
    if db_session.get_bind().dialect.name == "postgresql":
        month = month_of(now)
        params = {"part": f"raw_events_p{month}", "keys": orjson.dumps(ordered).decode()}
        sql = _PG_JOB_ROWS
        if lock_timeout_s and lock_timeout_s > 0:
            sql = _PG_JOB_ROWS_BOUNDED
            params["lock"] = f"{max(1, round(lock_timeout_s * 1000))}ms"
        rows = db_session.connection().exec_driver_sql(sql, params).fetchall()
        for part, _lock, job_id, model, created_at, pruned_at in rows:
            found.partitions[month] = part
            if job_id is not None:
                found.rows[job_id] = JobRow(model, created_at, pruned_at)
        return found
    jt = Job.__table__
    for k in range(0, len(ordered), _KEY_CHUNK):
        rows = db_session.execute(
            select(jt.c.job_id, jt.c.model, jt.c.created_at, jt.c.raw_pruned_at).where(
                jt.c.job_id.in_(ordered[k : k + _KEY_CHUNK])
            )
        )
        for job_id, model, created_at, pruned_at in rows:
            found.rows[job_id] = JobRow(model, created_at, pruned_at)
    return found


def job_months(
    *,
    db_session: Session,
    job_ids: set[str],
    now: float,
    jobs: StoredJobs | None = None,
) -> dict[str, int]:
    """Each job's partition month: the month of its jobs.created_at, else of now (a new job).

    `jobs`: the jobs' stored rows when the caller has read them already (job_rows).
    """
    rows = (jobs or job_rows(db_session=db_session, job_ids=job_ids, now=now)).rows
    months = dict.fromkeys(job_ids, month_of(now))
    for job_id in job_ids:
        row = rows.get(job_id)
        if row is not None:
            months[job_id] = month_of(row.created_at)
    return months


def insert_new(
    *,
    db_session: Session,
    events: list[dict[str, Any]],
    now: float,
    jobs: StoredJobs | None = None,
) -> set[tuple[str, str]]:
    """Insert new events, skipping known (job_id, event_id) keys; returns the keys inserted.

    `jobs`: the stored rows of the events' jobs when the caller has read them (job_rows).
    """
    # One key order for every batch, so that concurrent overlapping batches take the unique
    # index's locks in the same order (no deadlock cycle on Postgres).
    events = sorted(events, key=lambda ev: (ev["job_id"], ev["event_id"]))
    if jobs is None:
        jobs = job_rows(db_session=db_session, job_ids={ev["job_id"] for ev in events}, now=now)
    months = job_months(
        db_session=db_session, job_ids={ev["job_id"] for ev in events}, now=now, jobs=jobs
    )
    if db_session.get_bind().dialect.name == "postgresql":
        # One statement, one JSON parameter: a multi-row VALUES of 7,000 parameters costs
        # more to build and parse than the insert itself.
        params: dict[str, Any] = {"received_at": now, "events": orjson.dumps(events).decode()}
        distinct = set(months.values())
        if len(distinct) == 1:
            params["month"] = distinct.pop()
            month_sql = _PG_ONE_MONTH
        else:
            params["months"] = orjson.dumps(months).decode()
            month_sql = _PG_MONTH_OF_JOB
        table = _pg_target(db_session, months, jobs.partitions)
        sql = _PG_INSERT_RAW.format(table=table, month=month_sql)
        if _pg_insert_all(db_session, sql, params):
            return {(ev["job_id"], ev["event_id"]) for ev in events}
        # Straight to the driver (no statement to compile) and the keys fetched in one call:
        # the returned keys of 1,000 rows cost several times more as the ORM's result rows.
        conn = db_session.connection()
        rows = conn.exec_driver_sql(sql + _PG_SKIP_KNOWN + _PG_RETURNING, params).fetchall()
        return {(j, e) for j, e in rows}
    rows = [
        {
            "event_id": ev["event_id"],
            "job_id": ev["job_id"],
            "type": ev["type"],
            "attempt": ev["attempt"],
            "ts": event_time(ev),
            "received_at": now,
            "payload": ev,
            "job_month": months[ev["job_id"]],
        }
        for ev in events
    ]
    stmt = (
        insert_for(db_session, RawEvent.__table__)
        .on_conflict_do_nothing(index_elements=["job_id", "event_id", "job_month"])
        .returning(RawEvent.__table__.c.job_id, RawEvent.__table__.c.event_id)
    )
    return {(j, e) for j, e in db_session.execute(stmt, rows)}


def _pg_insert_all(db_session: Session, sql: str, params: dict[str, Any]) -> bool:
    """Insert every row of the batch as a plain INSERT, or nothing: whether it did.

    `ON CONFLICT DO NOTHING` makes Postgres insert each row speculatively (a probe of the
    unique index, then a confirmation record per row): 20 us of Postgres CPU per event against
    13 for a plain insert (docs/PERFORMANCE.md). When no key is stored, the common case, the
    plain insert does the same and needs no RETURNING (every row went in). It runs inside a
    savepoint: a stored key fails it on the unique index (23505) and the savepoint takes it
    all back, for the caller to insert again skipping the known keys. A concurrent batch
    inserting one of the keys makes the plain insert wait for it exactly as `ON CONFLICT`
    would, then fail over the same way if that batch committed.
    """
    conn = db_session.connection()
    # Not released: the transaction's end releases it, one round trip fewer.
    conn.exec_driver_sql("SAVEPOINT ett_insert_new")
    try:
        conn.exec_driver_sql(sql, params)
    except IntegrityError as err:
        if getattr(err.orig, "sqlstate", None) != _UNIQUE_VIOLATION:
            raise
        conn.exec_driver_sql("ROLLBACK TO SAVEPOINT ett_insert_new")
        return False
    return True


def stored_copies(
    *, db_session: Session, keys: Iterable[tuple[str, str]]
) -> dict[tuple[str, str], tuple[int, str]]:
    """The stored copy of each (job_id, event_id): its row id and payload as JSON text, locked.

    The rows are locked until the transaction ends (Postgres), so two batches settling one
    conflict take turns.
    """
    rt = RawEvent.__table__
    stored: dict[tuple[str, str], tuple[int, str]] = {}
    ordered = sorted(set(keys))
    for k in range(0, len(ordered), _KEY_CHUNK):
        rows = db_session.execute(
            select(rt.c.id, rt.c.job_id, rt.c.event_id, cast(rt.c.payload, Text))
            .where(tuple_(rt.c.job_id, rt.c.event_id).in_(ordered[k : k + _KEY_CHUNK]))
            .order_by(rt.c.job_id, rt.c.event_id)
            .with_for_update()
        )
        for row_id, job_id, event_id, payload in rows:
            stored[(job_id, event_id)] = (row_id, payload)
    return stored


def replace_copy(*, db_session: Session, row_id: int, event: dict[str, Any], now: float) -> None:
    """Overwrite one stored event with another copy of the same (job_id, event_id)."""
    rt = RawEvent.__table__
    db_session.execute(
        update(rt)
        .where(rt.c.id == row_id)
        .values(
            type=event["type"],
            attempt=event["attempt"],
            ts=event_time(event),
            received_at=now,
            payload=event,
        )
    )


def add_rejected(*, db_session: Session, rows: list[dict[str, Any]]) -> None:
    """Keep refused events with their reason (rejected_events rows, as dicts)."""
    if rows:
        db_session.execute(insert_for(db_session, RejectedEvent.__table__), rows)


def list_rejected(
    *, db_session: Session, job_id: str | None = None, limit: int = 100, offset: int = 0
) -> list[RejectedEvent]:
    """Rejected events, newest first, for an operator."""
    stmt = select(RejectedEvent).order_by(RejectedEvent.id.desc()).limit(limit).offset(offset)
    if job_id is not None:
        stmt = stmt.where(RejectedEvent.job_id == job_id)
    return list(db_session.scalars(stmt))


def held_keys(
    *, db_session: Session, job_ids: Iterable[str]
) -> tuple[dict[str, int], set[tuple[str, str, str]]]:
    """Held events of these jobs: how many each holds, and the (job_id, event_id, payload JSON)
    of each, to tell a resent copy from a new event."""
    counts: dict[str, int] = {}
    keys: set[tuple[str, str, str]] = set()
    ordered = sorted(set(job_ids))
    ht = HeldEvent.__table__
    for k in range(0, len(ordered), _KEY_CHUNK):
        for job_id, event_id, payload in db_session.execute(
            select(ht.c.job_id, ht.c.event_id, cast(ht.c.payload, Text)).where(
                ht.c.job_id.in_(ordered[k : k + _KEY_CHUNK])
            )
        ):
            counts[job_id] = counts.get(job_id, 0) + 1
            keys.add((job_id, event_id, _canonical(orjson.loads(payload))))
    return counts, keys


def _canonical(event: Any) -> str:
    return orjson.dumps(event, option=orjson.OPT_SORT_KEYS).decode()


def canonical_payload(event: Mapping[str, Any]) -> str:
    """The form held_keys compares payloads in (sorted keys, compact)."""
    return _canonical(dict(event))


def hold(*, db_session: Session, rows: list[dict[str, Any]]) -> None:
    """Keep events aside until their job's job_submitted (held_events rows, as dicts)."""
    if rows:
        db_session.execute(insert_for(db_session, HeldEvent.__table__), rows)


def take_held(
    *, db_session: Session, job_ids: Iterable[str]
) -> list[tuple[str | None, list[str], dict[str, Any]]]:
    """Remove and return the held events of these jobs: (token name, token models, event).

    The rows are locked first (Postgres), so two batches releasing one job take turns and each
    held event is released once.
    """
    ht = HeldEvent.__table__
    out: list[tuple[str | None, list[str], dict[str, Any]]] = []
    ordered = sorted(set(job_ids))
    for k in range(0, len(ordered), _KEY_CHUNK):
        part = ordered[k : k + _KEY_CHUNK]
        rows = list(
            db_session.execute(
                select(ht.c.id, ht.c.token_name, ht.c.token_models, cast(ht.c.payload, Text))
                .where(ht.c.job_id.in_(part))
                .order_by(ht.c.id)
                .with_for_update()
            )
        )
        if not rows:
            continue
        db_session.execute(delete(ht).where(ht.c.id.in_([r[0] for r in rows])))
        out.extend((name, list(models or []), orjson.loads(p)) for _i, name, models, p in rows)
    return out


def jobs_with_held(*, db_session: Session, job_ids: Iterable[str]) -> set[str]:
    """Which of these jobs have held events."""
    ordered = sorted(set(job_ids))
    found: set[str] = set()
    for k in range(0, len(ordered), _KEY_CHUNK):
        found.update(
            db_session.scalars(
                select(HeldEvent.job_id)
                .where(HeldEvent.job_id.in_(ordered[k : k + _KEY_CHUNK]))
                .distinct()
            )
        )
    return found


def list_held(
    *, db_session: Session, job_id: str | None = None, limit: int = 100, offset: int = 0
) -> tuple[int, list[HeldEvent]]:
    """Held events, newest first, and how many there are, for an operator."""
    stmt = select(HeldEvent).order_by(HeldEvent.id.desc()).limit(limit).offset(offset)
    total = select(func.count()).select_from(HeldEvent)
    if job_id is not None:
        stmt = stmt.where(HeldEvent.job_id == job_id)
        total = total.where(HeldEvent.job_id == job_id)
    return int(db_session.scalar(total) or 0), list(db_session.scalars(stmt))


def load_events(*, db_session: Session, job_id: str) -> list[dict[str, Any]]:
    """One job's normalized raw events, in storage order."""
    # Fetched as text and parsed with orjson: several times faster than the drivers' json.loads.
    stmt = (
        select(cast(RawEvent.payload, Text)).where(RawEvent.job_id == job_id).order_by(RawEvent.id)
    )
    loads = orjson.loads
    return [loads(text) for text in db_session.scalars(stmt)]


def load_events_after(
    *, db_session: Session, job_id: str, after_row: int | None = None
) -> tuple[list[dict[str, Any]], int | None, int]:
    """The job's events stored after row `after_row` (all when None), the last row id read and
    how many rows were read, from one statement (one snapshot)."""
    stmt = select(RawEvent.id, cast(RawEvent.payload, Text)).where(RawEvent.job_id == job_id)
    if after_row is not None:
        stmt = stmt.where(RawEvent.id > after_row)
    loads = orjson.loads
    events: list[dict[str, Any]] = []
    last: int | None = after_row
    for row_id, payload in db_session.execute(stmt.order_by(RawEvent.id)):
        events.append(loads(payload))
        last = row_id
    return events, last, len(events)


def count_rows_up_to(
    *, db_session: Session, job_id: str, row: int, after_row: int | None = None
) -> int:
    """How many of the job's raw rows have an id at most `row` (and over `after_row`, when
    given): a late commit below `row` shows as one more."""
    stmt = (
        select(func.count())
        .select_from(RawEvent)
        .where(RawEvent.job_id == job_id, RawEvent.id <= row)
    )
    if after_row is not None:
        stmt = stmt.where(RawEvent.id > after_row)
    return int(db_session.scalar(stmt) or 0)


def job_ids_with_events(*, db_session: Session) -> set[str]:
    """Every job id that has at least one stored event."""
    return set(db_session.scalars(select(RawEvent.job_id).distinct()))
