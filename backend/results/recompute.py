"""Recompute: rebuild dirty jobs from their raw events into stored results and fleet rollups.

Ingest marks touched jobs dirty; these functions (inline after ingest, the RecomputeWorker of
`ett worker` / `ett serve --role all`, or `ett recompute`) rebuild each one from its own raw
events, so rollups never re-read raw events. A full recompute reads the job's events once and
costs time linear in their number.

Several workers share one Postgres: each claims one dirty job per transaction with an advisory
lock (backend.jobs.claims: a lease that ends with the transaction), so no job is computed by two
at once, and a worker that dies mid-job has its transaction rolled back, which leaves the job
dirty for the next claim. The job's `jobs` row, which ingest's dirty mark writes, is taken only
by the recompute's final update (derived fields, dirty flag), so ingest waits for at most that
commit, never for a recompute.

An open job is not recomputed from all its events: its settled state (backend.ett.incremental,
docs/ACCOUNTING.md "Incremental accounting") is extended by the events stored since, and the
minute refresh of an idle open job (mark_stale_open_jobs) is an extension with no event.
"""

from __future__ import annotations

import bisect
import logging
import time
from collections.abc import Callable, Iterable, Mapping
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import case, func, or_, select, text, update
from sqlalchemy.exc import DBAPIError
from sqlalchemy.orm import Session

from backend.config import MAX_JOB_SPAN_S, Settings
from backend.db import LOCK_TIMEOUT_S, Database, bound_lock_waits, describe_error, is_lock_timeout
from backend.ett.engine import JobETT, account, compute_job, compute_parts
from backend.ett.incremental import AccountState, NeedsFull, extend, rules_key, settle
from backend.ett.models import JobAccountingState, JobResult
from backend.ett.store import save_state, store, store_extension
from backend.events.store import (
    count_rows_up_to,
    job_ids_with_events,
    load_events,
    load_events_after,
)
from backend.fleet.rollups import refresh_extended_rollups, refresh_job_rollups
from backend.health import RECOMPUTE_FAILURES
from backend.jobs import claims, quarantine
from backend.jobs.models import Job, JobQuarantine
from backend.liveness import ABANDON_TIMEOUT_S, HEARTBEAT_TIMEOUT_S
from backend.workers import PeriodicWorker

log = logging.getLogger("ett.recompute")

# Open (provisional) jobs end "now": their stored answer is refreshed at least this often.
OPEN_JOB_REFRESH_S = 60.0


def custom_phases_for(*, db_session: Session, settings: Settings | None) -> dict[str, str] | None:
    """`custom.*` phase -> component from the owners mapping, when that domain is installed."""
    try:
        from backend.owners.service import custom_phase_components
    except ImportError:
        return None
    try:
        return custom_phase_components(db_session=db_session, settings=settings)
    except Exception:  # noqa: BLE001 - a broken mapping must not stop accounting
        log.exception("could not read the custom phase mapping; custom phases are unattributed")
        return None


def compute(
    *,
    db_session: Session,
    job_id: str,
    settings: Settings | None = None,
    now: float | None = None,
    custom_phases: Mapping[str, str] | None = None,
) -> JobETT | None:
    """The engine's answer for one job from its raw events, without writing; None if no events."""
    events = load_events(db_session=db_session, job_id=job_id)
    if not events:
        return None
    max_span = _max_span(settings)
    check_event_span(job_id, events, max_span)
    if custom_phases is None:
        custom_phases = custom_phases_for(db_session=db_session, settings=settings)
    heartbeat_s, abandon_s = _engine_rules(settings)
    result = compute_job(
        events,
        now=time.time() if now is None else now,
        heartbeat_timeout_s=heartbeat_s,
        abandon_timeout_s=abandon_s,
        custom_phases=custom_phases,
    )
    check_run_span(job_id, result, max_span)
    return result


# Every time an event carries (docs/PROTOCOL.md): the span of a job is from the least to the most.
_TIME_FIELDS = ("ts", "start", "end", "blocking_end")


