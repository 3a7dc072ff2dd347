"""The bounds worker: learn the bounds again from the jobs that finished, under its own lease."""

from __future__ import annotations

import logging
import time
from typing import Any

from backend.alerts.lease import acquire_lease, default_holder, release_lease
from backend.config import Settings
from backend.db import Database
from backend.live import learn
from backend.workers import PeriodicWorker

log = logging.getLogger("ett.live")

BOUNDS_LEASE = "bounds-learner"


def learn_once(
    *, db: Database, settings: Settings, holder: str, now: float | None = None
) -> dict[str, Any] | None:
    """One learning pass if this holder gets the lease (None when another replica has it)."""
    wall = time.time()
    ttl = max(60.0, 3 * settings.bounds_refresh_interval_s)
    with db.session() as s:
        if not acquire_lease(db_session=s, holder=holder, ttl_s=ttl, now=wall, name=BOUNDS_LEASE):
            return None
        done = learn.refresh(s, settings, now=wall if now is None else now)
        s.commit()
    return done


class BoundsWorker(PeriodicWorker):
    """Runs learn_once every settings.bounds_refresh_interval_s until stopped."""

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
    """The bounds worker of the roles that run workers."""
    return BoundsWorker(settings, db)
