"""Benchmark helpers: a scratch Postgres database, migrated, dropped afterwards."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from contextlib import contextmanager

from sqlalchemy import create_engine, text

from backend import migrate

PG_ADMIN_URL = os.environ.get(
    "ETT_BENCH_PG_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"
)


@contextmanager
def kept_postgres(name: str) -> Iterator[tuple[str, bool]]:
    """Yield (URL, created) of database `name`, created and migrated if absent; never dropped."""
    admin = create_engine(PG_ADMIN_URL, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        exists = conn.execute(
            text("SELECT 1 FROM pg_database WHERE datname = :n"), {"n": name}
        ).first()
        if not exists:
            conn.execute(text(f'CREATE DATABASE "{name}"'))
    admin.dispose()
    url = PG_ADMIN_URL.rsplit("/", 1)[0] + "/" + name
    migrate.upgrade(url)
    yield url, not exists


@contextmanager
def scratch_postgres(prefix: str = "ett_bench") -> Iterator[str]:
    """Yield the URL of a new, migrated Postgres database; drop it afterwards."""
    name = f"{prefix}_{uuid.uuid4().hex[:8]}"
    admin = create_engine(PG_ADMIN_URL, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    url = PG_ADMIN_URL.rsplit("/", 1)[0] + "/" + name
    try:
        migrate.upgrade(url)
        yield url
    finally:
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()