def _max_span(settings: Settings | None) -> float:
    return settings.max_job_span_s if settings else MAX_JOB_SPAN_S


class JobSpanTooLong(ValueError):
    """A job whose time span is over ETT_MAX_JOB_SPAN_S: it is quarantined, its events kept."""


def check_event_span(job_id: str, events: list[dict[str, Any]], max_span_s: float) -> None:
    """Refuse to account a job whose events' times span more than `max_span_s`."""
    times = [e[k] for e in events for k in _TIME_FIELDS if type(e.get(k)) in (int, float)]
    if times:
        check_span(job_id, min(times), max(times), max_span_s)


def check_run_span(job_id: str, result: JobETT, max_span_s: float) -> None:
    """Refuse to account a job whose run spans more than `max_span_s` (an open job runs to now:
    one submitted long ago and never ended spans that far too)."""
    check_span(job_id, result.submitted_at, result.ended_at, max_span_s)


def check_span(job_id: str, first: float, last: float, max_span_s: float) -> None:
    """Refuse to account a job spanning more than `max_span_s` (rollups write a row per day)."""
    if last - first <= max_span_s:
        return
    day = "%Y-%m-%d"
    raise JobSpanTooLong(
        f"job_span: job {job_id!r} spans {(last - first) / 86_400:,.0f} days "
        f"({datetime.fromtimestamp(first, UTC).strftime(day)} .. "
        f"{datetime.fromtimestamp(last, UTC).strftime(day)}), over ETT_MAX_JOB_SPAN_S "
        f"({max_span_s / 86_400:,.0f} days): it is not accounted; its events are kept. Correct "
        "the events' times (send a smaller copy of each) or raise the setting, then "
        "`ett recompute --job` it"
    )


def _lock_timeout(settings: Settings | None) -> float:
    return settings.lock_timeout_s if settings is not None else LOCK_TIMEOUT_S


def _lock_job(db_session: Session, job_id: str, *, skip_locked: bool) -> bool:
    """Take the job's claim for this transaction; False if it has no row (or is busy, skipping).

    On Postgres the claim is an advisory lock (backend.jobs.claims), not the row's lock.
    """
    if claims.is_postgres(db_session):
        if skip_locked:
            if not claims.try_claim(db_session, job_id):
                return False
        else:
            claims.claim(db_session, job_id)
        return (
            db_session.execute(select(Job.job_id).where(Job.job_id == job_id)).first() is not None
        )
    # SQLite: a write first takes the database lock now, not at a later (stale-snapshot) upgrade.
    result = db_session.execute(update(Job).where(Job.job_id == job_id).values(dirty=Job.dirty))
    return bool(result.rowcount)


def _engine_rules(settings: Settings | None) -> tuple[float, float]:
    return (
        settings.heartbeat_timeout_s if settings else HEARTBEAT_TIMEOUT_S,
        settings.abandon_timeout_s if settings else ABANDON_TIMEOUT_S,
    )


def _rows_settled_before(db_session: Session, read_at: float | None) -> bool:
    """True when no raw row read at `read_at` can still commit below the mark: every
    transaction that could have held one (begun by then) has ended.

    Postgres numbers rows when they are inserted, not when they commit, so an ingest open
    while the state was read may commit a row below its mark; any such transaction began
    before the read. SQLite has one writer, whose rows are numbered above every committed one.
    """
    if db_session.get_bind().dialect.name != "postgresql":
        return True
    if read_at is None:
        return False
    oldest, hidden = db_session.execute(_OLDEST_TRANSACTION).one()
    # A session of another role shows no state or start: it might be such an ingest.
    return not hidden and (oldest is None or float(oldest) > read_at)


_OLDEST_TRANSACTION = text(
    "SELECT extract(epoch FROM min(xact_start)), "
    "count(*) FILTER (WHERE state IS NULL AND backend_type = 'client backend') "
    "FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()"
)
_NOW = text("SELECT extract(epoch FROM clock_timestamp())")


