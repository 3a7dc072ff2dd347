"""The ORM models and the migrations describe the same schema; a stale schema is refused."""

from __future__ import annotations

from pathlib import Path

import pytest
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext

from backend import migrate
from backend.config import Settings
from backend.db import Database
from backend.events.retention import include_name
from backend.registry import metadata


def test_orm_and_migrations_do_not_drift(database: Database) -> None:
    with database.engine.connect() as conn:
        ctx = MigrationContext.configure(
            conn, opts={"compare_type": True, "include_name": include_name}
        )
        diff = compare_metadata(ctx, metadata)
    assert diff == [], f"ORM models and migrations differ; write a migration: {diff}"


def test_single_head_chain() -> None:
    assert len(migrate.head_revisions()) == 1


def test_stale_schema_refused_with_the_fixing_command(tmp_path: Path) -> None:
    from backend.app import create_app

    url = f"sqlite:///{tmp_path / 'old.db'}"
    migrate.upgrade(url, "0001")
    with pytest.raises(migrate.SchemaOutOfDate, match="ett db upgrade"):
        create_app(Settings(home=tmp_path, database_url=url), start_workers=False)
    migrate.upgrade(url)
    db = Database(url)
    assert migrate.check_schema(db.engine) == set(migrate.head_revisions())
    db.dispose()


def test_postgres_url_normalized_to_psycopg3() -> None:
    s = Settings(database_url="postgresql://u@127.0.0.1:5432/x")
    assert s.database_url == "postgresql+psycopg://u@127.0.0.1:5432/x"
    assert Settings(home=Path("/tmp/h")).database_url == "sqlite:////tmp/h/ett.db"
