"""Bounded waits on Postgres: a locked job row costs its batch a 503 with Retry-After after
ETT_LOCK_TIMEOUT_S, recompute leaves such a job marked (not quarantined), and a request that
finds no pooled connection free is answered 503, never 500."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select, text

from backend.app import create_app
from backend.config import Settings
from backend.db import Database
from backend.jobs.models import Job, JobQuarantine
from backend.results.recompute import recompute_isolated
from tests.backend.results.test_recompute_and_jobs_api import short_job
from tests.conftest import DIALECTS

pytestmark = pytest.mark.skipif("postgresql" not in DIALECTS, reason="needs Postgres")


@pytest.fixture
def pg(_databases: Any) -> Database:
    from tests.conftest import empty_database

    db = _databases.get("postgresql")
    empty_database(db)
    return db


def _client(pg: Database, tmp_path: Path, **settings: Any) -> tuple[TestClient, Settings]:
    s = Settings(home=tmp_path, database_url=pg.url, recompute_mode="background", **settings)
    app = create_app(s, database=pg, start_workers=False, with_dashboard=False)
    return TestClient(app), s


def test_a_locked_job_row_answers_503_after_the_lock_timeout(pg: Database, tmp_path: Path) -> None:
    from backend.auth import service

    with pg.session() as s:
        _, token = service.create(db_session=s, name="locks", scope="ingest", models=None)
    client, settings = _client(pg, tmp_path, lock_timeout_s=0.6)
    auth = {"Authorization": f"Bearer {token}"}
    with client:
        first = client.post(
            "/api/v1/events", json={"events": short_job("L", "m", 30).events[:2]}, headers=auth
        )
        assert first.status_code == 200, first.text
        holder = pg.engine.connect()
        try:
            holder.execute(text("SELECT 1 FROM jobs WHERE job_id = 'L' FOR UPDATE"))
            start = time.monotonic()
            answer: list[Any] = []
            post = threading.Thread(
                target=lambda: answer.append(
                    client.post(
                        "/api/v1/events",
                        json={"events": short_job("L", "m", 30).events[2:]},
                        headers=auth,
                    )
                ),
                daemon=True,
            )
            post.start()
            post.join(timeout=20)  # hang guard: without a bound it waits for the lock forever
            took = time.monotonic() - start
            assert answer, "the post still waits for the locked row"
            r = answer[0]
            assert r.status_code == 503, r.text
            assert r.headers["retry-after"] == "2"
            assert "ETT_LOCK_TIMEOUT_S" in r.json()["detail"]
            assert 0.5 < took < 10  # waited about the bound, not indefinitely
            other = client.post(
                "/api/v1/events", json={"events": short_job("U", "m", 30).events}, headers=auth
            )
            assert other.status_code == 200 and other.json()["accepted"] == 5, other.text

            # Recompute finds the job locked: it stays marked and is not quarantined.
            with pg.session() as s:
                assert recompute_isolated(db_session=s, job_ids=["L"], settings=settings) == 0
        finally:
            holder.rollback()
            holder.close()
        with pg.session() as s:
            assert s.scalar(select(Job.dirty).where(Job.job_id == "L")) is True
            assert s.get(JobQuarantine, "L") is None
        again = client.post(
            "/api/v1/events", json={"events": short_job("L", "m", 30).events[2:]}, headers=auth
        )
        assert again.status_code == 200 and again.json()["accepted"] == 3, again.text


def test_no_free_pooled_connection_is_503_not_500(tmp_path: Path, pg: Database) -> None:
    small = Database(pg.url, pool_timeout_s=0.3)
    client, _settings = _client(small, tmp_path)
    held = [small.engine.connect() for _ in range(30)]  # the whole pool: 10 + 20 overflow
    try:
        with client:
            r = client.get("/api/v1/jobs")
            assert r.status_code == 503, r.text
            assert r.headers["retry-after"] == "1"
            assert "connection" in r.json()["detail"]
    finally:
        for c in held:
            c.close()
        small.dispose()
