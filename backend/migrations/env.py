"""Alembic environment: runs on SQLite (batch mode) and Postgres."""

from __future__ import annotations

from logging.config import fileConfig

from alembic import context
from sqlalchemy import Connection

from backend.config import get_settings, normalize_database_url
from backend.db import make_engine
from backend.events.retention import include_name
from backend.registry import metadata

config = context.config
if config.config_file_name is not None:
    fileConfig(config.config_file_name)


def _url() -> str:
    url = config.get_main_option("sqlalchemy.url")
    return normalize_database_url(url) if url else get_settings().database_url


def run_migrations_offline() -> None:
    """Emit SQL without a connection."""
    context.configure(
        url=_url(),
        target_metadata=metadata,
        literal_binds=True,
        render_as_batch=True,
        compare_type=True,
        include_name=include_name,
    )
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    """Run against a live connection."""
    engine = make_engine(_url())
    with engine.connect() as conn:
        _run(conn)
    engine.dispose()


def _run(connection: Connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=metadata,
        render_as_batch=True,
        compare_type=True,
        include_name=include_name,
    )
    with context.begin_transaction():
        context.run_migrations()


if context.is_offline_mode():
    run_migrations_offline()
else:
    run_migrations_online()
