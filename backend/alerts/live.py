"""The live pass: page a hang within a minute of its bound, under its own lease.

Every ETT_LIVE_EVAL_INTERVAL_S (default 10 s) one replica (lease "live-evaluator") reads the
open jobs' live states (backend/live/service.py: stored results and learned bounds, no raw
event), steps the alert instances of the live indicators (one per job and SLO) through the same
state machine and outbox as every other alert, and sends what it queued at once. A bound is
crossed at an instant the stored facts already say (a span's start plus its bound), so a pass
sees it without waiting for a recompute: a notice goes out at most one interval plus one
delivery after the crossing. The bounds it judges by are learned by the bounds worker below
(lease "bounds-learner", backend/live/learn.py).

Instances resolve when their job moves on (the condition no longer holds) or ends.
"""

from __future__ import annotations

import fnmatch
import logging
import time
from typing import Any

from backend.alerts.alertmanager import refresh_alertmanager
from backend.alerts.content import Evaluation
from backend.alerts.delivery import RetryPolicy
from backend.alerts.dispatch import dispatch_pending
from backend.alerts.evaluation import EvaluationReport, advance
from backend.alerts.lease import acquire_lease, default_holder, release_lease
from backend.alerts.slos import ANY_COMPONENT, LIVE_INDICATORS, SloSpec
from backend.alerts.store import list_slos, slo_file_for, sync_from_file
from backend.config import Settings
from backend.db import Database
from backend.live import learn
from backend.live.service import LiveJob, live_jobs
from backend.workers import PeriodicWorker

log = logging.getLogger(__name__)

LIVE_LEASE = "live-evaluator"


def _matches(slo: SloSpec, job: LiveJob, phase: str | None, component: str | None) -> bool:
    if slo.model and (
        job.state.model is None or not fnmatch.fnmatchcase(job.state.model, slo.model)
    ):
        return False
    if slo.labels and any(str(job.labels.get(k)) != v for k, v in slo.labels.items()):
        return False
    if slo.component != ANY_COMPONENT and component != slo.component:
        return False
    if not slo.phase:
        return True
    return phase is not None and (phase == slo.phase or phase.startswith(slo.phase + "."))


def measure_live(slo: SloSpec, jobs: list[LiveJob]) -> list[Evaluation]:
    """One evaluation per job whose detection of this SLO's kind holds; value = overrun (s)."""
    kind = LIVE_INDICATORS[slo.indicator]
    out = []
    for job in jobs:
        for d in job.state.detections:
            if d.kind != kind or not _matches(slo, job, d.phase, d.component):
                continue
            out.append(
                Evaluation(
                    value=d.overrun_s,
                    jobs=1,
                    model=job.state.model,
                    job_drivers=[
                        {"job_id": job.state.job_id, "model": job.state.model, "value": d.overrun_s}
                    ],
                    key=job.state.job_id,
                    # the phase's owner (mapping) for a hang in a phase, else the SLO's
                    owner=d.detail.get("owner") if kind == "hung" else slo.owner,
                    component=d.component or (ANY_COMPONENT if kind != "hung" else None),
                    phase=d.phase,
                    extra={
                        "state": d.state,
                        "since": d.since,
                        "started_at": d.started_at,
                        "bound_s": d.bound_s,
                        "bound_source": d.bound_source,
                        "bound_samples": d.bound_samples,
                        "lost_gpu_h": d.lost_gpu_h,
                        "lost_gpu_h_per_h": d.lost_gpu_h_per_h,
                        "gpus": job.state.gpus,
                        "attempt": d.attempt,
                        "team": job.team,
                        "detail": {k: v for k, v in d.detail.items() if k != "owner"},
                    },
                )
            )
            break
    return out


def live_owners(specs: list[SloSpec]) -> dict[str, str]:
    """Who the non-phase detections page: each live SLO's owner (`loop` for the hang SLO's)."""
    out: dict[str, str] = {}
    for slo in specs:
        kind = LIVE_INDICATORS[slo.indicator]
        out["loop" if kind == "hung" else kind] = slo.owner
    return out


def evaluate_live(
    *,
    db_session: Any,
    settings: Settings,
    now: float,
    report: EvaluationReport,
    jobs: list[LiveJob] | None = None,
) -> list[LiveJob]:
    """Step every live SLO's instances against the open jobs' live states (lease held)."""
    specs = [s for s in list_slos(db_session=db_session) if s.enabled and s.is_live]
    report.slos = len(specs)
    if jobs is None:
        jobs = live_jobs(db_session, settings, now, owners=live_owners(specs)) if specs else []
    db_session.commit()
    advance(
        db_session, settings, specs, lambda slo: measure_live(slo, jobs), now, report, live=True
    )
    return jobs


