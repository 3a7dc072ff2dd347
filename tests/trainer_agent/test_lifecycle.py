"""The job's lifecycle from the trainer: the README snippet run verbatim, ownership, calls after close."""

from __future__ import annotations

import logging
import os
import re
import subprocess
import sys
import time
import urllib.error
from pathlib import Path
from typing import Any

import pytest

from tests.trainer_agent.fake_ingest import FakeIngest
from tests.trainer_agent.live_server import LiveServer
from trainer_agent import Agent

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]


def readme_snippet() -> str:
    """The first python block under the README's "Instrument a trainer" heading, as written."""
    text = (REPO / "README.md").read_text()
    section = text.split("## Instrument a trainer", 1)[1]
    match = re.search(r"```python\n(.*?)```", section, re.S)
    assert match, "README.md lost its 'Instrument a trainer' code block"
    return match.group(1)


def wait_for_answer(live: LiveServer, job: str, ready: Any, timeout: float = 60.0) -> dict:
    """GET the job's ETT answer until `ready(answer)` (bounded)."""
    deadline = time.monotonic() + timeout
    answer: dict[str, Any] = {}
    while time.monotonic() < deadline:
        try:
            answer = live.get(f"/api/v1/jobs/{job}/ett")
            if ready(answer):
                return answer
        except urllib.error.HTTPError as err:
            if err.code != 404:
                raise
        time.sleep(0.3)
    raise AssertionError(f"job {job} never got ready: {answer}")


