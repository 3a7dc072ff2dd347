"""`ett demo`: migrate the embedded database, load once, then serve (uvicorn replaced here)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import func, select
from typer.testing import CliRunner

from backend.cli import app
from backend.config import get_settings
from backend.db import Database
from backend.demo.live import read_spec
from backend.ett.models import JobResult
from backend.events.models import RawEvent
from backend.jobs.models import Job


@pytest.fixture
def ett_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    monkeypatch.setenv("ETT_HOME", str(tmp_path))
    monkeypatch.delenv("ETT_DATABASE_URL", raising=False)
    get_settings.cache_clear()
    yield tmp_path
    get_settings.cache_clear()


def stored_events(home: Path) -> int:
    db = Database(f"sqlite:///{home / 'ett.db'}")
    try:
        with db.session() as s:
            return int(s.scalar(select(func.count(RawEvent.event_id))) or 0)
    finally:
        db.dispose()


def test_demo_loads_an_empty_database_once(ett_home: Path):
    runner = CliRunner()
    args = ["demo", "--models", "3", "--days", "4", "--seed", "5", "--no-serve"]
    first = runner.invoke(app, args)
    assert first.exit_code == 0, first.output
    assert "0 rejected" in first.output
    stored = stored_events(ett_home)
    assert stored > 500
    assert f"sent {stored:,} events: {stored:,} stored" in first.output
    # Each long step of the load shows its bar, as lines (no terminal here), to its end.
    lines = first.output.splitlines()
    for step in ("simulate", "ingest", "ETT%", "SLOs and alerts"):
        assert any(line.startswith(f"{step}: 100%") for line in lines), (step, first.output)
    assert "\r" not in first.output
    spec = read_spec(ett_home, f"sqlite:///{ett_home / 'ett.db'}")
    assert spec is not None and (spec.seed, spec.models, spec.days) == (5, 3, 4.0)

    again = runner.invoke(app, args)
    assert again.exit_code == 0, again.output
    assert "already holds events" in again.output
    assert stored_events(ett_home) == stored


def test_an_interrupted_load_resumes(ett_home: Path, monkeypatch: pytest.MonkeyPatch):
    from backend.demo import loader

    real = loader.recompute_jobs

    def crash(*args: Any, **kwargs: Any) -> int:
        raise KeyboardInterrupt

    args = ["demo", "--models", "2", "--days", "3", "--no-serve"]
    monkeypatch.setattr(loader, "recompute_jobs", crash)
    interrupted = CliRunner().invoke(app, args)
    assert interrupted.exit_code != 0
    stored = stored_events(ett_home)
    assert stored > 0
    monkeypatch.setattr(loader, "recompute_jobs", real)
    resumed = CliRunner().invoke(app, args)
    assert resumed.exit_code == 0, resumed.output
    assert "resuming" in resumed.output
    assert f"0 stored, {stored:,} duplicates" in resumed.output
    db = Database(f"sqlite:///{ett_home / 'ett.db'}")
    try:
        with db.session() as s:
            jobs = s.scalar(select(func.count(JobResult.job_id)))
            dirty = s.scalar(select(func.count(Job.job_id)).where(Job.dirty.is_(True)))
    finally:
        db.dispose()
    assert jobs and not dirty


def test_demo_serves_with_the_live_feed(ett_home: Path, monkeypatch: pytest.MonkeyPatch):
    calls: list[dict[str, Any]] = []
    feeds: list[Any] = []
    import backend.app
    from backend.demo import live

    real_feed = live.LiveFeed

    class RecordingFeed(real_feed):  # type: ignore[misc,valid-type]
        def start(self) -> None:
            feeds.append(self)

    def fake_serve(host: str, port: int, *, role: str | None = None, **_kw: Any) -> None:
        calls.append({"host": host, "port": port, "role": role})

    monkeypatch.setattr(backend.app, "serve", fake_serve)
    monkeypatch.setattr(live, "LiveFeed", RecordingFeed)
    result = CliRunner().invoke(
        app, ["demo", "--models", "2", "--days", "3", "--host", "127.0.0.1", "--port", "8123"]
    )
    assert result.exit_code == 0, result.output
    # No role asked: the server's own default (ETT_SERVE_ROLE, else all: API and workers).
    assert calls == [{"host": "127.0.0.1", "port": 8123, "role": None}]
    assert len(feeds) == 1 and feeds[0].spec.models == 2


def test_demo_over_http_needs_a_token(ett_home: Path):
    result = CliRunner().invoke(app, ["demo", "--url", "http://127.0.0.1:9"])
    assert result.exit_code == 2
    assert "--token" in result.output


def test_demo_reports_an_unreachable_database_in_words(
    ett_home: Path, monkeypatch: pytest.MonkeyPatch
):
    monkeypatch.setenv("ETT_DATABASE_URL", "postgresql://nobody@127.0.0.1:9/none")
    get_settings.cache_clear()
    result = CliRunner().invoke(app, ["demo", "--no-serve"])
    assert result.exit_code == 2
    assert "could not migrate" in result.output


def test_demo_sends_to_a_running_server_over_http(
    ett_home: Path, monkeypatch: pytest.MonkeyPatch, client: Any, ingest_token: str, database: Any
):
    from backend.demo import loader

    monkeypatch.setattr(loader.httpx, "Client", lambda **_: client)
    result = CliRunner().invoke(
        app,
        [
            "demo",
            "--url",
            "http://testserver",
            "--token",
            ingest_token,
            "--models",
            "2",
            "--days",
            "3",
        ],
    )
    assert result.exit_code == 0, result.output
    with database.session() as s:
        stored = int(s.scalar(select(func.count(RawEvent.event_id))) or 0)
    assert stored > 500
    assert f"sent {stored:,} events: {stored:,} stored" in result.output
