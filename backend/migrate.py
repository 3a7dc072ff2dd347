"""Alembic, driven from code: upgrade, and the check that refuses a stale schema."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Engine

# The Alembic scripts ship inside the server package (backend/migrations, not a top-level package).
MIGRATIONS_DIR = Path(__file__).resolve().parent / "migrations"


class SchemaOutOfDate(RuntimeError):
    """The database schema is behind the code's head revision."""


def alembic_config(url: str) -> Config:
    """An Alembic config pointing at the packaged migrations and the given database."""
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS_DIR))
    cfg.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    return cfg


def upgrade(url: str, revision: str = "head") -> None:
    """Bring the database at url up to the given revision."""
    command.upgrade(alembic_config(url), revision)


@lru_cache(maxsize=1)
def head_revisions() -> frozenset[str]:
    """The revisions the code expects (read once: the scripts do not change while running)."""
    return frozenset(ScriptDirectory(str(MIGRATIONS_DIR)).get_heads())


def current_revisions(engine: Engine) -> set[str]:
    """The revisions the database is at."""
    with engine.connect() as conn:
        return set(MigrationContext.configure(conn).get_current_heads())


def check_schema(engine: Engine) -> set[str]:
    """The database's revisions; raises SchemaOutOfDate, naming the fix, unless they are head."""
    current, head = current_revisions(engine), head_revisions()
    if current != head:
        shown = ", ".join(sorted(current)) or "empty (no tables)"
        raise SchemaOutOfDate(
            f"The database schema is at {shown} but this version of ett needs "
            f"{', '.join(sorted(head))}. Run `ett db upgrade` (or `alembic upgrade head`) "
            "against the same ETT_DATABASE_URL, then start again."
        )
    return current
