"""Send demo events through the real ingest path: in-process (ingest.service) or over HTTP.

Nothing here writes a derived table: events go through `ingest_batch` (validation, dedupe,
raw_events) or `POST /api/v1/events`, and the ETT engine's own recompute fills job_results.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from itertools import islice
from typing import Any

import httpx

from backend.config import Settings
from backend.db import Database
from backend.demo import progress as bars
from backend.demo.simulator import Event

MAX_BATCH = 10_000
RECOMPUTE_CHUNK = 200


@dataclass
class LoadReport:
    """What a load did: events sent and how ingest answered, jobs recomputed, seconds taken."""

    sent: int = 0
    accepted: int = 0
    duplicates: int = 0
    rejected: list[dict[str, Any]] = field(default_factory=list)
    jobs: int = 0
    ingest_s: float = 0.0
    recompute_s: float = 0.0

    @property
    def events_per_s(self) -> float:
        """End-to-end throughput: events sent per second of ingest plus recompute."""
        total = self.ingest_s + self.recompute_s
        return self.sent / total if total > 0 else 0.0


def batches(events: Iterable[Event], size: int = MAX_BATCH) -> Iterator[list[Event]]:
    """Consecutive batches of at most `size` events (the wire limit is 10,000)."""
    if not 1 <= size <= MAX_BATCH:
        raise ValueError(f"batch size must be 1..{MAX_BATCH}, got {size}")
    it = iter(events)
    while batch := list(islice(it, size)):
        yield batch


DEMO_AUTHOR = "demo"


def store_annotations(database: Database, notes: Iterable[dict[str, Any]]) -> int:
    """Replace the demo's annotations (created_by "demo") with `notes`; answers how many."""
    from sqlalchemy import delete

    from backend.annotations import service as annotations_service
    from backend.annotations.models import Annotation

    n = 0
    with database.session() as s:
        s.execute(delete(Annotation).where(Annotation.created_by == DEMO_AUTHOR))
        for note in notes:
            annotations_service.create(db_session=s, created_by=DEMO_AUTHOR, **note)
            n += 1
        s.commit()
    return n


def history_instants(start: float, now: float, *, daily_days: int = 14) -> list[float]:
    """Where SLO history is taken: each day end of the last `daily_days` days, weeks before."""
    from backend.fleet.days import DAY_S, day_start

    out: list[float] = []
    t = day_start(now)
    while t > start:
        out.append(t)
        t -= DAY_S if now - t < daily_days * DAY_S else 7 * DAY_S
    return sorted(out)


DEMO_ONCALL = "demo-oncall"


class DemoOnCall:
    """The demo's on-call, between the replay's passes: silences the first alert that goes
    pending (before it fires) and acknowledges the first other one that fires, through the real
    silence and acknowledgement services, at the evaluator's clock."""

    def __init__(self, settings: Settings, database: Database | None = None) -> None:
        self.max_silence_s = settings.silence_max_duration_s
        self.silenced: str | None = None
        self.silenced_fired = False
        self.acknowledged: str | None = None
        if database is not None:
            # A resumed load: what the on-call already did stays done.
            from sqlalchemy import select

            from backend.alerts.models import Acknowledgement, Silence

            with database.session() as s:
                if s.scalar(select(Silence.id).where(Silence.created_by == DEMO_ONCALL).limit(1)):
                    self.silenced, self.silenced_fired = "(before)", True
                if s.scalar(
                    select(Acknowledgement.fingerprint)
                    .where(Acknowledgement.acknowledged_by == DEMO_ONCALL)
                    .limit(1)
                ):
                    self.acknowledged = "(before)"

    def __call__(self, db_session: Any, now: float, report: Any) -> None:
        """React to one pass's transitions."""
        from backend.alerts import acks, silences
        from backend.alerts.models import AlertState

        for fp, _old, new in report.transitions:
            state = db_session.get(AlertState, fp)
            if state is None:
                continue
            if fp == self.silenced and new == "firing":
                self.silenced_fired = True
            elif fp == self.silenced and new == "inactive" and not self.silenced_fired:
                # It went back inside before firing: no episode shows the silence, so the
                # on-call silences the next alert that goes pending (this silence stays).
                self.silenced = None
            if new == "pending" and self.silenced is None:
                silences.create_silence(
                    db_session=db_session,
                    owner=state.owner,
                    component=state.component,
                    model=state.model,
                    starts_at=now,
                    ends_at=now + min(7 * 86400.0, self.max_silence_s),
                    comment="demo: planned maintenance, the on-call knows; no page needed",
                    created_by=DEMO_ONCALL,
                    max_duration_s=self.max_silence_s,
                    now=now,
                )
                self.silenced = fp
            elif new == "firing" and self.acknowledged is None and fp != self.silenced:
                acks.acknowledge(
                    db_session=db_session,
                    fingerprint=fp,
                    acknowledged_by=DEMO_ONCALL,
                    comment="looking into it",
                    now=now + 600.0,
                )
                self.acknowledged = fp


