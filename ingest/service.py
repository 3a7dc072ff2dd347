"""Store a validated batch: dedupe, keep rejects with their reason, mark touched jobs for recompute."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import orjson
from sqlalchemy import case, func, text, update
from sqlalchemy.orm import Session

from backend.auth.models import ApiToken
from backend.auth.service import allows_model
from backend.db import bound_lock_waits, insert_for
from backend.ett.store import forget_states
from backend.ett.timeline import canonical_json
from backend.events import store as event_store
from backend.events.store import event_time
from backend.jobs.models import Job, Model
from ingest.schema import EventError, validate_event

MAX_KEPT_RAW_CHARS = 65_536
# Events held per job while its job_submitted has not come (ETT_MAX_HELD_EVENTS_PER_JOB).
MAX_HELD_PER_JOB = 10_000


class ModelNotAllowed(Exception):
    """The token may not write a job of this batch (answered 403)."""


@dataclass
class IngestResult:
    """What one batch did."""

    accepted: int = 0
    duplicates: int = 0
    rejected: list[dict[str, Any]] = field(default_factory=list)
    job_ids: list[str] = field(default_factory=list)
    # Events of a model-scoped token kept aside until their job's job_submitted arrives.
    held: int = 0
    # Events held by earlier batches that this batch's job_submitted let into their job.
    released: int = 0


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


def _resolve_models(
    jobs: event_store.StoredJobs,
    token: ApiToken | None,
    valid: list[tuple[int, dict[str, Any]]],
    reject: Any,
) -> tuple[
    list[tuple[int, dict[str, Any]]], list[tuple[int, dict[str, Any]]], dict[str, str | None]
]:
    """Each job's model (stored, else its first job_submitted in the batch), fixed once known.

    Returns the events to store, the events to hold and every job's model. Only a
    job_submitted gives a job its model. A job_submitted naming another model is rejected
    (`model_conflict`). A token limited to models is checked against every job_submitted of the
    batch and against the model of every stored job (either refusal is the whole batch's 403);
    its other events for a job no job_submitted has named yet are held (docs/PROTOCOL.md).
    """
    models: dict[str, str | None] = {}
    for _index, ev in valid:
        row = jobs.rows.get(ev["job_id"])
        if row is not None:
            models[ev["job_id"]] = row.model
    submitted_models: dict[str, set[str]] = {}
    for _index, ev in valid:
        if ev["type"] == "job_submitted":
            submitted_models.setdefault(ev["job_id"], set()).add(ev["model"])
    scoped = token is not None and bool(token.models)
    if scoped:
        for job_id, named in sorted(submitted_models.items()):
            for model in sorted(named):
                if not allows_model(token, model):  # type: ignore[arg-type]
                    raise ModelNotAllowed(
                        f"token {token.name!r} may write only jobs of "  # type: ignore[union-attr]
                        f"{', '.join(token.models)}; a job_submitted of job {job_id!r} names "  # type: ignore[union-attr]
                        f"model {model!r}"
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
    held: list[tuple[int, dict[str, Any]]] = []
    if scoped:
        for job_id, model in sorted(models.items()):
            if model is not None and not allows_model(token, model):  # type: ignore[arg-type]
                raise ModelNotAllowed(
                    f"token {token.name!r} may write only jobs of "  # type: ignore[union-attr]
                    f"{', '.join(token.models)}; job {job_id!r} has model {model!r}"  # type: ignore[union-attr]
                )
        unnamed = {job_id for job_id, model in models.items() if model is None}
        if unnamed:
            held = [(i, ev) for i, ev in kept if ev["job_id"] in unnamed]
            kept = [(i, ev) for i, ev in kept if ev["job_id"] not in unnamed]
            for job_id in unnamed:
                models.pop(job_id, None)
    return kept, held, models


def _hold(
    db_session: Session,
    token: ApiToken,
    held: list[tuple[int, dict[str, Any]]],
    now: float,
    max_per_job: int,
    reject: Any,
) -> tuple[int, int]:
    """Keep a scoped token's events for jobs without a model aside; (held, duplicates)."""
    counts, known = event_store.held_keys(
        db_session=db_session, job_ids={ev["job_id"] for _, ev in held}
    )
    rows: list[dict[str, Any]] = []
    duplicates = 0
    for index, ev in held:
        key = (ev["job_id"], ev["event_id"], event_store.canonical_payload(ev))
        if key in known:
            duplicates += 1
            continue
        if counts.get(ev["job_id"], 0) >= max_per_job:
            reject(
                index,
                ev,
                f"held_limit: job {ev['job_id']!r} already holds {max_per_job} events waiting "
                "for its job_submitted (ETT_MAX_HELD_EVENTS_PER_JOB); send the job_submitted "
                "that names its model first",
            )
            continue
        known.add(key)
        counts[ev["job_id"]] = counts.get(ev["job_id"], 0) + 1
        rows.append(
            {
                "job_id": ev["job_id"],
                "event_id": ev["event_id"],
                "received_at": now,
                "token_name": token.name,
                "token_models": list(token.models or []),
                "payload": ev,
            }
        )
    event_store.hold(db_session=db_session, rows=rows)
    return len(rows), duplicates


def _release(
    db_session: Session,
    models: dict[str, str | None],
    now: float,
    rejected_rows: list[dict[str, Any]],
) -> list[tuple[int, dict[str, Any]]]:
    """Held events of jobs whose model is now known: the ones their token may write, to store.

    The others are refused into rejected_events with the reason (batch index -1: they came in
    an earlier batch).
    """
    named = {job_id: model for job_id, model in models.items() if model is not None}
    if not named:
        return []
    waiting = event_store.jobs_with_held(db_session=db_session, job_ids=named)
    if not waiting:
        return []
    released: list[tuple[int, dict[str, Any]]] = []
    for token_name, token_models, ev in event_store.take_held(
        db_session=db_session, job_ids=waiting
    ):
        model = named.get(ev.get("job_id"))
        if model is not None and (not token_models or model in token_models):
            released.append((-1, ev))
            continue
        rejected_rows.append(
            {
                "received_at": now,
                "job_id": storable(str(ev.get("job_id", "")))[:128],
                "event_id": storable(str(ev.get("event_id", "")))[:64],
                "batch_index": -1,
                "error": storable(
                    f"model_not_allowed: held until job {ev.get('job_id')!r} was submitted; "
                    f"its job_submitted names model {model!r}, which token {token_name!r} "
                    f"(models {', '.join(token_models)}) may not write"
                ),
                "raw": _raw_text(ev),
                "token_name": token_name,
            }
        )
    return released


def ingest_batch(
    *,
    db_session: Session,
    events: list[Any],
    token: ApiToken | None,
    now: float | None = None,
    time_window: tuple[float, float] | None = None,
    max_held_per_job: int = MAX_HELD_PER_JOB,
    lock_timeout_s: float | None = None,
) -> IngestResult:
    """Validate and store one batch in one transaction; commit is the caller's.

    `time_window` (epoch seconds) bounds the times an event may carry (default: the schema's).
    A model-scoped token's events for jobs no job_submitted has named are held (at most
    `max_held_per_job` per job) and released when the job's job_submitted arrives.
    `lock_timeout_s` bounds every lock wait of the transaction (bound_lock_waits; Postgres).
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

    # One read of the batch's stored jobs serves the prune check, the models and the months.
    jobs = event_store.StoredJobs()
    if valid:
        jobs = event_store.job_rows(
            db_session=db_session,
            job_ids={ev["job_id"] for _, ev in valid},
            now=now,
            lock_timeout_s=lock_timeout_s,
        )
        valid = _refuse_pruned(jobs, valid, reject)
    else:
        bound_lock_waits(db_session, lock_timeout_s)
    models: dict[str, str | None] = {}
    released: list[tuple[int, dict[str, Any]]] = []
    if valid:
        valid, held, models = _resolve_models(jobs, token, valid, reject)
        if held and token is not None:
            result.held, dups = _hold(db_session, token, held, now, max_held_per_job, reject)
            result.duplicates += dups
        released = _release(db_session, models, now, rejected_rows)
    stored: list[dict[str, Any]] = []
    if valid:
        stored = _store_valid(
            db_session, jobs, valid, now, result, reject, rejected_rows, token_name
        )
        result.accepted = len(stored)
    if released:
        # Events of earlier batches: stored after this batch's own, settled against them by
        # canonical JSON like any resent copy; their counts are not this batch's.
        aside = IngestResult()

        def reject_released(_index: int, raw: Any, error: str) -> None:
            rejected_rows.append(
                {
                    "received_at": now,
                    "job_id": _str_field(raw, "job_id", 128),
                    "event_id": _str_field(raw, "event_id", 64),
                    "batch_index": -1,
                    "error": storable(error + " (a held event, released on job_submitted)"),
                    "raw": _raw_text(raw),
                    "token_name": token_name,
                }
            )

        stored += _store_valid(
            db_session, jobs, released, now, aside, reject_released, rejected_rows, token_name
        )
        result.released = len(stored) - result.accepted
    if stored:
        result.job_ids = _mark_jobs(db_session, stored, models, now, jobs)
    event_store.add_rejected(db_session=db_session, rows=rejected_rows)
    result.rejected.sort(key=lambda r: r["index"])
    return result


def _refuse_pruned(
    jobs: event_store.StoredJobs, valid: list[tuple[int, dict[str, Any]]], reject: Any
) -> list[tuple[int, dict[str, Any]]]:
    """Refuse the events of jobs whose raw events `ett db prune` dropped: their result is final."""
    pruned = {
        job_id: row.raw_pruned_at
        for job_id, row in jobs.rows.items()
        if row.raw_pruned_at is not None
    }
    if not pruned:
        return valid
    kept = []
    for index, ev in valid:
        at = pruned.get(ev["job_id"])
        if at is None:
            kept.append((index, ev))
            continue
        day = datetime.fromtimestamp(at, UTC).strftime("%Y-%m-%d")
        reject(
            index,
            ev,
            f"job_pruned: job {ev['job_id']!r} is closed: its raw events were pruned on {day} "
            "(ett db prune) and its stored result is final; send a new run under a new job_id",
        )
    return kept


def _store_valid(
    db_session: Session,
    jobs: event_store.StoredJobs,
    valid: list[tuple[int, dict[str, Any]]],
    now: float,
    result: IngestResult,
    reject: Any,
    rejected_rows: list[dict[str, Any]],
    token_name: str | None,
) -> list[dict[str, Any]]:
    """Insert new events and settle the known ones; returns the events stored (new or replacing)."""
    events = [ev for _, ev in valid]
    inserted = event_store.insert_new(db_session=db_session, events=events, now=now, jobs=jobs)
    if len(inserted) == len(events):  # every event went in (inserted holds distinct keys)
        return events
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
    return new + replaced


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
    stored = event_store.stored_copies(
        db_session=db_session, keys=[(ev["job_id"], ev["event_id"]) for _, ev in known]
    )
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
        event_store.replace_copy(db_session=db_session, row_id=row_id, event=ev, now=now)
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
    if replaced:
        # The replaced row keeps its id: a settled state would not see it change.
        forget_states(db_session=db_session, job_ids={ev["job_id"] for ev in replaced})
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
    event_store.add_rejected(db_session=db_session, rows=[row])


_PG_MARK_JOBS = text(
    "INSERT INTO jobs (job_id, model, labels, config, dirty, last_event_at, created_at, "
    "updated_at) "
    "SELECT x->>0, x->>1, '{}'::jsonb, '{}'::jsonb, true, (x->>2)::float8, :now, :now "
    "FROM jsonb_array_elements(CAST(:jobs AS jsonb)) AS x "
    "ON CONFLICT (job_id) DO UPDATE SET dirty = true, updated_at = EXCLUDED.updated_at, "
    "model = COALESCE(jobs.model, EXCLUDED.model), "
    "last_event_at = GREATEST(jobs.last_event_at, EXCLUDED.last_event_at)"
)


def _mark_jobs(
    db_session: Session,
    events: list[dict[str, Any]],
    models: dict[str, str | None],
    now: float,
    jobs: event_store.StoredJobs | None = None,
) -> list[str]:
    """Upsert models and jobs touched by new events, flagging each job for recompute.

    `jobs`: the jobs' rows as read before the batch; a model a stored job names has its row
    already (the foreign key), so a batch of a running job writes no models row.
    """
    known = jobs.rows if jobs is not None else {}
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
        row = known.get(job_id)
        if model is not None and model not in owners and (row is None or row.model != model):
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
        marks = [[j, models.get(j), last_seen[j]] for j in job_ids]
        db_session.execute(_PG_MARK_JOBS, {"jobs": orjson.dumps(marks).decode(), "now": now})
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
