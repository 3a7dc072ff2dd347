"""The periodic alert loops: the evaluator (one pass per interval, under the database lease)
and the delivery loop (queued notices and due redeliveries between passes)."""

from __future__ import annotations

import logging

from backend.alerts import cycle, dispatch, evaluation, lease
from backend.config import Settings
from backend.db import Database
from backend.workers import PeriodicWorker

log = logging.getLogger(__name__)


class AlertEvaluator(PeriodicWorker):
    """Runs cycle.evaluate_once every settings.alert_eval_interval_s until stopped."""

    name = "alerts"

    def __init__(self, settings: Settings, db: Database, holder: str | None = None) -> None:
        super().__init__(interval_s=max(1.0, float(settings.alert_eval_interval_s)))
        self.settings = settings
        self.db = db
        self.holder = holder or lease.default_holder()

    def tick(self) -> evaluation.EvaluationReport:
        """One pass (it does nothing but return evaluated=False when another holds the lease)."""
        report = cycle.evaluate_once(db=self.db, settings=self.settings, holder=self.holder)
        for fp, old, new in report.transitions:
            log.info("alert %s: %s -> %s", fp, old, new)
        return report

    def on_stop(self) -> None:
        """Hand the lease to the next replica at once rather than at its expiry."""
        with self.db.session() as s:
            lease.release_lease(db_session=s, holder=self.holder)


class DeliveryWorker(PeriodicWorker):
    """Sends queued notices and due redeliveries every settings.alert_delivery_interval_s.

    Each notice is claimed with a conditional UPDATE, so any number of these may run at once.
    """

    name = "delivery"

    def __init__(self, settings: Settings, db: Database, holder: str | None = None) -> None:
        super().__init__(interval_s=max(0.5, float(settings.alert_delivery_interval_s)))
        self.settings = settings
        self.db = db
        self.holder = holder or lease.default_holder()

    def tick(self) -> evaluation.EvaluationReport:
        """One round of sending what is claimable now."""
        return dispatch.dispatch_pending(db=self.db, settings=self.settings, holder=self.holder)


def make_alert_evaluator(settings: Settings, db: Database) -> AlertEvaluator | None:
    """The evaluator of the roles that evaluate alerts (None when alerts are turned off)."""
    if not settings.alerts_enabled:
        return None
    return AlertEvaluator(settings, db)


def make_delivery_worker(settings: Settings, db: Database) -> DeliveryWorker | None:
    """The delivery loop of the roles that evaluate alerts (None when alerts are turned off)."""
    if not settings.alerts_enabled:
        return None
    return DeliveryWorker(settings, db)