class LivePass:
    """State kept between passes of one process: when the SLO file was last synced."""

    def __init__(self) -> None:
        self.synced_at = float("-inf")


def evaluate_live_once(
    *,
    db: Database,
    settings: Settings,
    holder: str | None = None,
    now: float | None = None,
    policy: RetryPolicy | None = None,
    lease_ttl_s: float | None = None,
    passes: LivePass | None = None,
    release: bool = False,
) -> EvaluationReport:
    """One live pass: lease, the SLO file's sync when due, evaluate, send."""
    holder = holder or default_holder()
    passes = passes or LivePass()
    wall = time.time()
    now = wall if now is None else now
    ttl = lease_ttl_s if lease_ttl_s is not None else max(30.0, 3 * settings.live_eval_interval_s)
    report = EvaluationReport(evaluated=False, holder=holder)
    with db.session() as s:
        if not acquire_lease(db_session=s, holder=holder, ttl_s=ttl, now=wall, name=LIVE_LEASE):
            return report
        if wall - passes.synced_at >= settings.alert_eval_interval_s:
            sync_from_file(db_session=s, slo_file=slo_file_for(settings), now=now)
            s.commit()
            passes.synced_at = wall
        evaluate_live(db_session=s, settings=settings, now=now, report=report)
        s.commit()
    report.evaluated = True
    try:
        if report.queued:
            dispatch_pending(db=db, settings=settings, holder=holder, policy=policy, report=report)
            refresh_alertmanager(db=db, settings=settings, now=now, policy=policy)
    finally:
        if release:
            with db.session() as s:
                release_lease(db_session=s, holder=holder, name=LIVE_LEASE)
    return report


class LiveEvaluator(PeriodicWorker):
    """Runs evaluate_live_once every settings.live_eval_interval_s until stopped."""

    name = "live"

    def __init__(self, settings: Settings, db: Database, holder: str | None = None) -> None:
        super().__init__(interval_s=max(0.2, float(settings.live_eval_interval_s)))
        self.settings = settings
        self.db = db
        self.holder = holder or default_holder()
        self.live_pass = LivePass()

    def tick(self) -> EvaluationReport:
        """One pass (evaluated=False when another replica holds the live lease)."""
        report = evaluate_live_once(
            db=self.db, settings=self.settings, holder=self.holder, passes=self.live_pass
        )
        for fp, old, new in report.transitions:
            log.info("live alert %s: %s -> %s", fp, old, new)
        return report

    def on_stop(self) -> None:
        """Hand the lease to the next replica at once."""
        with self.db.session() as s:
            release_lease(db_session=s, holder=self.holder, name=LIVE_LEASE)


def make_live_evaluator(settings: Settings, db: Database) -> LiveEvaluator | None:
    """The live pass of the roles that evaluate alerts (None when alerts are turned off)."""
    if not settings.alerts_enabled:
        return None
    return LiveEvaluator(settings, db)


# ---- the bounds worker: the bounds the live pass judges by ---------------------------------------

BOUNDS_LEASE = "bounds-learner"


def learn_once(
    *, db: Database, settings: Settings, holder: str, now: float | None = None
) -> dict[str, Any] | None:
    """One learning pass (backend.live.learn.refresh) if this holder gets the bounds lease."""
    wall = time.time()
    ttl = max(60.0, 3 * settings.bounds_refresh_interval_s)
    with db.session() as s:
        if not acquire_lease(db_session=s, holder=holder, ttl_s=ttl, now=wall, name=BOUNDS_LEASE):
            return None
        done = learn.refresh(s, settings, now=wall if now is None else now)
        s.commit()
    return done


class BoundsWorker(PeriodicWorker):
    """Learns the bounds again every settings.bounds_refresh_interval_s until stopped."""

    name = "bounds"

    def __init__(self, settings: Settings, db: Database, holder: str | None = None) -> None:
        super().__init__(interval_s=max(1.0, float(settings.bounds_refresh_interval_s)))
        self.settings = settings
        self.db = db
        self.holder = holder or default_holder()

    def tick(self) -> dict[str, Any] | None:
        """One pass; logs what it learned."""
        done = learn_once(db=self.db, settings=self.settings, holder=self.holder)
        if done and done["jobs"]:
            log.info("bounds: %(jobs)d jobs read, %(keys)d keys, %(bounds)d bounds", done)
        return done

    def on_stop(self) -> None:
        """Hand the lease to the next replica at once."""
        with self.db.session() as s:
            release_lease(db_session=s, holder=self.holder, name=BOUNDS_LEASE)


def make_bounds_worker(settings: Settings, db: Database) -> BoundsWorker:
    """The bounds worker of the roles that run workers (on even with alerts off: the Live page
    and /metrics judge by the bounds too)."""
    return BoundsWorker(settings, db)
