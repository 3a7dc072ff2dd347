"""NVIDIA OneLogger through its OTel exporter against a live `ett serve`, beside the agent.

A small PyTorch loop on CPU (tests/ingest/onelogger_train.py) runs two attempts: the first saves a
checkpoint and crashes, the second restores it (replaying what came after it) and finishes. The
test plays the scheduler, as the SLURM hooks do: it sends both jobs' job_submitted and
job_ended, and for the OneLogger job the failure of the attempt that exited non-zero (OneLogger
does not record how its application ended). ETT%, Level 2 and Level 1 equal the agent twin's to
1 s, on both databases.
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.ingest.twins import differences, settled
from tests.trainer_agent.live_server import LiveServer
from trainer_agent import Agent

pytestmark = [pytest.mark.slow, pytest.mark.torch]
SCRIPT = Path(__file__).with_name("onelogger_train.py")
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def live(database: Any, tmp_path: Path) -> Iterator[LiveServer]:
    """`ett serve` on this test's database (SQLite or Postgres)."""
    server = LiveServer(tmp_path, database_url=database.url)
    server.start()
    yield server
    server.close()


def scheduler(live: LiveServer, job: str, spool: Path) -> Agent:
    return Agent(job, 0, endpoint=live.url, token=live.token, spool_dir=spool, report_attempt=False,
                 report_progress=False, heartbeat_s=0, install_handlers=False,
                 job_owner="scheduler")  # fmt: skip


def test_onelogger_job_with_a_restart_equals_the_agents(live: LiveServer, tmp_path: Path) -> None:
    job, twin = "onelogger-mlp", "onelogger-mlp-agent"
    hooks = {j: scheduler(live, j, tmp_path / "sched-spool") for j in (job, twin)}
    now = time.time()
    for h in hooks.values():
        h.job_submitted("mlp", 1, ts=now)
    work = tmp_path / "work"
    work.mkdir()
    base = [sys.executable, str(SCRIPT), "--endpoint", live.url, "--token", live.token,
            "--job", job, "--twin", twin, "--workdir", str(work), "--iterations", "150",
            "--checkpoint-at", "60"]  # fmt: skip
    first = subprocess.run([*base, "--attempt", "0", "--crash-after", "99"], cwd=REPO,
                           capture_output=True, text=True, timeout=300)  # fmt: skip
    crashed_at = time.time()
    assert first.returncode == 1, first.stderr[-3000:]
    assert "induced crash" in first.stderr
    # What a scheduler integration knows of the crash: a non-zero exit, reported at its end.
    hooks[job].failure("app_error", "exit code 1", ts=crashed_at)
    second = subprocess.run([*base, "--attempt", "1"], cwd=REPO, capture_output=True, text=True,
                            timeout=300)  # fmt: skip
    assert second.returncode == 0, second.stderr[-3000:]
    ended = time.time()
    for h in hooks.values():
        h.job_ended("succeeded", ts=ended)
        assert h.close(timeout=20)
    ours = settled(live, twin, want_status="succeeded")
    theirs = settled(live, job, want_status="succeeded")
    assert live.get(f"/api/v1/events/rejected?job_id={job}") == []
    assert ours["l1"]["nof"] == 1 and theirs["l1"]["nof_by_kind"]["app_error"] == 1
    assert theirs["wasted"]["replay"] > 0.5 and theirs["wasted"]["checkpoint_blocking"] > 0.25
    assert theirs["phases"]["checkpoint_restore"]["total_s"] > 0
    assert differences(ours, theirs) == [], (
        differences(ours, theirs),
        ours["components"],
        theirs["components"],
        ours["l1"],
        theirs["l1"],
    )
