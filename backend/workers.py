"""One abstraction for the periodic loops (recompute, alert evaluation, delivery).

A PeriodicWorker is a named daemon thread that runs `tick()` every `interval_s` until stopped.
A tick that raises is logged and counted (ett_worker_passes_total{outcome="error"}), never
raised into the host; `stop()` sets the stop event, wakes the thread, joins it and then calls
`on_stop()` (to hand back a lease, for example). `wake()` runs the next tick now.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

from backend.health import WORKER_LAST_SUCCESS, WORKER_PASSES

log = logging.getLogger("ett.workers")


class PeriodicWorker:
    """Run `tick()` every `interval_s` seconds on a daemon thread until `stop()`."""

    #: The worker's name in logs, the thread name (ett-<name>) and the health metric's label.
    name = "worker"

    def __init__(self, *, interval_s: float, name: str | None = None) -> None:
        if name is not None:
            self.name = name
        self.interval_s = float(interval_s)
        self.passes = 0
        self.errors = 0
        self.last_success_at: float | None = None
        self._stop_event = threading.Event()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        WORKER_PASSES.labels(self.name, "ok")
        WORKER_PASSES.labels(self.name, "error")

    # -- what a worker does ------------------------------------------------------------------

    def tick(self) -> Any:
        """One pass of the loop's work (subclasses implement it)."""
        raise NotImplementedError

    def on_stop(self) -> None:
        """Called once after the thread has stopped (subclasses may release what they hold)."""

    # -- lifecycle ---------------------------------------------------------------------------

    @property
    def stopping(self) -> bool:
        """True once stop() was asked: long ticks check it between units of work."""
        return self._stop_event.is_set()

    def is_alive(self) -> bool:
        """True while the thread runs."""
        return self._thread is not None and self._thread.is_alive()

    def start(self) -> None:
        """Start the thread (idempotent)."""
        if self.is_alive():
            return
        self._stop_event.clear()
        self._thread = threading.Thread(target=self._run, name=f"ett-{self.name}", daemon=True)
        self._thread.start()

    def wake(self) -> None:
        """Run the next pass now rather than at the next tick (never blocks)."""
        self._wake.set()

    def request_stop(self) -> None:
        """Ask the thread to finish its pass, without waiting (stop() waits)."""
        self._stop_event.set()
        self._wake.set()

    def stop(self, timeout: float = 10.0) -> None:
        """Ask the thread to finish its pass, wait for it up to `timeout` s, then on_stop()."""
        self.request_stop()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)
            if thread.is_alive():
                log.warning("%s worker did not stop within %.0f s", self.name, timeout)
        self._thread = None
        try:
            self.on_stop()
        except Exception:  # noqa: BLE001 - shutdown goes on
            log.exception("%s worker: on_stop failed", self.name)

    def run_once(self) -> Any:
        """One pass with the worker's error handling: returns tick()'s answer, None on error."""
        try:
            out = self.tick()
        except Exception:  # noqa: BLE001 - the worker must survive database hiccups
            self.errors += 1
            WORKER_PASSES.labels(self.name, "error").inc()
            log.exception("%s worker pass failed", self.name)
            return None
        self.passes += 1
        self.last_success_at = time.time()
        WORKER_PASSES.labels(self.name, "ok").inc()
        WORKER_LAST_SUCCESS.labels(self.name).set(self.last_success_at)
        return out

    def _run(self) -> None:
        while not self._stop_event.is_set():
            self.run_once()
            self._wake.wait(self.interval_s)
            self._wake.clear()
