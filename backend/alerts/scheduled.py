"""The periodic alert evaluator: a daemon thread that runs one pass every interval."""

from __future__ import annotations

import logging
import threading

from backend.alerts import cycle, evaluation, lease
from backend.config import Settings
from backend.db import Database

log = logging.getLogger(__name__)


class AlertEvaluator:
    """Runs cycle.evaluate_once every settings.alert_eval_interval_s until stopped."""

    def __init__(self, settings: Settings, db: Database, holder: str | None = None) -> None:
        self.settings = settings
        self.db = db
        self.holder = holder or lease.default_holder()
        self.passes = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        """Start the background thread (idempotent)."""
        if self._thread is not None and self._thread.is_alive():
            return
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="ett-alert-evaluator", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 10.0) -> None:
        """Ask the thread to stop, wait for it, and hand the lease to the next replica."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
            self._thread = None
        try:
            with self.db.session() as s:
                lease.release_lease(db_session=s, holder=self.holder)
        except Exception:
            log.exception("could not release the alert evaluator lease")

    def run_once(self) -> evaluation.EvaluationReport | None:
        """One pass; every error is logged, never raised into the host."""
        try:
            report = cycle.evaluate_once(db=self.db, settings=self.settings, holder=self.holder)
        except Exception:
            log.exception("alert evaluation pass failed")
            return None
        self.passes += 1
        for fp, old, new in report.transitions:
            log.info("alert %s: %s -> %s", fp, old, new)
        return report

    def _run(self) -> None:
        interval = max(1.0, float(self.settings.alert_eval_interval_s))
        while not self._stop.is_set():
            self.run_once()
            self._stop.wait(interval)


def make_alert_evaluator(settings: Settings, db: Database) -> AlertEvaluator | None:
    """The evaluator the app lifespan starts (None when alerts are turned off)."""
    if not settings.alerts_enabled:
        return None
    return AlertEvaluator(settings, db)
