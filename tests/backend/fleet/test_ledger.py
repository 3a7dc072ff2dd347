"""The metrics ledger: booked once at the first final store, corrections after, reopen kept."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest
from sqlalchemy import select, update

from backend.db import Database
from backend.ett.models import JobResult
from backend.fleet.ledger import book_jobs
from backend.fleet.models import GPU_SECONDS, FleetJobDay, LedgerEntry
from backend.fleet.rollups import rebuild_rollups
from tests.backend.exporter import small_fleet


def ledger(db: Database, job_id: str) -> dict[tuple[str, str], tuple[float, float, float]]:
    """(component, phase) -> (booked, added, removed) of one job's GPU-second rows."""
    with db.session() as s:
        rows = s.execute(
            select(
                LedgerEntry.key1,
                LedgerEntry.key2,
                LedgerEntry.booked,
                LedgerEntry.added,
                LedgerEntry.removed,
            ).where(LedgerEntry.job_id == job_id, LedgerEntry.series == GPU_SECONDS)
        )
        return {(c, p): (b, a, r) for c, p, b, a, r in rows}


@pytest.fixture
def booked(post: Callable[[list[dict[str, Any]]], Any], database: Database) -> float:
    """Job a-1 finished and booked; returns its base time."""
    t = time.time() - 3000
    assert post(small_fleet.finished_a(t).events).status_code == 200
    return t


def test_first_final_store_books_the_whole_job(booked: float, database: Database) -> None:
    """The booking is the job's GPU-seconds by (component, phase), no corrections."""
    rows = ledger(database, "a-1")
    assert sum(b for b, _a, _r in rows.values()) == pytest.approx(8 * 1360)
    assert rows[("effective_training", "")] == (pytest.approx(8 * 970), 0.0, 0.0)
    assert all(a == 0 and r == 0 for _b, a, r in rows.values())


def test_an_open_job_is_not_booked(
    post: Callable[[list[dict[str, Any]]], Any], database: Database
) -> None:
    """A provisional result books nothing."""
    post(small_fleet.live(time.time() - 300).events)
    assert ledger(database, "live-1") == {}


def test_a_reopened_job_keeps_its_booking_until_final_again(
    booked: float, database: Database
) -> None:
    """While provisional its changed rows are not booked; once final only the difference is."""
    before = ledger(database, "a-1")
    with database.session() as s:
        s.execute(update(JobResult).where(JobResult.job_id == "a-1").values(provisional=True))
        # A job run across midnight UTC has one row per day; each gains 80 GPU-seconds.
        days = s.execute(
            update(FleetJobDay)
            .where(FleetJobDay.job_id == "a-1", FleetJobDay.component == "effective_training")
            .values(gpu_s=FleetJobDay.gpu_s + 80.0)
        ).rowcount
        book_jobs(db_session=s, job_ids=["a-1"])
        s.commit()
    assert days >= 1
    assert ledger(database, "a-1") == before
    with database.session() as s:
        s.execute(update(JobResult).where(JobResult.job_id == "a-1").values(provisional=False))
        book_jobs(db_session=s, job_ids=["a-1"])
        book_jobs(db_session=s, job_ids=["a-1"])  # idempotent: nothing new to book
        s.commit()
    after = ledger(database, "a-1")
    eff = ("effective_training", "")
    assert after[eff] == (before[eff][0], pytest.approx(80.0 * days), 0.0)
    assert {k: v for k, v in after.items() if k != eff} == {
        k: v for k, v in before.items() if k != eff
    }


def test_a_rollup_rebuild_books_no_correction(booked: float, database: Database) -> None:
    """Rebuilding the fleet tables from the same results leaves the ledger as it was."""
    before = ledger(database, "a-1")
    with database.session() as s:
        rebuild_rollups(db_session=s)
        s.commit()
    assert ledger(database, "a-1") == before