def _read_time(db_session: Session) -> float | None:
    """The database's clock after a read (the marks' time; None on SQLite, which needs none)."""
    if db_session.get_bind().dialect.name != "postgresql":
        return None
    return float(db_session.scalar(_NOW))


def _extend(
    *,
    db_session: Session,
    job_id: str,
    rules: str,
    now: float,
    heartbeat_s: float,
    abandon_s: float,
) -> tuple[JobETT, float] | None:
    """The job's answer extended from its settled state (docs/ACCOUNTING.md), stored, with
    the earliest instant its intervals changed from; None when it has none that holds (no row, other
    rules, a row committed below its mark) or the batch needs the full recompute.

    The check for rows committed below the mark counts only the rows above the state's final
    row (`marks`): the rows read by the last reads, not the job's history.
    """
    row = db_session.get(JobAccountingState, job_id)
    if row is None or row.rules != rules:
        return None
    state = AccountState.from_json(row.state)
    marks = state.marks
    final_row, final_rows = marks.get("final_row"), marks.get("final_rows", 0)
    # Decided before the count: a transaction that ends after this is seen by the count.
    settled = _rows_settled_before(db_session, marks.get("read_at"))
    if (
        count_rows_up_to(
            db_session=db_session, job_id=job_id, row=row.last_event_row, after_row=final_row
        )
        != row.event_rows - final_rows
    ):
        return None  # an event committed late below the mark, or pruned: recompute in full
    if settled:
        final_row, final_rows = row.last_event_row, row.event_rows
    events, last_row, n = load_events_after(
        db_session=db_session, job_id=job_id, after_row=row.last_event_row
    )
    read_at = _read_time(db_session)
    try:
        result, nxt = extend(
            state, events, now=now, heartbeat_timeout_s=heartbeat_s, abandon_timeout_s=abandon_s
        )
    except NeedsFull as why:
        log.debug("job %s: full recompute (%s)", job_id, why)
        return None
    nxt.marks = {"final_row": final_row, "final_rows": final_rows, "read_at": read_at}
    since = state.settled_at
    store_extension(db_session=db_session, job_id=job_id, result=result, since=since)
    row.last_event_row = last_row if last_row is not None else row.last_event_row
    row.event_rows += n
    row.settled_at = nxt.settled_at
    row.computed_at = time.time()
    row.state = nxt.to_json()
    # The earliest instant whose stored interval changed: the start of the one holding `since`.
    changed = state.pieces[-1][0] if state.pieces else state.submitted_at
    first = bisect.bisect_left(result.intervals, since, key=lambda iv: iv.end)
    if first < len(result.intervals):
        changed = min(changed, result.intervals[first].start)
    return result, changed


