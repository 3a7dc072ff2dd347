"""Benchmark helpers: a migrated Postgres database, scratch (dropped afterwards) or kept."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from sqlalchemy import create_engine, text

from backend import migrate

PG_ADMIN_URL = os.environ.get(
    "ETT_BENCH_PG_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"
)


def _admin(sql: str, **params: str) -> Any:
    """Run one statement on the admin database (autocommit); its first row."""
    admin = create_engine(PG_ADMIN_URL, isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as conn:
            result = conn.execute(text(sql), params)
            return result.first() if result.returns_rows else None
    finally:
        admin.dispose()


def _migrated(name: str) -> str:
    """The URL of database `name`, migrated to the head revision."""
    url = PG_ADMIN_URL.rsplit("/", 1)[0] + "/" + name
    migrate.upgrade(url)
    return url


@contextmanager
def kept_postgres(name: str) -> Iterator[str]:
    """Yield the URL of database `name`, created if absent and migrated; never dropped."""
    if not _admin("SELECT 1 FROM pg_database WHERE datname = :n", n=name):
        _admin(f'CREATE DATABASE "{name}"')
    yield _migrated(name)


@contextmanager
def scratch_postgres(prefix: str = "ett_bench") -> Iterator[str]:
    """Yield the URL of a new, migrated Postgres database; drop it afterwards."""
    name = f"{prefix}_{uuid.uuid4().hex[:8]}"
    _admin(f'CREATE DATABASE "{name}"')
    try:
        yield _migrated(name)
    finally:
        _admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