def backfill_slo_history(
    database: Database, settings: Settings, start: float, now: float, *, progress: bool = True
) -> int:
    """The shipped SLOs (synced from their file) measured over the fleet's past, the alert
    evaluator replayed over it (DemoOnCall acting between passes), the notices sent; answers
    the history points stored."""
    from backend.alerts import dispatch, replay, store

    instants = history_instants(start, now)
    with database.session() as s:
        store.sync_from_file(db_session=s, slo_file=store.slo_file_for(settings), now=now)
        s.commit()
        with bars.bar(len(instants), "SLOs and alerts", "instant", enabled=progress) as bar:
            report = replay.replay(
                db_session=s,
                settings=settings,
                instants=instants,
                on_pass=DemoOnCall(settings, database),
                on_instant=lambda _at: bar.update(1),
            )
    dispatch.dispatch_pending(db=database, settings=settings, holder=replay.REPLAY_HOLDER)
    return report.points


def load_in_process(
    database: Database,
    settings: Settings,
    events: Iterable[Event],
    *,
    total_events: int | None = None,
    batch_size: int = MAX_BATCH,
    recompute: bool = True,
    now: float | None = None,
    progress: bool = True,
) -> LoadReport:
    """Ingest events with ingest.service.ingest_batch, then recompute the touched jobs."""
    from ingest.service import ingest_batch

    report = LoadReport()
    touched: set[str] = set()
    started = time.perf_counter()
    with bars.bar(total_events, "ingest", "ev", enabled=progress) as bar:
        for batch in batches(events, batch_size):
            with database.session() as s:
                result = ingest_batch(db_session=s, events=batch, token=None)
                s.commit()
            report.sent += len(batch)
            report.accepted += result.accepted
            report.duplicates += result.duplicates
            report.rejected.extend(result.rejected)
            touched.update(result.job_ids)
            bar.update(len(batch))
    report.ingest_s = time.perf_counter() - started
    if recompute:
        from backend.results.recompute import dirty_job_ids

        started = time.perf_counter()
        # Jobs an interrupted earlier load stored but never accounted are still marked dirty.
        with database.session() as s:
            touched.update(dirty_job_ids(db_session=s))
        report.jobs = recompute_jobs(
            database, settings, sorted(touched), now=now, progress=progress
        )
        report.recompute_s = time.perf_counter() - started
    return report


def recompute_jobs(
    database: Database,
    settings: Settings,
    job_ids: list[str],
    *,
    now: float | None = None,
    progress: bool = True,
) -> int:
    """Run the ETT engine's recompute over the given jobs, in chunks, with a progress bar."""
    from backend.results import recompute

    with bars.bar(len(job_ids), "ETT%", "job", enabled=progress) as bar:
        for i in range(0, len(job_ids), RECOMPUTE_CHUNK):
            chunk = job_ids[i : i + RECOMPUTE_CHUNK]
            with database.session() as s:
                recompute.recompute_jobs(db_session=s, job_ids=chunk, settings=settings, now=now)
                s.commit()
            bar.update(len(chunk))
    return len(job_ids)


class IngestRefused(RuntimeError):
    """The server answered a batch with an error status."""


def send_over_http(
    url: str,
    token: str,
    events: Iterable[Event],
    *,
    total_events: int | None = None,
    batch_size: int = MAX_BATCH,
    client: httpx.Client | None = None,
    progress: bool = True,
    timeout_s: float = 120.0,
) -> LoadReport:
    """POST events to `url`/api/v1/events in batches; the server recomputes as it ingests."""
    own = client is None
    http = client or httpx.Client(base_url=url.rstrip("/"), timeout=timeout_s)
    report = LoadReport()
    started = time.perf_counter()
    try:
        with bars.bar(total_events, "send", "ev", enabled=progress) as bar:
            for batch in batches(events, batch_size):
                answer = http.post(
                    "/api/v1/events",
                    json={"events": batch},
                    headers={"Authorization": f"Bearer {token}"},
                )
                if answer.status_code != 200:
                    raise IngestRefused(
                        f"POST /api/v1/events answered {answer.status_code}: {answer.text[:500]}"
                    )
                body = answer.json()
                report.sent += len(batch)
                report.accepted += body["accepted"]
                report.duplicates += body["duplicates"]
                report.rejected.extend(body["rejected"])
                bar.update(len(batch))
    finally:
        if own:
            http.close()
    report.ingest_s = time.perf_counter() - started
    return report