def recompute_job(
    *,
    db_session: Session,
    job_id: str,
    settings: Settings | None = None,
    now: float | None = None,
    custom_phases: Mapping[str, str] | None = None,
    skip_locked: bool = False,
    refresh_rollups: bool = True,
    claimed: bool = False,
    incremental: bool = True,
    extended: dict[str, tuple[JobETT, float]] | None = None,
    finish: list[tuple[str, dict[str, Any], float | None]] | None = None,
) -> JobETT | None:
    """Recompute and store one job (the caller commits); None if the job is unknown or busy.

    An open job with a settled state is extended by its new events (backend.ett.incremental);
    any other, or with incremental=False (`ett recompute`), is recomputed from all its raw
    events, which keeps its state for the next batch when it is open.
    With refresh_rollups=False the caller refreshes the fleet rollups itself, in the same
    transaction (once for a batch). With claimed=True the caller holds the job's claim already
    (claim_dirty_job). An extended job whose rollups the caller refreshes is put in `extended`
    (its answer and the instant its intervals changed from: refresh_extended_rollups).
    With `finish` the job's row is not written: what to write is put there (finish_job), for
    the caller to write after its rollups, last before its commit.
    """
    if not claimed:
        bound_lock_waits(db_session, _lock_timeout(settings))
        if not _lock_job(db_session, job_id, skip_locked=skip_locked):
            return None
    seen, pruned = db_session.execute(
        select(Job.updated_at, Job.raw_pruned_at).where(Job.job_id == job_id)
    ).one_or_none() or (None, None)
    if pruned is not None:
        # Its raw events were pruned (`ett db prune`): the stored result is all there is.
        db_session.execute(update(Job).where(Job.job_id == job_id).values(dirty=False))
        return None
    if custom_phases is None:
        custom_phases = custom_phases_for(db_session=db_session, settings=settings)
    heartbeat_s, abandon_s = _engine_rules(settings)
    rules = rules_key(
        heartbeat_timeout_s=heartbeat_s, abandon_timeout_s=abandon_s, custom_phases=custom_phases
    )
    at = time.time() if now is None else now
    max_span = _max_span(settings)
    result = None
    grown = None
    derived: dict[str, Any] = {}
    if incremental:
        grown = _extend(
            db_session=db_session,
            job_id=job_id,
            rules=rules,
            now=at,
            heartbeat_s=heartbeat_s,
            abandon_s=abandon_s,
        )
    if grown is not None:
        result = grown[0]
        # Extended (and stored: a span too long rolls the store back).
        check_run_span(job_id, result, max_span)
    else:
        events, last_row, n = load_events_after(db_session=db_session, job_id=job_id)
        read_at = _read_time(db_session)
        state = None
        if events:
            check_event_span(job_id, events, max_span)
            tl, part = compute_parts(
                events,
                now=at,
                heartbeat_timeout_s=heartbeat_s,
                abandon_timeout_s=abandon_s,
                custom_phases=custom_phases,
            )
            state = settle(tl, part)
            result = account(tl, part.pieces, part.phases)
            check_run_span(job_id, result, max_span)
            if state is not None:
                state.marks = {"final_row": None, "final_rows": 0, "read_at": read_at}
        derived = store(db_session=db_session, job_id=job_id, result=result, write_job=False)
        if seen is not None:  # a jobs row to hang the state on
            save_state(
                db_session=db_session,
                job_id=job_id,
                state=state,
                last_row=last_row,
                rows=n,
                rules=rules,
            )
    if grown is not None and extended is not None:
        extended[job_id] = grown
    elif grown is not None and refresh_rollups:
        refresh_extended_rollups(
            db_session=db_session, job_id=job_id, result=grown[0], since=grown[1]
        )
    elif refresh_rollups:
        refresh_job_rollups(db_session=db_session, job_ids=[job_id])
    if finish is not None:
        finish.append((job_id, derived, seen))
    else:
        finish_job(db_session=db_session, job_id=job_id, derived=derived, seen=seen)
    return result


def finish_job(
    *, db_session: Session, job_id: str, derived: Mapping[str, Any], seen: float | None
) -> None:
    """Write a recomputed job's row: its derived fields, and the dirty flag cleared unless an
    ingest marked it again since `seen` (its updated_at when the recompute read it).

    Last in the transaction: from here to the commit is all that ingest's mark can wait on.
    """
    if derived:
        # One statement: the flag's test reads the row it updates.
        clean = case((Job.updated_at == seen, False), else_=Job.dirty)
        db_session.execute(update(Job).where(Job.job_id == job_id).values(**derived, dirty=clean))
        return
    db_session.execute(
        update(Job).where(Job.job_id == job_id, Job.updated_at == seen).values(dirty=False)
    )


