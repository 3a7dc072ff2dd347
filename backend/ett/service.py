"""Materialization: recompute jobs from raw_events into job_results, job_intervals and attempts.

Ingest marks touched jobs dirty; these functions (inline after ingest, the RecomputeWorker, or
`ett recompute`) rebuild each one from its own raw events, so rollups never re-read raw events.
A job's recompute reads its events once and costs time linear in their number.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import orjson
from sqlalchemy import Text, and_, cast, delete, func, insert, or_, select, update
from sqlalchemy.orm import Session

from backend.config import Settings
from backend.db import Database, describe_error, insert_for
from backend.ett.engine import JobETT, compute_job
from backend.ett.models import JobInterval, JobResult
from backend.exporter.health import RECOMPUTE_FAILURES
from backend.fleet.service import refresh_job_rollups
from backend.jobs import quarantine
from backend.jobs.models import Attempt, Job, Model
from ingest.models import RawEvent

log = logging.getLogger("ett.recompute")

# Open (provisional) jobs end "now": their stored answer is refreshed at least this often.
OPEN_JOB_REFRESH_S = 60.0
_INSERT_CHUNK = 5_000


def load_events(*, db_session: Session, job_id: str) -> list[dict[str, Any]]:
    """One job's normalized raw events, in storage order."""
    # Fetched as text and parsed with orjson: several times faster than the drivers' json.loads.
    stmt = (
        select(cast(RawEvent.payload, Text)).where(RawEvent.job_id == job_id).order_by(RawEvent.id)
    )
    loads = orjson.loads
    return [loads(text) for text in db_session.scalars(stmt)]


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
    if custom_phases is None:
        custom_phases = custom_phases_for(db_session=db_session, settings=settings)
    return compute_job(
        events,
        now=time.time() if now is None else now,
        heartbeat_timeout_s=settings.heartbeat_timeout_s if settings else 300.0,
        abandon_timeout_s=settings.abandon_timeout_s if settings else 3600.0,
        custom_phases=custom_phases,
    )


def _lock_job(db_session: Session, job_id: str, *, skip_locked: bool) -> bool:
    """Take the job row's write lock for this transaction; False if absent (or busy, skipping)."""
    if db_session.get_bind().dialect.name == "postgresql":
        stmt = (
            select(Job.job_id).where(Job.job_id == job_id).with_for_update(skip_locked=skip_locked)
        )
        return db_session.execute(stmt).first() is not None
    # SQLite: a write first takes the database lock now, not at a later (stale-snapshot) upgrade.
    result = db_session.execute(update(Job).where(Job.job_id == job_id).values(dirty=Job.dirty))
    return bool(result.rowcount)


def _ensure_model(db_session: Session, name: str) -> None:
    stmt = insert_for(db_session, Model.__table__).values(
        name=name, owner=None, labels={}, created_at=time.time()
    )
    db_session.execute(stmt.on_conflict_do_nothing(index_elements=["name"]))


def _chunks(rows: list[dict[str, Any]]) -> Iterable[list[dict[str, Any]]]:
    for i in range(0, len(rows), _INSERT_CHUNK):
        yield rows[i : i + _INSERT_CHUNK]


def store(*, db_session: Session, job_id: str, result: JobETT | None) -> None:
    """Replace the job's job_results, job_intervals and attempts rows and its derived fields."""
    db_session.execute(delete(JobInterval).where(JobInterval.job_id == job_id))
    db_session.execute(delete(JobResult).where(JobResult.job_id == job_id))
    db_session.execute(delete(Attempt).where(Attempt.job_id == job_id))
    if result is None:
        return
    db_session.execute(
        insert(JobResult).values(
            job_id=job_id,
            computed_at=time.time(),
            model=result.model,
            gpus=result.gpus,
            status=(result.status or "unknown")[:16],
            provisional=result.provisional,
            submitted_at=result.submitted_at,
            ended_at=result.ended_at,
            e2e_s=result.e2e_s,
            effective_s=result.effective_s,
            ett_pct=result.ett_pct,
            gpu_hours_lost=result.gpu_hours_lost,
            nof=result.l1.nof,
            tts_s=result.l1.tts_s,
            recovery_s=result.l1.recovery_s,
            result=result.to_dict(with_intervals=False),
        )
    )
    rows = [
        {
            "job_id": job_id,
            "attempt": iv.attempt,
            "start": iv.start,
            "end": iv.end,
            "component": iv.component,
            "phase": iv.phase,
        }
        for iv in result.intervals
    ]
    # Core inserts: the ORM bulk path splits batches wherever a row's None columns differ.
    for chunk in _chunks(rows):
        db_session.execute(insert(JobInterval.__table__), chunk)
    attempts = [{"job_id": job_id, **a.to_dict()} for a in result.attempts]
    if attempts:
        db_session.execute(insert(Attempt.__table__), attempts)
    derived: dict[str, Any] = {
        "gpus": result.gpus,
        "labels": result.labels,
        "config": result.config,
        "submitted_at": result.submitted_at,
        "ended_at": None if result.provisional else result.ended_at,
        "status": None if result.status is None else result.status[:16],
    }
    if result.model is not None:
        _ensure_model(db_session, result.model)
        derived["model"] = result.model
    db_session.execute(update(Job).where(Job.job_id == job_id).values(**derived))


