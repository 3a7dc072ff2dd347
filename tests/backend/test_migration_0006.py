"""Migration 0006 on both databases: token columns, and stored absurd silences made readable."""

from __future__ import annotations

import math
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text

from backend import migrate
from tests.conftest import DIALECTS, database_at

START = 1_800_000_000.0


@pytest.fixture(params=DIALECTS)
def old_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A database migrated to 0004 only (before tokens expired and silences had rules)."""
    with database_at(request.param, tmp_path, "0004") as url:
        yield url


def test_0006_adds_token_times_and_tidies_absurd_silences(old_url: str) -> None:
    engine = create_engine(old_url)
    ends = {"huge": 1e18, "inf": math.inf, "fine": START + 3600}
    if engine.dialect.name == "postgresql":
        ends["nan"] = math.nan
    with engine.begin() as conn:
        for comment, end in ends.items():
            conn.execute(
                text(
                    "INSERT INTO alert_silences (owner, starts_at, ends_at, comment, created_by,"
                    " created_at) VALUES ('scheduler', :s, :e, :c, 'api', :s)"
                ),
                {"s": START, "e": end, "c": comment},
            )
        conn.execute(
            text(
                "INSERT INTO alert_silences (owner, starts_at, ends_at, comment, created_by,"
                " created_at) VALUES ('x', :s, :e, '  ', 'api', :s)"
            ),
            {"s": START, "e": START + 60},
        )
    engine.dispose()
    migrate.upgrade(old_url, "0006")
    engine = create_engine(old_url)
    with engine.connect() as conn:
        rows = dict(conn.execute(text("SELECT comment, ends_at FROM alert_silences")).all())
        cols = conn.execute(text("SELECT expires_at, revoked_at FROM api_tokens")).all()
    engine.dispose()
    assert cols == []  # the columns exist
    assert rows["huge"] == rows["inf"] == START + 30 * 86400
    assert rows["fine"] == START + 3600
    assert rows["(no comment given)"] == START + 60
    if "nan" in ends:
        assert rows["nan"] == START
