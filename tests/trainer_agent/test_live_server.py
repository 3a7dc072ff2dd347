"""Failure paths against a real `ett serve`: restarts, 500/429, full spool, fork, SIGTERM, hangs."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.trainer_agent.fake_ingest import FakeIngest
from tests.trainer_agent.live_server import LiveServer
from trainer_agent import Agent
from trainer_agent.spool import Spool, job_spool_dir

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def proxy(live: LiveServer) -> Iterator[FakeIngest]:
    """A scriptable proxy in front of the live server (500s, 429s, hangs)."""
    server = FakeIngest(upstream=live.url)
    yield server
    server.close()


def agent_for(url: str, token: str, job_id: str, spool: Path, **kwargs: object) -> Agent:
    kwargs.setdefault("install_handlers", False)
    kwargs.setdefault("heartbeat_s", 0)
    kwargs.setdefault("rank", 0)
    return Agent(job_id, kwargs.pop("attempt", 0), url, token, spool_dir=spool, **kwargs)  # type: ignore[arg-type]


def assert_stored_once(live: LiveServer, job_id: str, expected: int) -> list[dict[str, object]]:
    events = live.stored_events(job_id)
    ids = Counter(e["event_id"] for e in events)
    assert len(events) == expected, (len(events), expected)
    assert all(n == 1 for n in ids.values())
    return events


def test_server_stopped_and_restarted_mid_run(live: LiveServer, tmp_path: Path) -> None:
    job = "live-restart"
    agent = agent_for(live.url, live.token, job, tmp_path, progress_window_s=0.05)
    agent.sender.backoff_max_s = 0.5
    spool = Spool(job_spool_dir(tmp_path, job))
    steps = 0

    def step_for(n: int) -> None:
        nonlocal steps
        for _ in range(n):
            steps += 1
            agent.step(cursor=steps)
            time.sleep(0.005)
            if steps % 50 == 0:
                agent.heartbeat()

    step_for(100)
    assert agent.flush(timeout=10)
    live.stop()
    try:
        step_for(150)
        # Keep training until the agent has put events on disk (bounded: a loaded machine
        # may take a while to fail the first send).
        deadline = time.monotonic() + 15
        while spool.pending_bytes() == 0 and time.monotonic() < deadline:
            step_for(10)
        assert spool.pending_bytes() > 0, "events must wait on disk while the API is down"
    finally:
        live.start()  # the module's other tests need the server whatever happened here
    step_for(150)
    assert agent.flush(timeout=20)
    agent.close(timeout=10)
    stats = agent.stats()
    assert stats["spooled"] > 0 and stats["retries"] > 0
    assert stats["dropped"] == 0 and stats["rejected"] == 0
    events = assert_stored_once(live, job, stats["submitted"])
    progress = sorted((e for e in events if e["type"] == "progress"), key=lambda e: e["start"])
    assert sum(p["steps"] for p in progress) == steps - 1  # the first step opens the window
    for a, b in zip(progress, progress[1:], strict=False):
        assert a["end"] == b["start"] and a["cursor_end"] == b["cursor_start"]  # no gap: none lost
    assert not spool.pending_files()


def test_500_then_429_with_retry_after(live: LiveServer, proxy: FakeIngest, tmp_path: Path) -> None:
    job = "live-retry"
    proxy.script = [(500, {}), (500, {}), (429, {"Retry-After": "1"})]
    agent = agent_for(proxy.url, live.token, job, tmp_path)
    agent.sender.backoff_base_s = 0.05
    with agent.phase("trainer_init"):
        pass
    assert agent.flush(timeout=20)
    times = [t for t, _ in proxy.requests]
    assert len(times) >= 4
    assert times[3] - times[2] >= 0.95  # the 429's Retry-After was honoured
    agent.close(timeout=10)
    # One retry round per refused request, fewer when the isolation of a 500 meets the 429.
    assert 1 <= agent.stats()["retries"] <= 3 and not proxy.script
    assert_stored_once(live, job, agent.stats()["submitted"])


def test_full_spool_keeps_what_fits_and_delivers_it(live: LiveServer, tmp_path: Path) -> None:
    job = "live-full"
    live.stop()
    try:
        agent = agent_for(live.url, live.token, job, tmp_path, spool_max_bytes=8192)
        for i in range(100):
            agent.failure("infra", f"retry storm {i} " + "z" * 100)
        agent.close(timeout=3)
    finally:
        live.start()
    stats = agent.stats()
    assert stats["dropped"] > 0 and stats["spooled"] > 0
    assert stats["spooled"] + stats["dropped"] == stats["submitted"]
    assert Spool(job_spool_dir(tmp_path, job)).pending_bytes() <= 8192
    agent2 = agent_for(live.url, live.token, job, tmp_path, attempt=1, report_attempt=False)
    assert agent2.flush(timeout=20)
    agent2.close(timeout=5)
    assert_stored_once(live, job, stats["spooled"])


def test_fork_and_exit_while_the_api_hangs(
    live: LiveServer, proxy: FakeIngest, tmp_path: Path
) -> None:
    job = "live-fork-hang"
    script = textwrap.dedent(
        f"""
        import os, sys
        from trainer_agent import Agent
        agent = Agent({job!r}, 0, {proxy.url!r}, {live.token!r}, spool_dir={str(tmp_path)!r},
                      rank=0, heartbeat_s=0, exit_timeout_s=2)
        assert agent.flush(10)
        pid = os.fork()
        if pid == 0:
            with agent.phase("custom.child"):
                pass
            ok = agent.flush(10)
            os._exit(0 if ok else 1)
        _, status = os.waitpid(pid, 0)
        print("child", os.waitstatus_to_exitcode(status), flush=True)
        sys.stdin.readline()  # the test makes the API hang now
        with agent.phase("shutdown"):
            pass
        sys.exit(4)
        """
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", script],
        env=dict(os.environ, PYTHONPATH=str(REPO)),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None and proc.stdin is not None
    assert proc.stdout.readline().strip() == "child 0"
    proxy.hang()
    started = time.monotonic()
    proc.stdin.write("go\n")
    proc.stdin.flush()
    assert proc.wait(timeout=30) == 4
    assert time.monotonic() - started < 2 + 2  # exit_timeout_s plus slack
    proxy.unhang()
    agent = agent_for(live.url, live.token, job, tmp_path, attempt=1, report_attempt=False)
    assert agent.flush(timeout=20)
    agent.close(timeout=5)
    events = live.stored_events(job)
    assert Counter(e["event_id"] for e in events).most_common(1)[0][1] == 1
    phases = sorted(e["phase"] for e in events if e["type"] == "phase")
    assert phases == ["custom.child", "shutdown", "trainer_init.process_start"]
    assert [e["reason"] for e in events if e["type"] == "attempt_ended"] == ["completed"]


def test_sigterm_shows_as_a_preemption_in_the_ett_answer(live: LiveServer, tmp_path: Path) -> None:
    job = "live-sigterm"
    scheduler = agent_for(live.url, live.token, job, tmp_path, report_attempt=False)
    scheduler.job_submitted("agent-test", gpus=1)
    assert scheduler.flush(timeout=10)
    script = textwrap.dedent(
        f"""
        import time
        from trainer_agent import Agent
        agent = Agent({job!r}, 0, {live.url!r}, {live.token!r}, spool_dir={str(tmp_path)!r},
                      rank=0, heartbeat_s=0, progress_window_s=0.1)
        for i in range(1, 60):
            agent.step(cursor=i)
            time.sleep(0.01)
        print("ready", flush=True)
        while True:
            time.sleep(1)
        """
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", script],
        env=dict(os.environ, PYTHONPATH=str(REPO)),
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=20) == -signal.SIGTERM
    scheduler.job_ended("failed")
    assert scheduler.flush(timeout=10)
    scheduler.close(timeout=5)
    answer = live.ended_ett(job, "failed")
    kinds = {k: n for k, n in answer["l1"]["nof_by_kind"].items() if n}
    assert kinds == {"preemption": 1}
    assert answer["effective_s"] > 0


def test_concurrent_ranks_share_one_spool(live: LiveServer, tmp_path: Path) -> None:
    job = "live-ranks"
    live.stop()
    agents = [
        agent_for(live.url, live.token, job, tmp_path, rank=r, report_attempt=r == 0)
        for r in range(3)
    ]
    for rank, agent in enumerate(agents):
        with agent.phase(f"custom.rank{rank}"):
            pass
        agent.close(timeout=2)
    live.start()
    drainers = [
        agent_for(live.url, live.token, job, tmp_path, attempt=1, report_attempt=False)
        for _ in range(3)
    ]
    threads = [threading.Thread(target=a.flush, args=(20,)) for a in drainers]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for a in drainers:
        a.close(timeout=5)
    submitted = sum(a.stats()["submitted"] for a in agents)
    assert_stored_once(live, job, submitted)
    assert live.rejected_count() == 0


def test_a_poison_event_is_dead_lettered_and_the_rest_delivered(
    live: LiveServer, proxy: FakeIngest, tmp_path: Path
) -> None:
    job = "live-poison"
    # Heartbeats keep coming, as in a real run: a poison event left alone in the spool is sent
    # again beside them, which shows the API takes other events.
    agent = agent_for(proxy.url, live.token, job, tmp_path, heartbeat_s=0.2)
    agent.sender.backoff_base_s = 0.02
    agent.sender.backoff_max_s = 0.1
    assert agent.flush(timeout=10)
    # The API (through the proxy) fails with 500 any batch that holds the poison phase.
    proxy.poison = lambda e: e.get("phase") == "custom.poison"
    proxy.hang()  # the events below queue up behind one stuck request, then go out together
    agent.heartbeat()
    time.sleep(0.2)
    for i in range(40):
        name = "custom.poison" if i == 17 else f"custom.part{i}"
        agent.record_phase(name, 1_780_000_000.0 + i, 1_780_000_000.5 + i)
    proxy.unhang()
    assert agent.flush(timeout=30) is False  # one event never reached the API
    agent.heartbeat_s = 0  # no more heartbeats: close() drains the spool and stops
    assert agent.close(timeout=10) is False
    stats = agent.stats()
    assert stats["dead_lettered"] == 1 and stats["dropped"] == 0
    stored = live.stored_events(job)
    assert "custom.poison" not in {e.get("phase") for e in stored}
    assert len({e["event_id"] for e in stored}) == len(stored) == stats["submitted"] - 1
    lines = (job_spool_dir(tmp_path, job) / "dead-letter.jsonl").read_text().splitlines()
    (record,) = [json.loads(line) for line in lines]
    assert record["event"]["phase"] == "custom.poison" and record["status"] == 500
    assert "poisoned" in record["answer"]["detail"]
    assert not Spool(job_spool_dir(tmp_path, job)).pending_files()
    # Isolation took a few requests, not one per event.
    assert len(proxy.requests) < 40
