"""Migration 0005 (event key per job) upgrades a database that holds events, on both dialects."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.exc import IntegrityError

from backend import migrate
from tests.conftest import DIALECTS, database_at


@pytest.fixture(params=DIALECTS)
def url_at_0004(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A fresh database migrated to 0004 only."""
    with database_at(request.param, tmp_path, "0004") as url:
        yield url


INSERT = text(
    "INSERT INTO raw_events (event_id, job_id, type, attempt, ts, received_at, payload) "
    "VALUES (:e, :j, 'heartbeat', 0, :ts, 1.0, :p)"
)


def test_upgrade_keeps_events_and_keys_them_per_job(url_at_0004: str) -> None:
    engine = create_engine(url_at_0004)
    rows = [
        {"e": f"e{i}", "j": f"job-{i % 3}", "ts": float(i), "p": '{"type": "heartbeat"}'}
        for i in range(30)
    ]
    with engine.begin() as conn:
        conn.execute(INSERT, rows)
        with pytest.raises(IntegrityError), conn.begin_nested():  # before: ids are global
            conn.execute(INSERT, {"e": "e0", "j": "other", "ts": 0.0, "p": "{}"})
    engine.dispose()
    migrate.upgrade(url_at_0004, "0010")  # 0011 adds job_month to the key (test_prune.py)
    engine = create_engine(url_at_0004)
    with engine.begin() as conn:
        kept = conn.execute(text("SELECT event_id, job_id, ts FROM raw_events ORDER BY ts"))
        assert [(e, j, ts) for e, j, ts in kept] == [(r["e"], r["j"], r["ts"]) for r in rows]
        conn.execute(INSERT, {"e": "e0", "j": "other", "ts": 0.0, "p": "{}"})  # now allowed
        with pytest.raises(IntegrityError), conn.begin_nested():
            conn.execute(INSERT, {"e": "e0", "j": "job-0", "ts": 0.0, "p": "{}"})
    migrate.upgrade(url_at_0004)
    assert migrate.check_schema(engine) == set(migrate.head_revisions())
    engine.dispose()