def recompute_jobs(
    *,
    db_session: Session,
    job_ids: Iterable[str],
    settings: Settings | None = None,
    now: float | None = None,
    custom_phases: Mapping[str, str] | None = None,
    claimed: bool = False,
) -> int:
    """Recompute these jobs in the caller's transaction (the caller commits); returns how many had events.

    With claimed=True the caller holds the jobs' row locks already (claim_dirty_jobs).
    """
    if custom_phases is None:
        custom_phases = custom_phases_for(db_session=db_session, settings=settings)
    ids = sorted(set(job_ids))
    done = 0
    extended: dict[str, tuple[JobETT, float]] = {}
    finish: list[tuple[str, dict[str, Any], float | None]] = []
    for job_id in ids:
        result = recompute_job(
            db_session=db_session,
            job_id=job_id,
            settings=settings,
            now=now,
            custom_phases=custom_phases,
            claimed=claimed,
            refresh_rollups=False,
            extended=extended,
            finish=finish,
        )
        if result is not None:
            done += 1
    # One rollup refresh for the batch (an unknown job id has no fleet rows: a no-op for it);
    # an extended job's from the day its intervals changed.
    refresh_job_rollups(db_session=db_session, job_ids=[j for j in ids if j not in extended])
    for job_id, (result, since) in extended.items():
        refresh_extended_rollups(db_session=db_session, job_id=job_id, result=result, since=since)
    # The jobs' rows after the rollups, which may wait on another worker's: ingest's mark
    # never waits behind that.
    for job_id, derived, seen in finish:
        finish_job(db_session=db_session, job_id=job_id, derived=derived, seen=seen)
    return done


def dirty_job_ids(
    *, db_session: Session, limit: int | None = None, now: float | None = None
) -> list[str]:
    """Jobs marked for recompute, oldest mark first; quarantined ones only once due again."""
    now = time.time() if now is None else now
    stmt = (
        select(Job.job_id)
        .where(Job.dirty.is_(True), Job.job_id.not_in(quarantine.waiting(now)))
        .order_by(Job.updated_at, Job.job_id)
    )
    if limit is not None:
        stmt = stmt.limit(limit)
    return list(db_session.scalars(stmt))


def recompute_isolated(
    *,
    db_session: Session,
    job_ids: Iterable[str],
    settings: Settings | None = None,
    now: float | None = None,
) -> int:
    """Recompute jobs one transaction each; one that fails is quarantined. Returns the count."""
    ids = list(job_ids)
    held = quarantine.quarantined(db_session=db_session, job_ids=ids)
    custom = custom_phases_for(db_session=db_session, settings=settings)
    db_session.commit()
    done = 0
    for job_id in ids:
        try:
            result = recompute_job(
                db_session=db_session,
                job_id=job_id,
                settings=settings,
                now=now,
                custom_phases=custom,
                skip_locked=True,
            )
            if result is not None and job_id in held:
                quarantine.release(db_session=db_session, job_ids=[job_id])
            db_session.commit()
        except Exception as err:  # noqa: BLE001 - one bad job must not stop the others
            db_session.rollback()
            if is_lock_timeout(err):
                # Another transaction holds the job (or its rollups): not the job's fault.
                # It stays marked and is computed on a later pass.
                log.info("job %s is locked elsewhere; left for a later pass", job_id)
                continue
            RECOMPUTE_FAILURES.inc()
            quarantine.record_failure(
                db_session=db_session,
                job_id=job_id,
                error=describe_error(err),
                now=time.time() if now is None else now,
                settings=settings,
            )
            db_session.commit()
            continue
        if result is not None:
            done += 1
    return done


# Jobs claimed per transaction: one, so that a worker never holds a job's claim across another
# job's recompute (a batch's rows are written at its end, each job's row then held to the
# commit). An open job's recompute is an extension of its settled state (milliseconds).
CLAIM_BATCH = 1
# Dirty jobs read per claim beyond `limit`: other workers hold some of the oldest.
_CLAIM_SLACK = 16


