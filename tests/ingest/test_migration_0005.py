"""Migration 0005 (event key per job) upgrades a database that holds events, on both dialects."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.exc import IntegrityError

from backend import migrate
from tests.conftest import DIALECTS, PG_ADMIN_URL


@pytest.fixture(params=DIALECTS)
def url_at_0004(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A fresh database migrated to 0004 only."""
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path / 'm5.db'}"
        migrate.upgrade(url, "0004")
        yield url
        return
    name = f"ett_m5_{os.getpid()}_{uuid.uuid4().hex[:6]}"
    admin = create_engine(PG_ADMIN_URL, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    url = PG_ADMIN_URL.rsplit("/", 1)[0] + "/" + name
    try:
        migrate.upgrade(url, "0004")
        yield url
    finally:
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


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
    migrate.upgrade(url_at_0004)
    engine = create_engine(url_at_0004)
    with engine.begin() as conn:
        kept = conn.execute(text("SELECT event_id, job_id, ts FROM raw_events ORDER BY ts"))
        assert [(e, j, ts) for e, j, ts in kept] == [(r["e"], r["j"], r["ts"]) for r in rows]
        conn.execute(INSERT, {"e": "e0", "j": "other", "ts": 0.0, "p": "{}"})  # now allowed
        with pytest.raises(IntegrityError), conn.begin_nested():
            conn.execute(INSERT, {"e": "e0", "j": "job-0", "ts": 0.0, "p": "{}"})
    assert migrate.check_schema(engine) == set(migrate.head_revisions())
    engine.dispose()
