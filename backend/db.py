"""Engine, sessions and the declarative base; dialect differences live here."""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

from sqlalchemy import JSON, Engine, MetaData, create_engine, event, text
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.exc import DBAPIError, DisconnectionError, OperationalError
from sqlalchemy.orm import DeclarativeBase, Session, sessionmaker

NAMING = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}

# JSON everywhere, JSONB on Postgres.
JSONType = JSON().with_variant(postgresql.JSONB(), "postgresql")


class Base(DeclarativeBase):
    """Declarative base shared by every domain's tables."""

    metadata = MetaData(naming_convention=NAMING)


# How long a SQLite statement waits for the write lock before "database is locked".
SQLITE_BUSY_TIMEOUT_MS = 30_000


def _sqlite_engine(url: str, *, read_only: bool, **kwargs: Any) -> Engine:
    """A SQLite engine in WAL mode: writers take the lock up front, readers never take it."""
    engine = create_engine(url, connect_args={"check_same_thread": False, "timeout": 30}, **kwargs)

    @event.listens_for(engine, "connect")
    def _sqlite_pragmas(dbapi_conn: Any, _record: Any) -> None:
        # Let SQLAlchemy emit BEGIN itself (pysqlite's own transaction handling is off).
        dbapi_conn.isolation_level = None
        cur = dbapi_conn.cursor()
        cur.execute("PRAGMA foreign_keys=ON")
        cur.execute("PRAGMA journal_mode=WAL")
        cur.execute("PRAGMA synchronous=NORMAL")
        cur.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_MS}")
        if read_only:
            cur.execute("PRAGMA query_only=ON")
        cur.close()

    @event.listens_for(engine, "begin")
    def _sqlite_begin(conn: Any) -> None:
        # A writer takes the write lock up front: a deferred transaction that later writes
        # fails at once with "database is locked" when another writer is active. A reader
        # begins deferred: in WAL mode it reads a snapshot and blocks nobody, nor waits.
        conn.exec_driver_sql("BEGIN" if read_only else "BEGIN IMMEDIATE")

    return engine


# The pool's defaults: how long a request waits for a free connection before it is answered
# 503 (ETT_DB_POOL_TIMEOUT_S), and how long a server session may sit idle inside a transaction
# before the server ends it and releases its locks (ETT_IDLE_IN_TRANSACTION_TIMEOUT_S).
POOL_TIMEOUT_S = 5.0
IDLE_IN_TRANSACTION_TIMEOUT_S = 120.0


def make_engine(
    url: str,
    *,
    read_only: bool = False,
    pool_timeout_s: float = POOL_TIMEOUT_S,
    idle_in_transaction_timeout_s: float = IDLE_IN_TRANSACTION_TIMEOUT_S,
    **kwargs: Any,
) -> Engine:
    """Create an engine with the right options for SQLite or a server database.

    read_only (SQLite): sessions that can only read and never take the write lock.
    pool_timeout_s, idle_in_transaction_timeout_s (Postgres; 0 = no bound): the longest wait
    for a pooled connection, and the longest a session may idle in an open transaction (a
    frozen process's locks are released after it).
    """
    if url.startswith("sqlite"):
        path = url.split("///", 1)[-1]
        if path and path != ":memory:":
            Path(path).expanduser().parent.mkdir(parents=True, exist_ok=True)
        return _sqlite_engine(url, read_only=read_only, **kwargs)
    if idle_in_transaction_timeout_s > 0:
        ms = max(1, round(idle_in_transaction_timeout_s * 1000))
        options = f"-c idle_in_transaction_session_timeout={ms}"
        kwargs["connect_args"] = {"options": options, **kwargs.get("connect_args", {})}
    engine = create_engine(
        url,
        pool_size=10,
        max_overflow=20,
        pool_timeout=pool_timeout_s if pool_timeout_s > 0 else None,
        **kwargs,
    )
    _ping_after_idle(engine)
    return engine


# A pooled connection back in the pool for longer than this is pinged before it is handed out.
PING_AFTER_IDLE_S = 1.0
_IDLE_SINCE = "ett_idle_since"


def _ping_after_idle(engine: Engine) -> None:
    """SQLAlchemy's pre-ping, for connections that sat idle: one that went back into the pool
    within PING_AFTER_IDLE_S worked then, and is handed out without a ping.

    A ping per checkout cost two round trips of each ingest request (its token read and its
    transaction). A connection the server dropped (a restart, a proxy's idle timeout) is found
    by the ping after an idle spell, as before; one dropped within that moment fails its
    request, whose error invalidates the pool like any disconnect.
    """

    @event.listens_for(engine, "connect")
    def _fresh(_dbapi_conn: Any, record: Any) -> None:
        record.info[_IDLE_SINCE] = time.monotonic()

    @event.listens_for(engine, "checkin")
    def _back(_dbapi_conn: Any, record: Any) -> None:
        if record is not None:
            record.info[_IDLE_SINCE] = time.monotonic()

    @event.listens_for(engine, "checkout")
    def _ping(dbapi_conn: Any, record: Any, _proxy: Any) -> None:
        since = record.info.get(_IDLE_SINCE)
        if since is not None and time.monotonic() - since < PING_AFTER_IDLE_S:
            return
        try:
            engine.dialect.do_ping(dbapi_conn)  # the pre-ping's own statement (autocommit)
        except engine.dialect.loaded_dbapi.Error as err:
            # The pool drops this connection and hands out a new one (up to three tries).
            raise DisconnectionError(str(err)) from err