def claim_dirty_jobs(
    *, db_session: Session, limit: int = 1, now: float | None = None
) -> list[tuple[str, bool]]:
    """Claim up to `limit` of the oldest dirty jobs no other worker holds (Postgres).

    Returns (job_id, was_quarantined) pairs, each job's claim (an advisory lock,
    backend.jobs.claims) held until the caller's transaction ends; no row is locked (empty when
    no dirty job is free). Quarantined jobs are claimed only once due again.
    """
    now = time.time() if now is None else now
    stmt = (
        select(Job.job_id, JobQuarantine.job_id.is_not(None))
        .outerjoin(JobQuarantine, JobQuarantine.job_id == Job.job_id)
        .where(
            Job.dirty.is_(True),
            or_(JobQuarantine.job_id.is_(None), JobQuarantine.retry_at <= now),
        )
        .order_by(Job.updated_at, Job.job_id)
        .limit(limit + _CLAIM_SLACK)
    )
    out: list[tuple[str, bool]] = []
    for job_id, held in db_session.execute(stmt).all():
        if len(out) >= limit:
            break
        if not claims.try_claim(db_session, job_id):
            continue  # another worker's
        # Read after the claim: a worker that computed it and let go has committed by now.
        if db_session.scalar(select(Job.dirty).where(Job.job_id == job_id)):
            out.append((job_id, bool(held)))
    return out


def claim_dirty_job(*, db_session: Session, now: float | None = None) -> tuple[str, bool] | None:
    """claim_dirty_jobs for one job: (job_id, was_quarantined), or None when none is free."""
    claims = claim_dirty_jobs(db_session=db_session, limit=1, now=now)
    return claims[0] if claims else None


def recompute_claimed(
    *,
    db_session: Session,
    settings: Settings | None = None,
    limit: int | None = None,
    now: float | None = None,
    should_stop: Callable[[], bool] | None = None,
    batch: int = CLAIM_BATCH,
) -> int:
    """Claim and recompute dirty jobs, a batch per transaction, until none is free (Postgres).

    Any number of processes may run this at once: each job's claim goes to one of them.
    A batch that fails is rolled back (its jobs stay dirty) and redone one job per transaction,
    so only the failing job is quarantined. Returns how many jobs had events.
    """
    custom = custom_phases_for(db_session=db_session, settings=settings)
    db_session.commit()
    done = tried = 0
    while limit is None or tried < limit:
        if should_stop is not None and should_stop():
            break
        size = batch if limit is None else max(1, min(batch, limit - tried))
        bound_lock_waits(db_session, _lock_timeout(settings))
        claims = claim_dirty_jobs(db_session=db_session, limit=size, now=now)
        if not claims:
            db_session.commit()
            break
        ids = [job_id for job_id, _held in claims]
        tried += len(ids)
        try:
            computed = recompute_jobs(
                db_session=db_session,
                job_ids=ids,
                settings=settings,
                now=now,
                custom_phases=custom,
                claimed=True,
            )
            quarantine.release(db_session=db_session, job_ids=[j for j, held in claims if held])
            db_session.commit()
            done += computed
        except Exception:  # noqa: BLE001 - find the bad job, compute the others
            db_session.rollback()
            done += recompute_isolated(
                db_session=db_session, job_ids=ids, settings=settings, now=now
            )
    return done


def recompute_dirty(
    *,
    db_session: Session,
    settings: Settings | None = None,
    limit: int | None = None,
    now: float | None = None,
    should_stop: Callable[[], bool] | None = None,
) -> int:
    """Drain dirty jobs, committing after each; a job that fails is quarantined. Returns the count.

    On Postgres each job is claimed with an advisory lock (safe with any number of workers); SQLite
    has one writer at a time and drains the list of marks it reads.
    """
    if db_session.get_bind().dialect.name == "postgresql":
        return recompute_claimed(
            db_session=db_session,
            settings=settings,
            limit=limit,
            now=now,
            should_stop=should_stop,
        )
    job_ids = dirty_job_ids(db_session=db_session, limit=limit, now=now)
    db_session.commit()
    if not job_ids:
        return 0
    return recompute_isolated(db_session=db_session, job_ids=job_ids, settings=settings, now=now)


def mark_stale_open_jobs(
    *, db_session: Session, older_than_s: float = OPEN_JOB_REFRESH_S, now: float | None = None
) -> int:
    """Mark open jobs whose provisional answer is older than `older_than_s` for recompute."""
    now = time.time() if now is None else now
    stale = select(JobResult.job_id).where(
        JobResult.provisional.is_(True), JobResult.computed_at < now - older_than_s
    )
    result = db_session.execute(
        update(Job)
        .where(Job.job_id.in_(stale), Job.dirty.is_(False))
        .values(dirty=True)
        .execution_options(synchronize_session=False)
    )
    return int(result.rowcount or 0)