def trainer_env(live: LiveServer, job: str, tmp_path: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ETT_", "TORCHELASTIC_"))}
    env.update(
        PYTHONPATH=str(REPO),
        ETT_ENDPOINT=live.url,
        ETT_TOKEN=live.token,
        ETT_JOB_ID=job,
        ETT_SPOOL_DIR=str(tmp_path / "spool"),
    )
    env.update(extra)
    return env


def test_readme_snippet_run_verbatim_gives_an_ended_job(live: LiveServer, tmp_path: Path) -> None:
    script = tmp_path / "readme_snippet.py"
    script.write_text(readme_snippet())
    job = "readme-snippet-1"
    started = time.time()
    run = subprocess.run(
        [sys.executable, str(script)],
        env=trainer_env(live, job, tmp_path),
        capture_output=True,
        text=True,
        timeout=180,
    )
    exited = time.time()
    assert run.returncode == 0, run.stderr[-3000:]
    assert "not every event" not in run.stderr  # close() delivered everything

    answer = wait_for_answer(live, job, lambda a: not a["provisional"])
    assert answer["status"] == "succeeded"
    assert answer["model"] == "ranking-v3" and answer["gpus"] == 8
    listed = live.get("/api/v1/jobs?model=ranking-v3")
    assert job in str(listed)
    # The job spans the process: submitted at its start, ended when the loop did.
    e2e = answer["e2e_s"]
    assert 0 < e2e <= exited - started + 1.0
    stored = live.stored_events(job)
    # The loop trained: progress over all its data arrived (its seconds may round to 0.000 in
    # the answer, since the snippet's train_step does nothing).
    progress = [e for e in stored if e["type"] == "progress"]
    assert sum(e["steps"] for e in progress) > 0
    assert max(e["cursor_end"] for e in progress) == 200 * 32
    assert answer["effective_s"] >= 0
    types = sorted(e["type"] for e in stored)
    assert types.count("job_submitted") == 1 and types.count("job_ended") == 1
    assert types.count("attempt_ended") == 1
    # Interpreter start and imports count as trainer init, up to the agent's start.
    (started_ev,) = [e for e in stored if e["type"] == "attempt_started"]
    (boot,) = [e for e in stored if e.get("phase") == "trainer_init.process_start"]
    assert boot["start"] == started_ev["ts"] and started - 1 < boot["start"] <= boot["end"]
    assert boot.get("span_id")
    # ETT% is final: it does not move after the process is gone.
    time.sleep(2.5)
    again = wait_for_answer(live, job, lambda a: not a["provisional"])
    assert (again["ett_pct"], again["e2e_s"]) == (answer["ett_pct"], answer["e2e_s"])


def test_readme_snippet_with_nothing_set_says_so_once_and_exits_0(tmp_path: Path) -> None:
    """A newcomer who runs the snippet before pointing it at a server is told what to set."""
    script = tmp_path / "readme_snippet.py"
    # A second agent in the same process: still one warning.
    script.write_text(readme_snippet() + "\ntrainer_agent.Agent(model='again')\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ETT_", "TORCHELASTIC_"))}
    env.pop("XDG_CACHE_HOME", None)
    env.update(PYTHONPATH=str(REPO), HOME=str(tmp_path))
    run = subprocess.run(
        [sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=180
    )
    assert run.returncode == 0, run.stderr[-3000:]
    said = [line for line in run.stderr.splitlines() if "reports nothing" in line]
    assert len(said) == 1, run.stderr[-3000:]
    assert said[0].startswith("trainer_agent: ETT_ENDPOINT and ETT_JOB_ID not set")
    for name in ("ETT_ENDPOINT", "ETT_TOKEN", "ETT_JOB_ID", "ett token create"):
        assert name in said[0]
    assert not (tmp_path / ".cache" / "ett-agent").exists()  # nothing spooled either


def test_agent_without_a_token_warns_that_the_server_refuses(
    fake_ingest: FakeIngest, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="trainer_agent")
    agent = Agent(
        job_id="no-token-1",
        endpoint=fake_ingest.url,
        spool_dir=tmp_path / "spool",
        install_handlers=False,
        heartbeat_s=0,
    )
    try:
        said = [r.getMessage() for r in caplog.records if "ETT_TOKEN is not set" in r.getMessage()]
        assert said and fake_ingest.url in said[0] and "ett token create" in said[0]
    finally:
        agent.close(timeout=1)


def test_scheduler_owned_job_gets_no_lifecycle_from_the_trainer(
    live: LiveServer, tmp_path: Path
) -> None:
    script = tmp_path / "readme_snippet.py"
    script.write_text(readme_snippet())
    job = "readme-snippet-scheduler"
    run = subprocess.run(
        [sys.executable, str(script)],
        env=trainer_env(live, job, tmp_path, ETT_JOB_OWNER="scheduler"),
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    types = {e["type"] for e in live.stored_events(job)}
    assert "attempt_started" in types and "progress" in types
    assert not types & {"job_submitted", "job_ended"}  # the scheduler's to send


@pytest.mark.parametrize(
    ("body", "status", "reason"),
    [
        ("for i in range(5): agent.step(i + 1)", "succeeded", "completed"),  # normal exit
        ("raise RuntimeError('diverged')", "failed", "failure"),  # uncaught exception
        ("raise KeyboardInterrupt", "cancelled", "cancelled"),
    ],
)
def test_how_the_process_ends_decides_the_job_status(
    live: LiveServer, tmp_path: Path, body: str, status: str, reason: str
) -> None:
    job = f"exit-{status}"
    code = (
        "import trainer_agent\n"
        "agent = trainer_agent.init(model='exit-test', gpus=2, heartbeat_s=0)\n" + body + "\n"
    )
    subprocess.run([sys.executable, "-c", code], env=trainer_env(live, job, tmp_path), timeout=120)
    stored = live.stored_events(job)
    assert [e["status"] for e in stored if e["type"] == "job_ended"] == [status]
    assert [e["reason"] for e in stored if e["type"] == "attempt_ended"] == [reason]
    (submitted,) = [e for e in stored if e["type"] == "job_submitted"]
    assert submitted["model"] == "exit-test" and submitted["gpus"] == 2


def test_a_failure_under_torchrun_with_restarts_left_leaves_the_job_open(
    live: LiveServer, tmp_path: Path
) -> None:
    job = "exit-torchrun-restart"
    code = (
        "import trainer_agent\n"
        "agent = trainer_agent.init(model='exit-test', gpus=2, heartbeat_s=0)\n"
        "raise RuntimeError('rank 0 died')\n"
    )
    env = trainer_env(
        live, job, tmp_path, TORCHELASTIC_RESTART_COUNT="0", TORCHELASTIC_MAX_RESTARTS="2"
    )
    subprocess.run([sys.executable, "-c", code], env=env, timeout=120)
    types = [e["type"] for e in live.stored_events(job)]
    assert "failure" in types and "attempt_ended" in types
    assert "job_ended" not in types  # torchrun starts the next attempt


def test_job_ended_after_close_is_delivered(live: LiveServer, tmp_path: Path) -> None:
    job = "after-close"
    agent = Agent(
        job,
        0,
        live.url,
        live.token,
        spool_dir=tmp_path,
        install_handlers=False,
        heartbeat_s=0,
        job_owner="scheduler",
    )
    agent.job_submitted("after-close-model", gpus=4)
    assert agent.close(timeout=10)
    agent.job_ended("succeeded")  # the call the user made: it must not be only spooled
    agent.record_phase("shutdown", time.time() - 1, time.time())
    stored = live.stored_events(job)
    assert [e["status"] for e in stored if e["type"] == "job_ended"] == ["succeeded"]
    assert [e["phase"] for e in stored if e["type"] == "phase"].count("shutdown") == 1
    assert agent.flush(timeout=5)


def test_close_returns_false_and_says_where_events_wait(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    down = FakeIngest()
    url = down.url
    down.close()  # nothing listens there now
    agent = Agent(
        "job-undelivered",
        0,
        url,
        "secret",
        spool_dir=tmp_path,
        install_handlers=False,
        heartbeat_s=0,
        model="m",
        gpus=1,
    )
    agent.sender.backoff_base_s = 0.05
    with caplog.at_level(logging.WARNING, logger="trainer_agent"):
        assert agent.flush(timeout=0.5) is False
        assert agent.close(timeout=1.0) is False
    spool_dir = agent.sender.spool.directory
    assert any(
        "not every event" in r.message and str(spool_dir) in r.message for r in caplog.records
    )
    assert agent.sender.spool.pending_files()