def recompute_job(
    *,
    db_session: Session,
    job_id: str,
    settings: Settings | None = None,
    now: float | None = None,
    custom_phases: Mapping[str, str] | None = None,
    skip_locked: bool = False,
    refresh_rollups: bool = True,
) -> JobETT | None:
    """Recompute and store one job (the caller commits); None if the job is unknown or busy.

    With refresh_rollups=False the caller refreshes the fleet rollups itself, in the same
    transaction (once for a batch).
    """
    if not _lock_job(db_session, job_id, skip_locked=skip_locked):
        return None
    seen, pruned = db_session.execute(
        select(Job.updated_at, Job.raw_pruned_at).where(Job.job_id == job_id)
    ).one_or_none() or (None, None)
    if pruned is not None:
        # Its raw events were pruned (`ett db prune`): the stored result is all there is.
        db_session.execute(update(Job).where(Job.job_id == job_id).values(dirty=False))
        return None
    result = compute(
        db_session=db_session,
        job_id=job_id,
        settings=settings,
        now=now,
        custom_phases=custom_phases,
    )
    store(db_session=db_session, job_id=job_id, result=result)
    if refresh_rollups:
        refresh_job_rollups(db_session=db_session, job_ids=[job_id])
    # Cleared only if no ingest re-marked the job since we read its events.
    db_session.execute(
        update(Job).where(Job.job_id == job_id, Job.updated_at == seen).values(dirty=False)
    )
    return result


def recompute_jobs(
    *,
    db_session: Session,
    job_ids: Iterable[str],
    settings: Settings | None = None,
    now: float | None = None,
) -> int:
    """Recompute these jobs in the caller's transaction (the caller commits); returns how many had events."""
    custom = custom_phases_for(db_session=db_session, settings=settings)
    ids = sorted(set(job_ids))
    done = 0
    for job_id in ids:
        result = recompute_job(
            db_session=db_session,
            job_id=job_id,
            settings=settings,
            now=now,
            custom_phases=custom,
            refresh_rollups=False,
        )
        if result is not None:
            done += 1
    # One rollup refresh for the batch (an unknown job id has no fleet rows: a no-op for it).
    refresh_job_rollups(db_session=db_session, job_ids=ids)
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


def recompute_dirty(
    *,
    db_session: Session,
    settings: Settings | None = None,
    limit: int | None = None,
    now: float | None = None,
) -> int:
    """Drain dirty jobs, committing after each; a job that fails is quarantined. Returns the count."""
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
    orphans = set(db_session.scalars(select(RawEvent.job_id).distinct())) - known
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
    for job_id in tqdm(ids, desc="recompute", unit="job", disable=not progress):
        result = recompute_job(
            db_session=db_session, job_id=job_id, settings=settings, now=now, custom_phases=custom
        )
        if job_id in held:
            quarantine.release(db_session=db_session, job_ids=[job_id])
        db_session.commit()
        if result is not None:
            done += 1
    return done


def count_dirty(*, db_session: Session) -> int:
    """How many jobs wait for recompute."""
    stmt = select(func.count()).select_from(Job).where(Job.dirty.is_(True))
    return int(db_session.scalar(stmt) or 0)