def all_job_ids(*, db_session: Session) -> list[str]:
    """Every job with a row in jobs or events in raw_events."""
    known = set(db_session.scalars(select(Job.job_id)))
    orphans = job_ids_with_events(db_session=db_session) - known
    if orphans:
        log.warning("%d job ids have raw events but no jobs row; skipped", len(orphans))
    return sorted(known)


def recompute_all(
    *,
    db_session: Session,
    settings: Settings | None = None,
    job_ids: list[str] | None = None,
    progress: bool = True,
    now: float | None = None,
) -> int:
    """Rebuild every job (or the given ones) with a tqdm progress bar, committing per job."""
    from tqdm import tqdm

    ids = job_ids if job_ids is not None else all_job_ids(db_session=db_session)
    held = quarantine.quarantined(db_session=db_session, job_ids=ids)
    db_session.commit()
    custom = custom_phases_for(db_session=db_session, settings=settings)
    done = 0
    busy: list[str] = []
    for job_id in tqdm(ids, desc="recompute", unit="job", disable=not progress):
        try:
            result = recompute_job(
                db_session=db_session,
                job_id=job_id,
                settings=settings,
                now=now,
                custom_phases=custom,
                incremental=False,
            )
        except DBAPIError as err:
            if not is_lock_timeout(err):
                raise
            # Held past ETT_LOCK_TIMEOUT_S by a worker's recompute (which stores it) or an
            # ingest (which marks it for the worker): either way it is recomputed.
            db_session.rollback()
            busy.append(job_id)
            continue
        if job_id in held:
            quarantine.release(db_session=db_session, job_ids=[job_id])
        db_session.commit()
        if result is not None:
            done += 1
    if busy:
        log.warning(
            "%d jobs were locked by another transaction and left to it: %s",
            len(busy),
            ", ".join(busy[:10]),
        )
    return done


def count_dirty(*, db_session: Session) -> int:
    """How many jobs wait for recompute."""
    stmt = select(func.count()).select_from(Job).where(Job.dirty.is_(True))
    return int(db_session.scalar(stmt) or 0)


class RecomputeWorker(PeriodicWorker):
    """Drains dirty jobs every interval and refreshes open jobs' provisional answers."""

    name = "recompute"

    def __init__(
        self,
        database: Database,
        settings: Settings | None = None,
        *,
        interval_s: float | None = None,
        batch: int = 200,
        open_refresh_s: float = OPEN_JOB_REFRESH_S,
    ) -> None:
        super().__init__(
            interval_s=(
                interval_s
                if interval_s is not None
                else (settings.recompute_interval_s if settings else 1.0)
            )
        )
        self.database = database
        self.settings = settings
        self.batch = batch
        self.open_refresh_s = open_refresh_s
        self._last_open_refresh = 0.0
        self.recomputed = 0

    def tick(self) -> int:
        """One drain: refresh stale open jobs when due, then recompute dirty jobs in batches."""
        total = 0
        with self.database.session() as s:
            now = time.time()
            if now - self._last_open_refresh >= self.open_refresh_s:
                mark_stale_open_jobs(db_session=s, older_than_s=self.open_refresh_s, now=now)
                s.commit()
                self._last_open_refresh = now
            while not self.stopping:
                n = recompute_dirty(
                    db_session=s,
                    settings=self.settings,
                    limit=self.batch,
                    should_stop=lambda: self.stopping,
                )
                total += n
                if n < self.batch:
                    break
        self.recomputed += total
        return total


def make_recompute_worker(settings: Settings, database: Database) -> RecomputeWorker:
    """The recompute worker of the roles that recompute (the composition root starts it)."""
    return RecomputeWorker(database, settings)
