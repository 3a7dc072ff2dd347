"""Store a validated batch: dedupe, keep rejects with their reason, mark touched jobs for recompute."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Any

import orjson
from sqlalchemy import Text, case, cast, func, select, text, tuple_, update
from sqlalchemy.orm import Session

from backend.auth.models import ApiToken
from backend.auth.service import allows_model
from backend.db import insert_for
from backend.ett.timeline import canonical_json
from backend.jobs.models import Job, Model
from backend.retention import month_of
from ingest.models import RawEvent, RejectedEvent
from ingest.schema import EventError, event_time, validate_event

MAX_KEPT_RAW_CHARS = 65_536


class ModelNotAllowed(Exception):
    """The token may not write a job of this batch (answered 403)."""


@dataclass
class IngestResult:
    """What one batch did."""

    accepted: int = 0
    duplicates: int = 0
    rejected: list[dict[str, Any]] = field(default_factory=list)
    job_ids: list[str] = field(default_factory=list)


def _raw_text(raw: Any) -> str:
    try:
        text = json.dumps(raw, default=str, allow_nan=True)
    except (TypeError, ValueError, RecursionError):
        text = repr(raw)
    return text[:MAX_KEPT_RAW_CHARS]


def storable(text: str) -> str:
    """Text any database can hold: NUL and lone surrogates written as backslash escapes."""
    return text.replace("\x00", "\\u0000").encode("utf-8", "backslashreplace").decode("utf-8")


def _str_field(raw: Any, name: str, limit: int) -> str | None:
    value = raw.get(name) if isinstance(raw, dict) else None
    return storable(value)[:limit] if isinstance(value, str) else None


def _job_models(db_session: Session, job_ids: set[str]) -> dict[str, str | None]:
    jt = Job.__table__
    rows = db_session.execute(select(jt.c.job_id, jt.c.model).where(jt.c.job_id.in_(job_ids)))
    return {job_id: model for job_id, model in rows}


def _resolve_models(
    db_session: Session,
    token: ApiToken | None,
    valid: list[tuple[int, dict[str, Any]]],
    reject: Any,
) -> tuple[list[tuple[int, dict[str, Any]]], dict[str, str | None]]:
    """Each job's model (stored, else its first job_submitted in the batch), fixed once known.

    A job_submitted naming another model is rejected (`model_conflict`); the token's model scope
    is checked against every job_submitted of the batch and against the stored job.
    """
    known = _job_models(db_session, {ev["job_id"] for _, ev in valid})
    models: dict[str, str | None] = dict(known)
    submitted_models: dict[str, set[str]] = {}
    for _index, ev in valid:
        if ev["type"] == "job_submitted":
            submitted_models.setdefault(ev["job_id"], set()).add(ev["model"])
    if token is not None and token.models:
        for job_id, named in sorted(submitted_models.items()):
            for model in sorted(named):
                if not allows_model(token, model):
                    raise ModelNotAllowed(
                        f"token {token.name!r} may write only jobs of {', '.join(token.models)}; "
                        f"a job_submitted of job {job_id!r} names model {model!r}"
                    )
    kept = []
    for index, ev in valid:
        job_id = ev["job_id"]
        if ev["type"] == "job_submitted":
            fixed = models.get(job_id)
            if fixed is not None and fixed != ev["model"]:
                reject(
                    index,
                    ev,
                    f"model_conflict: job {job_id!r} belongs to model {fixed!r}; "
                    f"this job_submitted names {ev['model']!r} (a job's model never changes)",
                )
                continue
            models[job_id] = ev["model"]
        else:
            models.setdefault(job_id, None)
        kept.append((index, ev))
    if token is not None and token.models:
        for job_id, model in models.items():
            if model is None and len(token.models) == 1:
                models[job_id] = model = token.models[0]
            if not allows_model(token, model):
                what = (
                    f"model {model!r}" if model else "no model yet (send its job_submitted first)"
                )
                raise ModelNotAllowed(
                    f"token {token.name!r} may write only jobs of {', '.join(token.models)}; "
                    f"job {job_id!r} has {what}"
                )
    return kept, models


def ingest_batch(
    *,
    db_session: Session,
    events: list[Any],
    token: ApiToken | None,
    now: float | None = None,
    time_window: tuple[float, float] | None = None,
) -> IngestResult:
    """Validate and store one batch in one transaction; commit is the caller's.

    `time_window` (epoch seconds) bounds the times an event may carry (default: the schema's).
    """
    now = time.time() if now is None else now
    result = IngestResult()
    rejected_rows: list[dict[str, Any]] = []
    token_name = token.name if token is not None else None

    def reject(index: int, raw: Any, error: str) -> None:
        event_id = _str_field(raw, "event_id", 64)
        result.rejected.append({"index": index, "event_id": event_id, "error": error})
        rejected_rows.append(
            {
                "received_at": now,
                "job_id": _str_field(raw, "job_id", 128),
                "event_id": event_id,
                "batch_index": index,
                "error": storable(error),
                "raw": _raw_text(raw),
                "token_name": token_name,
            }
        )

    valid: list[tuple[int, dict[str, Any]]] = []
    seen: dict[tuple[str, str], int] = {}
    for index, raw in enumerate(events):
        try:
            ev = validate_event(raw, time_window=time_window)
        except EventError as err:
            reject(index, raw, str(err))
            continue
        key = (ev["job_id"], ev["event_id"])
        at = seen.get(key)
        if at is None:
            seen[key] = len(valid)
            valid.append((index, ev))
            continue
        first_index, first = valid[at]
        if first == ev:
            result.duplicates += 1
            continue
        # A conflicting copy inside the batch: the smaller canonical JSON stays a candidate.
        if canonical_json(ev) < canonical_json(first):
            valid[at] = (index, ev)
            reject(first_index, first, CONFLICT_ERROR)
        else:
            reject(index, ev, CONFLICT_ERROR)

    if valid:
        valid, models = _resolve_models(db_session, token, valid, reject)
    if valid:
        inserted = _insert_raw(db_session, [ev for _, ev in valid], now)
        new = [ev for _, ev in valid if (ev["job_id"], ev["event_id"]) in inserted]
        replaced = _settle_conflicts(
            db_session,
            [(i, ev) for i, ev in valid if (ev["job_id"], ev["event_id"]) not in inserted],
            now,
            result,
            reject,
            rejected_rows,
            token_name,
        )
        result.accepted = len(new) + len(replaced)
        result.job_ids = _mark_jobs(db_session, new + replaced, models, now)
    if rejected_rows:
        db_session.execute(insert_for(db_session, RejectedEvent.__table__), rejected_rows)
    result.rejected.sort(key=lambda r: r["index"])
    return result


CONFLICT_ERROR = (
    "conflicting_duplicate: this (job_id, event_id) was sent with other content; the copy "
    "with the smallest canonical JSON (sorted keys, no spaces) is the event"
)


def _settle_conflicts(
    db_session: Session,
    known: list[tuple[int, dict[str, Any]]],
    now: float,
    result: IngestResult,
    reject: Any,
    rejected_rows: list[dict[str, Any]],
    token_name: str | None,
) -> list[dict[str, Any]]:
    """Events whose key is stored already: duplicates, or conflicts settled by canonical JSON.

    Returns the events that replaced the stored copy (their job must be recomputed); the
    displaced copy is kept in rejected_events.
    """
    if not known:
        return []
    rt = RawEvent.__table__
    keys = {(ev["job_id"], ev["event_id"]) for _, ev in known}
    stored: dict[tuple[str, str], tuple[int, str]] = {}
    ordered = sorted(keys)
    for k in range(0, len(ordered), 500):
        rows = db_session.execute(
            select(rt.c.id, rt.c.job_id, rt.c.event_id, cast(rt.c.payload, Text))
            .where(tuple_(rt.c.job_id, rt.c.event_id).in_(ordered[k : k + 500]))
            .order_by(rt.c.job_id, rt.c.event_id)
            .with_for_update()  # two batches settling one conflict take turns (Postgres)
        )
        for row_id, job_id, event_id, payload in rows:
            stored[(job_id, event_id)] = (row_id, payload)
    replaced: list[dict[str, Any]] = []
    for index, ev in known:
        key = (ev["job_id"], ev["event_id"])
        found = stored.get(key)
        if found is None:  # inserted by a concurrent batch and gone again: count it as seen
            result.duplicates += 1
            continue
        row_id, payload = found
        old = orjson.loads(payload)
        if old == ev:
            result.duplicates += 1
            continue
        if canonical_json(ev) >= canonical_json(old):
            reject(index, ev, CONFLICT_ERROR)
            continue
        db_session.execute(
            update(rt)
            .where(rt.c.id == row_id)
            .values(
                type=ev["type"],
                attempt=ev["attempt"],
                ts=event_time(ev),
                received_at=now,
                payload=ev,
            )
        )
        rejected_rows.append(
            {
                "received_at": now,
                "job_id": ev["job_id"][:128],
                "event_id": ev["event_id"][:64],
                "batch_index": -1,
                "error": CONFLICT_ERROR + " (this stored copy was replaced by a smaller one)",
                "raw": _raw_text(old),
                "token_name": token_name,
            }
        )
        replaced.append(ev)
    return replaced


def keep_rejected(
    *, db_session: Session, raw: Any, index: int, error: str, token: ApiToken | None
) -> None:
    """Keep one refused event with its reason, for an operator (the caller commits)."""
    row = {
        "received_at": time.time(),
        "job_id": _str_field(raw, "job_id", 128),
        "event_id": _str_field(raw, "event_id", 64),
        "batch_index": index,
        "error": storable(error),
        "raw": _raw_text(raw),
        "token_name": token.name if token is not None else None,
    }
    db_session.execute(insert_for(db_session, RejectedEvent.__table__), [row])


_PG_INSERT_RAW = text(
    "INSERT INTO raw_events (event_id, job_id, type, attempt, ts, received_at, payload, "
    "job_month) "
    "SELECT e->>'event_id', e->>'job_id', e->>'type', (e->>'attempt')::int, "
    "COALESCE((e->>'ts')::float8, (e->>'start')::float8), :received_at, e, "
    "(CAST(:months AS jsonb)->>(e->>'job_id'))::int "
    "FROM jsonb_array_elements(CAST(:events AS jsonb)) AS e "
    "ON CONFLICT (job_id, event_id, job_month) DO NOTHING RETURNING job_id, event_id"
)


_PG_MARK_JOBS = text(
    "INSERT INTO jobs (job_id, model, labels, config, dirty, last_event_at, created_at, "
    "updated_at) "
    "SELECT x->>0, x->>1, '{}'::jsonb, '{}'::jsonb, true, (x->>2)::float8, :now, :now "
    "FROM jsonb_array_elements(CAST(:jobs AS jsonb)) AS x "
    "ON CONFLICT (job_id) DO UPDATE SET dirty = true, updated_at = EXCLUDED.updated_at, "
    "model = COALESCE(jobs.model, EXCLUDED.model), "
    "last_event_at = GREATEST(jobs.last_event_at, EXCLUDED.last_event_at)"
)


def _job_months(db_session: Session, job_ids: set[str], now: float) -> dict[str, int]:
    """Each job's partition month: the month of its jobs.created_at, else of now (a new job)."""
    months = dict.fromkeys(job_ids, month_of(now))
    ordered = sorted(job_ids)
    for k in range(0, len(ordered), 500):
        rows = db_session.execute(
            select(Job.job_id, Job.created_at).where(Job.job_id.in_(ordered[k : k + 500]))
        )
        for job_id, created_at in rows:
            months[job_id] = month_of(created_at)
    return months


def _insert_raw(
    db_session: Session, events: list[dict[str, Any]], now: float
) -> set[tuple[str, str]]:
    """Insert new events, skipping known (job_id, event_id) keys; returns the keys inserted."""
    # One key order for every batch, so that concurrent overlapping batches take the unique
    # index's locks in the same order (no deadlock cycle on Postgres).
    events = sorted(events, key=lambda ev: (ev["job_id"], ev["event_id"]))
    months = _job_months(db_session, {ev["job_id"] for ev in events}, now)
    if db_session.get_bind().dialect.name == "postgresql":
        # One statement, one JSON parameter: a multi-row VALUES of 7,000 parameters costs
        # more to build and parse than the insert itself.
        params = {
            "received_at": now,
            "events": orjson.dumps(events).decode(),
            "months": orjson.dumps(months).decode(),
        }
        return {(j, e) for j, e in db_session.execute(_PG_INSERT_RAW, params)}
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


def _mark_jobs(
    db_session: Session,
    events: list[dict[str, Any]],
    models: dict[str, str | None],
    now: float,
) -> list[str]:
    """Upsert models and jobs touched by new events, flagging each job for recompute."""
    last_seen: dict[str, float] = {}
    owners: dict[str, str | None] = {}
    tiers: dict[str, str] = {}  # a model's tier from its jobs' `tier` label, like its owner
    for ev in events:
        t = event_time(ev)
        if t > last_seen.get(ev["job_id"], -1.0):
            last_seen[ev["job_id"]] = t
        if ev["type"] == "job_submitted":
            owner = ev.get("labels", {}).get("owner")
            if owner or ev["model"] not in owners:
                owners[ev["model"]] = owner
            if ev.get("labels", {}).get("tier"):
                tiers[ev["model"]] = ev["labels"]["tier"]
    for job_id in last_seen:
        model = models.get(job_id)
        if model is not None and model not in owners:
            owners[model] = None
    if owners:
        # Insert new models without touching known ones, then change an owner only where it
        # differs: a known model's row is not locked, so this batch and a recompute (which
        # holds its job, then ensures its model) never wait on each other in a cycle.
        mt = Model.__table__
        db_session.execute(
            insert_for(db_session, mt).on_conflict_do_nothing(index_elements=["name"]),
            [
                {"name": m, "owner": o, "tier": tiers.get(m), "labels": {}, "created_at": now}
                for m, o in sorted(owners.items())
            ],
        )
        for m, o in sorted(owners.items()):
            if o is not None:
                db_session.execute(
                    update(mt).where(mt.c.name == m, mt.c.owner.is_distinct_from(o)).values(owner=o)
                )
            tier = tiers.get(m)
            if tier is not None:
                db_session.execute(
                    update(mt)
                    .where(mt.c.name == m, mt.c.tier.is_distinct_from(tier))
                    .values(tier=tier)
                )
    job_ids = sorted(last_seen)  # a fixed order, so concurrent batches lock rows alike
    if not job_ids:
        return job_ids
    if db_session.get_bind().dialect.name == "postgresql":
        jobs = [[j, models.get(j), last_seen[j]] for j in job_ids]
        db_session.execute(_PG_MARK_JOBS, {"jobs": orjson.dumps(jobs).decode(), "now": now})
        return job_ids
    jt = Job.__table__
    stmt = insert_for(db_session, jt)
    stmt = stmt.on_conflict_do_update(
        index_elements=["job_id"],
        set_={
            "dirty": True,
            "updated_at": stmt.excluded.updated_at,
            "model": func.coalesce(jt.c.model, stmt.excluded.model),
            "last_event_at": case(
                (jt.c.last_event_at.is_(None), stmt.excluded.last_event_at),
                (jt.c.last_event_at > stmt.excluded.last_event_at, jt.c.last_event_at),
                else_=stmt.excluded.last_event_at,
            ),
        },
    )
    db_session.execute(
        stmt,
        [
            {
                "job_id": j,
                "model": models.get(j),
                "labels": {},
                "config": {},
                "dirty": True,
                "last_event_at": last_seen[j],
                "created_at": now,
                "updated_at": now,
            }
            for j in job_ids
        ],
    )
    return job_ids


def list_rejected(
    *, db_session: Session, job_id: str | None = None, limit: int = 100, offset: int = 0
) -> list[RejectedEvent]:
    """Rejected events, newest first, for an operator."""
    stmt = select(RejectedEvent).order_by(RejectedEvent.id.desc()).limit(limit).offset(offset)
    if job_id is not None:
        stmt = stmt.where(RejectedEvent.job_id == job_id)
    return list(db_session.scalars(stmt))