class RecomputeWorker(threading.Thread):
    """Named daemon thread: drains dirty jobs every interval and refreshes open jobs' answers."""

    def __init__(
        self,
        database: Database,
        settings: Settings | None = None,
        *,
        interval_s: float | None = None,
        batch: int = 200,
        open_refresh_s: float = OPEN_JOB_REFRESH_S,
    ) -> None:
        super().__init__(name="ett-recompute", daemon=True)
        self.database = database
        self.settings = settings
        self.interval_s = (
            interval_s
            if interval_s is not None
            else (settings.recompute_interval_s if settings else 1.0)
        )
        self.batch = batch
        self.open_refresh_s = open_refresh_s
        self._stop_event = threading.Event()
        self._wake = threading.Event()
        self._last_open_refresh = 0.0
        self.recomputed = 0
        self.errors = 0

    def wake(self) -> None:
        """Drain now rather than at the next tick (never blocks)."""
        self._wake.set()

    def stop(self, timeout: float = 10.0) -> None:
        """Ask the thread to finish and wait for it up to `timeout` seconds."""
        self._stop_event.set()
        self._wake.set()
        if self.is_alive() and threading.current_thread() is not self:
            self.join(timeout)

    def run_once(self) -> int:
        """One drain: refresh stale open jobs when due, then recompute dirty jobs in batches."""
        total = 0
        with self.database.session() as s:
            now = time.time()
            if now - self._last_open_refresh >= self.open_refresh_s:
                mark_stale_open_jobs(db_session=s, older_than_s=self.open_refresh_s, now=now)
                s.commit()
                self._last_open_refresh = now
            while not self._stop_event.is_set():
                n = recompute_dirty(db_session=s, settings=self.settings, limit=self.batch)
                total += n
                if n < self.batch:
                    break
        return total

    def run(self) -> None:
        """Thread body: every exception is logged, never raised into the host."""
        while not self._stop_event.is_set():
            try:
                self.recomputed += self.run_once()
            except Exception:  # noqa: BLE001 - the worker must survive database hiccups
                self.errors += 1
                log.exception("recompute worker pass failed")
            self._wake.wait(self.interval_s)
            self._wake.clear()


def make_recompute_worker(settings: Settings, database: Database) -> RecomputeWorker:
    """The app lifespan's factory for the recompute worker (it starts and stops it)."""
    return RecomputeWorker(database, settings)


# -- reads ------------------------------------------------------------------------------------

SORTS: dict[str, Any] = {
    "ett_pct": JobResult.ett_pct,
    "gpu_hours_lost": JobResult.gpu_hours_lost,
    "submitted_at": JobResult.submitted_at,
    "e2e_s": JobResult.e2e_s,
}


def _format_times(doc: dict[str, Any], fmt: Callable[[float], Any]) -> dict[str, Any]:
    """A stored result (epoch floats) with its time fields passed through `fmt`."""
    out = dict(doc)
    for key in ("submitted_at", "ended_at", "live_tail_start"):
        if out.get(key) is not None:
            out[key] = fmt(out[key])
    l1 = dict(out.get("l1") or {})
    l1["failures"] = [{**f, "ts": fmt(f["ts"])} for f in l1.get("failures", [])]
    out["l1"] = l1
    out["attempts"] = [
        {
            **a,
            "started_at": fmt(a["started_at"]),
            "ended_at": None if a.get("ended_at") is None else fmt(a["ended_at"]),
        }
        for a in out.get("attempts", [])
    ]
    return out


def job_ett(
    *,
    db_session: Session,
    job_id: str,
    settings: Settings | None = None,
    fmt: Callable[[float], Any] | None = None,
    now: float | None = None,
) -> dict[str, Any] | None:
    """One job's full answer: stored when fresh, else computed live from raw events (not stored)."""
    fmt = fmt or (lambda t: t)
    job = db_session.get(Job, job_id)
    row = db_session.get(JobResult, job_id)
    if job is None and row is None:
        return None
    if row is None or row.provisional or (job is not None and job.dirty):
        result = compute(db_session=db_session, job_id=job_id, settings=settings, now=now)
        if result is None:
            return None
        return result.to_dict(time_format=fmt)
    doc = _format_times(row.result, fmt)
    ivs = db_session.execute(
        select(
            JobInterval.start,
            JobInterval.end,
            JobInterval.attempt,
            JobInterval.component,
            JobInterval.phase,
        )
        .where(JobInterval.job_id == job_id)
        .order_by(JobInterval.start)
    )
    doc["intervals"] = [
        {"start": fmt(s), "end": fmt(e), "attempt": a, "component": c, "phase": p}
        for s, e, a, c, p in ivs
    ]
    return doc


