"""Shared fixtures: a migrated database per dialect (SQLite and Postgres), an app, tokens.

ETT_TEST_DIALECTS picks the dialects (default: both); ETT_TEST_PG_URL is the Postgres server
(default: postgresql://postgres@127.0.0.1:5432/postgres). Postgres being down fails the run.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import create_engine, text

from backend import migrate
from backend.config import Settings
from backend.db import Database
from backend.registry import metadata

DIALECTS = [d.strip() for d in os.environ.get("ETT_TEST_DIALECTS", "sqlite,postgresql").split(",")]
PG_ADMIN_URL = os.environ.get(
    "ETT_TEST_PG_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"
)


@contextmanager
def database_at(dialect: str, tmp_path: Path, revision: str) -> Iterator[str]:
    """A fresh database of `dialect` migrated to `revision` only (for migration tests); its URL."""
    if dialect == "sqlite":
        url = f"sqlite:///{tmp_path / f'at-{revision}.db'}"
        migrate.upgrade(url, revision)
        yield url
        return
    name = f"ett_at_{os.getpid()}_{uuid.uuid4().hex[:6]}"
    admin = create_engine(PG_ADMIN_URL, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    url = PG_ADMIN_URL.rsplit("/", 1)[0] + "/" + name
    try:
        migrate.upgrade(url, revision)
        yield url
    finally:
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


class _Databases:
    """Creates one migrated database per dialect, lazily, and drops them at the end."""

    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.dbs: dict[str, Database] = {}
        self.pg_name: str | None = None

    def get(self, dialect: str) -> Database:
        if dialect not in self.dbs:
            url = self._create(dialect)
            migrate.upgrade(url)
            self.dbs[dialect] = Database(url)
        return self.dbs[dialect]

    def _create(self, dialect: str) -> str:
        if dialect == "sqlite":
            return f"sqlite:///{self.tmp / 'ett-test.db'}"
        if dialect == "postgresql":
            self.pg_name = f"ett_test_{os.getpid()}_{uuid.uuid4().hex[:6]}"
            admin = create_engine(PG_ADMIN_URL, isolation_level="AUTOCOMMIT")
            with admin.connect() as conn:
                conn.execute(text(f'CREATE DATABASE "{self.pg_name}"'))
            admin.dispose()
            return PG_ADMIN_URL.rsplit("/", 1)[0] + "/" + self.pg_name
        raise ValueError(f"unknown dialect {dialect!r} in ETT_TEST_DIALECTS")

    def close(self) -> None:
        for db in self.dbs.values():
            db.dispose()
        if self.pg_name:
            admin = create_engine(PG_ADMIN_URL, isolation_level="AUTOCOMMIT")
            with admin.connect() as conn:
                conn.execute(text(f'DROP DATABASE IF EXISTS "{self.pg_name}" WITH (FORCE)'))
            admin.dispose()


@pytest.fixture(scope="session")
def _databases(tmp_path_factory: pytest.TempPathFactory) -> Iterator[_Databases]:
    dbs = _Databases(tmp_path_factory.mktemp("db"))
    yield dbs
    dbs.close()


def empty_database(db: Database) -> None:
    """Delete every row (the schema stays), children first."""
    tables = [t for t in reversed(metadata.sorted_tables) if t.name != "alembic_version"]
    with db.engine.begin() as conn:
        if db.dialect == "postgresql":
            names = ", ".join(f'"{t.name}"' for t in tables)
            conn.execute(text(f"TRUNCATE {names} RESTART IDENTITY CASCADE"))
        else:
            for t in tables:
                conn.execute(t.delete())


@pytest.fixture(params=DIALECTS)
def database(request: pytest.FixtureRequest, _databases: _Databases) -> Database:
    """A migrated, empty database; each test using it runs once per dialect."""
    db = _databases.get(request.param)
    empty_database(db)
    return db


@pytest.fixture
def settings(database: Database, tmp_path: Path) -> Settings:
    """Settings on the test database; recompute inline so reads see ingested events at once."""
    return Settings(home=tmp_path, database_url=database.url, recompute_mode="inline")


@pytest.fixture
def app(settings: Settings, database: Database) -> Any:
    """The FastAPI app without background workers."""
    from backend.app import create_app

    return create_app(settings, database=database, start_workers=False, with_dashboard=False)


@pytest.fixture
def client(app: Any) -> Iterator[TestClient]:
    """An HTTP client for the app."""
    with TestClient(app) as c:
        yield c


@pytest.fixture
def make_token(database: Database) -> Callable[..., str]:
    """Create a token: make_token(scope='ingest', models=None, name=None) -> secret."""
    from backend.auth import service

    def make(
        scope: str = "ingest", models: list[str] | None = None, name: str | None = None
    ) -> str:
        with database.session() as s:
            _, secret = service.create(
                db_session=s,
                name=name or f"{scope}-{uuid.uuid4().hex[:8]}",
                scope=scope,
                models=models,
            )
        return secret

    return make


@pytest.fixture
def ingest_token(make_token: Callable[..., str]) -> str:
    """An unrestricted ingest token."""
    return make_token("ingest")


@pytest.fixture
def admin_token(make_token: Callable[..., str]) -> str:
    """An admin token."""
    return make_token("admin")


def post_events(client: TestClient, token: str, events: list[dict[str, Any]]) -> Any:
    """POST a batch and return the response."""
    return client.post(
        "/api/v1/events", json={"events": events}, headers={"Authorization": f"Bearer {token}"}
    )


@pytest.fixture
def post(client: TestClient, ingest_token: str) -> Callable[[list[dict[str, Any]]], Any]:
    """post(events) with the ingest token; asserts nothing, returns the response."""
    return lambda events: post_events(client, ingest_token, events)
