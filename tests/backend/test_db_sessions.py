"""Readers never wait (issue 12 defect 10): GET requests use read-only sessions; on SQLite they
begin deferred in WAL mode, so an open write transaction (the recompute loop) blocks no reader."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
from sqlalchemy import insert, select, text
from sqlalchemy.exc import OperationalError

from backend.jobs.models import Model


def _timed_get(client: Any, path: str, out: dict[str, Any]) -> None:
    t = time.monotonic()
    out["status"] = client.get(path).status_code
    out["s"] = time.monotonic() - t


def test_reader_not_blocked_by_open_write_transaction(client, database) -> None:
    """With a writer's transaction open (and holding the SQLite write lock), reads answer at once."""
    with database.engine.connect() as writer:
        tx = writer.begin()
        writer.execute(insert(Model).values(name="m-w", owner=None, labels={}, created_at=1.0))
        out: dict[str, Any] = {}
        reader = threading.Thread(target=_timed_get, args=(client, "/api/v1/jobs", out))
        reader.start()
        reader.join(10)
        alive = reader.is_alive()
        tx.rollback()
    reader.join(40)
    assert not alive, "the GET waited for the open write transaction"
    assert out["status"] == 200 and out["s"] < 5.0, out


def test_readers_do_not_block_each_other(database) -> None:
    """Two read sessions with open transactions read side by side."""
    with database.read_session() as a, database.read_session() as b:
        a.execute(select(Model)).all()  # a's transaction is open now
        t = time.monotonic()
        b.execute(select(Model)).all()
        assert time.monotonic() - t < 1.0


def test_read_session_cannot_write(database) -> None:
    if database.dialect != "sqlite":
        pytest.skip("Postgres readers are plain sessions: MVCC never blocks them")
    with database.read_session() as s, pytest.raises(OperationalError, match="readonly"):
        s.execute(text("INSERT INTO models (name, labels, created_at) VALUES ('x', '{}', 1)"))


def test_sqlite_is_in_wal_mode(database) -> None:
    if database.dialect != "sqlite":
        pytest.skip("SQLite only")
    with database.read_session() as s:
        assert s.execute(text("PRAGMA journal_mode")).scalar() == "wal"