def list_jobs(
    *,
    db_session: Session,
    model: str | None = None,
    owner: str | None = None,
    labels: Mapping[str, str] | None = None,
    status: str | None = None,
    start: float | None = None,
    end: float | None = None,
    sort: str = "-submitted_at",
    limit: int = 50,
    offset: int = 0,
    search: str | None = None,
) -> tuple[list[dict[str, Any]], int]:
    """Computed jobs matching the filters (overlapping [start, end)), one page, and the total.

    `search` keeps the jobs whose id or model starts with it.
    """
    descending = sort.startswith("-")
    column = SORTS[sort.lstrip("-")]
    stmt = (
        select(JobResult, Job.labels, Model.owner)
        .join(Job, Job.job_id == JobResult.job_id)
        .outerjoin(Model, Model.name == JobResult.model)
    )
    if model is not None:
        stmt = stmt.where(JobResult.model == model)
    if status is not None:
        stmt = stmt.where(JobResult.status == status)
    if search:
        stmt = stmt.where(
            or_(
                JobResult.job_id.startswith(search, autoescape=True),
                JobResult.model.startswith(search, autoescape=True),
            )
        )
    if start is not None:
        stmt = stmt.where(JobResult.ended_at >= start)
    if end is not None:
        stmt = stmt.where(JobResult.submitted_at < end)
    for key, value in (labels or {}).items():
        stmt = stmt.where(Job.labels[key].as_string() == value)
    if owner is not None:
        stmt = stmt.where(
            or_(
                Job.labels["owner"].as_string() == owner,
                and_(Model.owner == owner, Job.labels["owner"].as_string().is_(None)),
            )
        )
    total = int(
        db_session.scalar(select(func.count()).select_from(stmt.order_by(None).subquery())) or 0
    )
    order = column.desc() if descending else column.asc()
    stmt = stmt.order_by(order, JobResult.job_id).limit(limit).offset(offset)
    rows = []
    for res, job_labels, model_owner in db_session.execute(stmt):
        rows.append(
            {
                "job_id": res.job_id,
                "model": res.model,
                "owner": (job_labels or {}).get("owner") or model_owner,
                "labels": job_labels or {},
                "gpus": res.gpus,
                "status": res.status,
                "provisional": res.provisional,
                "submitted_at": res.submitted_at,
                "ended_at": res.ended_at,
                "e2e_s": res.e2e_s,
                "effective_s": res.effective_s,
                "ett_pct": res.ett_pct,
                "gpu_hours_lost": res.gpu_hours_lost,
                "nof": res.nof,
                "tts_s": res.tts_s,
                "recovery_s": res.recovery_s,
                "computed_at": res.computed_at,
            }
        )
    return rows, total


def level1_rows(
    *,
    db_session: Session,
    start: float,
    end: float,
    model: str | None = None,
    owner: str | None = None,
    labels: Mapping[str, str] | None = None,
) -> list[tuple[float, int | None, float, float, int]]:
    """(submitted_at, gpus, tts_s, recovery_s, nof) of the jobs submitted in [start, end).

    The Level-1 columns alone (no stored result documents), for the fleet's Level-1 view.
    """
    stmt = (
        select(
            JobResult.submitted_at,
            JobResult.gpus,
            JobResult.tts_s,
            JobResult.recovery_s,
            JobResult.nof,
        )
        .join(Job, Job.job_id == JobResult.job_id)
        .where(JobResult.submitted_at >= start, JobResult.submitted_at < end)
    )
    if model is not None:
        stmt = stmt.where(JobResult.model == model)
    for key, value in (labels or {}).items():
        stmt = stmt.where(Job.labels[key].as_string() == value)
    if owner is not None:
        stmt = stmt.outerjoin(Model, Model.name == JobResult.model).where(
            or_(
                Job.labels["owner"].as_string() == owner,
                and_(Model.owner == owner, Job.labels["owner"].as_string().is_(None)),
            )
        )
    return [tuple(r) for r in db_session.execute(stmt)]  # type: ignore[misc]


def job_statuses(*, db_session: Session) -> list[str]:
    """The distinct job statuses stored (the Jobs page's status filter)."""
    return sorted(db_session.scalars(select(JobResult.status).distinct()))
