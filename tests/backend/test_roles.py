"""`ett serve --role api` runs no workers, `ett worker` does the recompute, both stop on SIGTERM."""

from __future__ import annotations

import os
import time
from pathlib import Path

import httpx

from backend import migrate
from backend.db import Database
from backend.ett.models import JobResult
from backend.results.recompute import count_dirty
from tests.backend.results.test_recompute_and_jobs_api import short_job
from tests.cluster import Cluster, EttProcess, ett
from tests.trainer_agent.live_server import free_port


def test_api_role_leaves_marks_and_the_worker_computes_them(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'roles.db'}"
    migrate.upgrade(url)
    cluster = Cluster(url, tmp_path / "c", apis=1, workers=0)
    token = cluster.token()
    cluster.start()
    db = Database(url)
    try:
        r = httpx.post(
            cluster.apis[0].url + "/api/v1/events",
            json={"events": short_job("r1", "m", 30).events},
            headers={"Authorization": f"Bearer {token}"},
            timeout=30,
        )
        assert r.status_code == 200 and r.json()["accepted"] > 0, r.text
        time.sleep(1.5)  # several recompute intervals: an API replica does not recompute
        with db.session() as s:
            assert count_dirty(db_session=s) == 1 and s.get(JobResult, "r1") is None
        port = free_port()
        worker = EttProcess("w", ["worker", "--metrics-port", str(port)], cluster.env, tmp_path)
        worker.start()
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            with db.session() as s:
                if s.get(JobResult, "r1") is not None:
                    break
            time.sleep(0.2)
        text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=10).text
        assert 'ett_worker_passes_total{outcome="ok",worker="recompute"}' in text
        assert worker.stop() == 0, worker.log_tail()  # SIGTERM: threads joined, exit 0
        with db.session() as s:
            assert s.get(JobResult, "r1").effective_s == 30
            assert count_dirty(db_session=s) == 0
    finally:
        cluster.stop()
        db.dispose()


def test_unknown_role_is_refused(tmp_path: Path) -> None:
    env = {"ETT_HOME": str(tmp_path), "ETT_DATABASE_URL": f"sqlite:///{tmp_path / 'x.db'}"}
    try:
        ett({**os.environ, **env}, "serve", "--role", "bogus")
    except RuntimeError as err:
        assert "unknown role 'bogus'" in str(err)
    else:
        raise AssertionError("ett serve --role bogus should fail")
