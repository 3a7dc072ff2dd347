"""Keep the demo fleet alive while it is served: its running jobs go on sending events.

Every tick, each unfinished job of the fleet (and each job due to start within the horizon)
sends what its agent would have sent by then, through ingest.service like any agent's batch;
ingest drops what was sent before (same event ids) and the app's recompute worker does the rest.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from dataclasses import asdict
from pathlib import Path

from backend.db import Database
from backend.demo.fleet import DAY, FleetSpec, plans
from backend.demo.loader import batches
from backend.demo.simulator import Event, JobPlan, cut_at, job_events

log = logging.getLogger("ett.demo")

SPEC_FILE = "demo-fleet.json"


def save_spec(
    home: Path, spec: FleetSpec, *, database_url: str = "", complete: bool = True
) -> Path:
    """Remember which fleet a database holds (and whether its load finished)."""
    home.mkdir(parents=True, exist_ok=True)
    path = home / SPEC_FILE
    state = {"spec": asdict(spec), "database_url": database_url, "complete": complete}
    path.write_text(json.dumps(state, indent=2) + "\n")
    return path


def read_state(home: Path, database_url: str = "") -> tuple[FleetSpec, bool] | None:
    """The fleet a previous `ett demo` loaded into this database, and whether it finished."""
    path = home / SPEC_FILE
    try:
        state = json.loads(path.read_text())
        if state["database_url"] != database_url:
            return None
        return FleetSpec(**state["spec"]), bool(state["complete"])
    except (OSError, ValueError, TypeError, KeyError):
        return None


def read_spec(home: Path, database_url: str = "") -> FleetSpec | None:
    """The fleet a previous `ett demo` loaded into this database, if it left a description."""
    state = read_state(home, database_url)
    return state[0] if state else None


class LiveFeed(threading.Thread):
    """Named daemon thread that sends the fleet's newly due events every `interval_s`."""

    def __init__(
        self,
        database: Database,
        spec: FleetSpec,
        *,
        interval_s: float = 30.0,
        horizon_s: float = 2 * DAY,
    ) -> None:
        super().__init__(name="ett-demo-feed", daemon=True)
        self.database = database
        self.spec = spec
        self.interval_s = interval_s
        self._stop_event = threading.Event()
        self._jobs: dict[str, tuple[JobPlan, list[Event]]] = {}
        for plan in plans(spec, until=spec.now + horizon_s):
            events = job_events(plan)
            if events[-1]["ts"] > spec.now:  # the job_ended comes last
                self._jobs[plan.job_id] = (plan, events)
        self.sent = 0

    @property
    def pending_jobs(self) -> int:
        """Jobs that have not ended yet (or not started)."""
        return len(self._jobs)

    def due(self, now: float) -> list[Event]:
        """Every event the unfinished jobs have produced by `now` (ingest drops repeats)."""
        out: list[Event] = []
        for job_id, (plan, events) in list(self._jobs.items()):
            if plan.submitted_at > now:
                continue
            sent = cut_at(events, now)
            out.extend(sent)
            if sent and sent[-1]["type"] == "job_ended":
                del self._jobs[job_id]
        return out

    def tick(self, now: float | None = None) -> int:
        """Send what is due now through ingest; returns how many events were new."""
        from ingest.service import ingest_batch

        events = self.due(time.time() if now is None else now)
        accepted = 0
        for batch in batches(events):
            with self.database.session() as s:
                accepted += ingest_batch(db_session=s, events=batch, token=None).accepted
                s.commit()
        self.sent += accepted
        return accepted

    def stop(self, timeout: float = 5.0) -> None:
        """Ask the thread to finish and wait for it up to `timeout` seconds."""
        self._stop_event.set()
        if self.is_alive() and threading.current_thread() is not self:
            self.join(timeout)

    def run(self) -> None:
        """Thread body: a failed tick is logged and retried at the next one."""
        while not self._stop_event.is_set():
            try:
                self.tick()
            except Exception:  # noqa: BLE001 - the demo server must outlive a failed tick
                log.exception("demo live feed tick failed")
            self._stop_event.wait(self.interval_s)