T = TypeVar("T")

# Postgres SQLSTATEs of transactions worth running again: serialization failure, deadlock.
RETRYABLE_SQLSTATES = frozenset({"40001", "40P01"})


def is_retryable(err: BaseException) -> bool:
    """True for a transaction that failed only because of concurrency (run it again)."""
    orig = getattr(err, "orig", None)
    if getattr(orig, "sqlstate", None) in RETRYABLE_SQLSTATES:
        return True
    return isinstance(err, OperationalError) and "database is locked" in str(err)


# Postgres SQLSTATE 55P03 (lock_not_available): a lock wait outlasted lock_timeout.
LOCK_TIMEOUT_SQLSTATE = "55P03"
# The longest a transaction waits for one row lock by default (ETT_LOCK_TIMEOUT_S).
LOCK_TIMEOUT_S = 2.0


def is_lock_timeout(err: BaseException) -> bool:
    """True for a statement that gave up waiting for a lock (bound_lock_waits); retry later."""
    return getattr(getattr(err, "orig", None), "sqlstate", None) == LOCK_TIMEOUT_SQLSTATE


def bound_lock_waits(db_session: Session, seconds: float | None = LOCK_TIMEOUT_S) -> None:
    """Make every lock wait of the current transaction give up after `seconds` (Postgres).

    A wait that runs out raises an error with SQLSTATE 55P03 (is_lock_timeout). SET LOCAL ends
    with the transaction: call it at the start of each one (again after a rollback). SQLite
    has one writer at a time and its own busy timeout: a no-op there. None or 0: no bound.
    """
    if not seconds or seconds <= 0 or db_session.get_bind().dialect.name != "postgresql":
        return
    db_session.execute(text(f"SET LOCAL lock_timeout = {max(1, round(seconds * 1000))}"))


def describe_error(err: BaseException, limit: int = 1_000) -> str:
    """A short, one-line account of a failure (never a whole SQL statement and its parameters)."""
    cause = getattr(err, "orig", None) or err
    first = (str(cause).strip().splitlines() or [""])[0]
    return f"{type(cause).__name__}: {first}"[:limit]


def with_retries(db_session: Session, work: Callable[[], T], *, retries: int = 5) -> T:
    """Run work() and commit; on a deadlock or serialization failure roll back and run it again.

    At most `retries` reruns, with jittered exponential backoff; any other error rolls back
    and is raised at once, as is the last concurrency failure. A connection lost while work()
    ran (the server dropped it: nothing was committed) is rerun at once on a new one; one lost
    during the commit is raised, since the commit may have happened.
    """
    for attempt in range(retries + 1):
        committing = False
        try:
            out = work()
            committing = True
            db_session.commit()
            return out
        except DBAPIError as err:
            db_session.rollback()
            lost = err.connection_invalidated and not committing
            if not (lost or is_retryable(err)) or attempt == retries:
                raise
            if not lost:
                time.sleep(min(0.5, 0.01 * 2**attempt) * (0.5 + random.random()))
        except BaseException:
            db_session.rollback()
            raise
    raise AssertionError("unreachable")


def insert_for(session_or_engine: Session | Engine, table: Any) -> Any:
    """A dialect-specific INSERT that supports ON CONFLICT (Postgres and SQLite share the API)."""
    bind = (
        session_or_engine.get_bind()
        if isinstance(session_or_engine, Session)
        else session_or_engine
    )
    if bind.dialect.name == "postgresql":
        return postgresql.insert(table)
    return sqlite.insert(table)


class Database:
    """One engine plus its session factory; the app and the CLI each hold one."""

    def __init__(self, url: str, **engine_kwargs: Any) -> None:
        """engine_kwargs go to make_engine (pool_timeout_s, idle_in_transaction_timeout_s, ...)."""
        self.url = url
        self.engine = make_engine(url, **engine_kwargs)
        self.sessionmaker = sessionmaker(self.engine, expire_on_commit=False)
        # Reads: on SQLite a second engine whose sessions are read-only and never lock (WAL);
        # on Postgres readers never block writers anyway (MVCC), so they share the engine.
        is_file = url.startswith("sqlite") and ":memory:" not in url and url != "sqlite://"
        self.read_engine = make_engine(url, read_only=True, **engine_kwargs) if is_file else None
        self.read_sessionmaker = (
            sessionmaker(self.read_engine, expire_on_commit=False)
            if self.read_engine is not None
            else self.sessionmaker
        )

    @property
    def dialect(self) -> str:
        """'postgresql' or 'sqlite'."""
        return self.engine.dialect.name

    def session(self) -> Session:
        """A new session; use it as a context manager."""
        return self.sessionmaker()

    def read_session(self) -> Session:
        """A new session for reads only: on SQLite it cannot write and takes no lock."""
        return self.read_sessionmaker()

    def sessions(self) -> Iterator[Session]:
        """Yield one session and close it afterwards (for FastAPI dependencies)."""
        with self.sessionmaker() as s:
            yield s

    def read_sessions(self) -> Iterator[Session]:
        """Yield one read-only session and close it afterwards (GET requests)."""
        with self.read_sessionmaker() as s:
            yield s

    def dispose(self) -> None:
        """Close every pooled connection."""
        self.engine.dispose()
        if self.read_engine is not None:
            self.read_engine.dispose()
