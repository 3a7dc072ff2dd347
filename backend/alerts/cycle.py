"""One alerting cycle: take the lease, sync the SLO file, evaluate, send, refresh Alertmanager.

Exactly-once notices rest on three database guards, so they hold across restarts and replicas:
the evaluator lease (backend.alerts.lease), optimistic versions on alert states
(backend.alerts.evaluation) and a unique (fingerprint, episode, kind) per notice.
"""

from __future__ import annotations

import time

from backend.alerts.alertmanager import refresh_alertmanager
from backend.alerts.delivery import RetryPolicy
from backend.alerts.dispatch import DELIVERY_LOG_RETENTION_S, dispatch_pending, purge_deliveries
from backend.alerts.evaluation import EvaluationReport, evaluate_slos
from backend.alerts.lease import acquire_lease, default_holder, release_lease
from backend.alerts.store import slo_file_for, sync_from_file
from backend.config import Settings
from backend.db import Database


def evaluate_once(
    *,
    db: Database,
    settings: Settings,
    holder: str | None = None,
    now: float | None = None,
    policy: RetryPolicy | None = None,
    lease_ttl_s: float | None = None,
    sync_file: bool = True,
    release: bool = False,
) -> EvaluationReport:
    """One pass: take the lease, sync the SLO file, evaluate, then send the queued notices."""
    holder = holder or default_holder()
    now = time.time() if now is None else now
    ttl = lease_ttl_s if lease_ttl_s is not None else max(30.0, 3 * settings.alert_eval_interval_s)
    report = EvaluationReport(evaluated=False, holder=holder)
    with db.session() as s:
        if not acquire_lease(db_session=s, holder=holder, ttl_s=ttl, now=time.time()):
            return report
        if sync_file:
            sync_from_file(db_session=s, slo_file=slo_file_for(settings), now=now)
            s.commit()
        evaluate_slos(db_session=s, settings=settings, now=now, report=report)
        purge_deliveries(db_session=s, older_than=time.time() - DELIVERY_LOG_RETENTION_S)
        s.commit()
    report.evaluated = True
    try:
        dispatch_pending(db=db, settings=settings, holder=holder, policy=policy, report=report)
        refresh_alertmanager(db=db, settings=settings, now=now, policy=policy)
    finally:
        if release:
            with db.session() as s:
                release_lease(db_session=s, holder=holder)
    return report
