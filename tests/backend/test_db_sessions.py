"""Readers never wait (issue 12 defect 10): GET requests use read-only sessions; on SQLite they
begin deferred in WAL mode, so an open write transaction (the recompute loop) blocks no reader."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
from sqlalchemy import insert, select, text
from sqlalchemy.exc import DBAPIError, OperationalError

from backend import db as db_module
from backend.db import PING_AFTER_IDLE_S, make_engine, with_retries
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


def _backend_pid(conn: Any) -> int:
    return int(conn.exec_driver_sql("SELECT pg_backend_pid()").scalar())


def _terminate(database: Any, pid: int) -> None:
    """End a server session and wait until it is gone (the server closes it asynchronously)."""
    with database.engine.connect().execution_options(isolation_level="AUTOCOMMIT") as admin:
        admin.exec_driver_sql(f"SELECT pg_terminate_backend({pid})")
        for _ in range(250):
            if admin.exec_driver_sql(
                f"SELECT count(*) = 0 FROM pg_stat_activity WHERE pid = {pid}"
            ).scalar():
                return
            time.sleep(0.02)
    pytest.fail(f"backend {pid} still there 5 s after pg_terminate_backend")


def test_a_connection_the_server_dropped_while_idle_is_replaced_unseen(database) -> None:
    """A pooled connection idle past PING_AFTER_IDLE_S is pinged at checkout: one the server
    closed meanwhile is replaced before the caller sees it."""
    if database.dialect != "postgresql":
        pytest.skip("SQLite has no server to drop a connection")
    engine = make_engine(database.url)
    try:
        with engine.connect() as conn:
            dropped = _backend_pid(conn)
        _terminate(database, dropped)
        time.sleep(PING_AFTER_IDLE_S + 0.2)
        with engine.connect() as conn:
            assert _backend_pid(conn) != dropped
    finally:
        engine.dispose()


def test_a_connection_back_in_the_pool_a_moment_ago_is_not_pinged(database, monkeypatch) -> None:
    """Within PING_AFTER_IDLE_S of its return a connection is handed out without a ping (the
    round trip each ingest request saved): a drop in that moment reaches the caller as a
    disconnect, which invalidates the pool, and the next checkout is served fresh."""
    if database.dialect != "postgresql":
        pytest.skip("SQLite has no server to drop a connection")
    monkeypatch.setattr(db_module, "PING_AFTER_IDLE_S", 60.0)  # "a moment", on a loaded machine
    engine = make_engine(database.url)
    try:
        with engine.connect() as conn:
            dropped = _backend_pid(conn)
        _terminate(database, dropped)
        with engine.connect() as conn, pytest.raises(DBAPIError) as err:
            _backend_pid(conn)
        assert err.value.connection_invalidated
        with engine.connect() as conn:
            assert _backend_pid(conn) != dropped
    finally:
        engine.dispose()


def test_a_transaction_whose_connection_was_dropped_runs_again_on_a_new_one(
    database, monkeypatch
) -> None:
    """with_retries reruns work() whose connection the server dropped before the commit: the
    ingest request that drew a connection dropped a moment ago succeeds on a fresh one."""
    if database.dialect != "postgresql":
        pytest.skip("SQLite has no server to drop a connection")
    monkeypatch.setattr(db_module, "PING_AFTER_IDLE_S", 60.0)
    db = db_module.Database(database.url)
    try:
        with db.engine.connect() as conn:
            dropped = _backend_pid(conn)
        _terminate(database, dropped)
        pids: list[int] = []
        with db.session() as s:
            assert with_retries(s, lambda: pids.append(_backend_pid(s.connection())) or 7) == 7
        assert len(pids) == 1 and pids[0] != dropped  # the first run failed before appending
    finally:
        db.dispose()


def test_a_connection_lost_where_no_rerun_is_safe_answers_503_with_retry_after(app) -> None:
    """A disconnect that reaches the app (say, during a commit) is the client's to retry."""
    from fastapi.testclient import TestClient

    def lost() -> None:
        raise DBAPIError(
            "COMMIT", {}, OSError("server closed the connection"), connection_invalidated=True
        )

    app.add_api_route("/api/v1/_test_lost", lost, methods=["POST"])
    with TestClient(app) as client:
        r = client.post("/api/v1/_test_lost")
    assert r.status_code == 503 and r.headers["retry-after"] == "1"
    assert "connection to the database was lost" in r.json()["detail"]
