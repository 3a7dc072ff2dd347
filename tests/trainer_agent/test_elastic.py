"""Attempts under torchrun: a real group restart of two CPU workers, numbered by the rendezvous."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from backend.ett.engine import compute_job
from tests.trainer_agent.fake_ingest import FakeIngest
from trainer_agent import elastic

REPO = Path(__file__).resolve().parents[2]

WORKER = textwrap.dedent(
    """
    import json, os, sys, time
    import trainer_agent
    agent = trainer_agent.init(model="elastic-test", gpus=2, heartbeat_s=0)
    rank = agent.rank
    record = {k: os.environ.get(k) for k in (
        "RANK", "TORCHELASTIC_RESTART_COUNT", "ETT_ATTEMPT", "ETT_ELASTIC_ROUND")}
    record["agent_attempt"] = agent.attempt
    with open(os.path.join(sys.argv[1], f"worker-{os.getpid()}.json"), "w") as fh:
        json.dump(record, fh)
    with agent.phase(f"custom.rank{rank}"):
        pass
    assert agent.flush(10)
    open(os.path.join(sys.argv[1], f"flushed-{agent.attempt}-{rank}"), "w").close()
    if agent.attempt == 0 and rank == 1:
        # Not before rank 0 has said its part: a loaded machine may start it seconds later.
        deadline = time.monotonic() + 120
        while not os.path.exists(os.path.join(sys.argv[1], "flushed-0-0")):
            assert time.monotonic() < deadline, "rank 0 never flushed"
            time.sleep(0.05)
        os.kill(os.getpid(), 9)  # dies without a word, as under the OOM killer
    time.sleep(30 if agent.attempt == 0 else 0.2)  # rank 0 waits to be stopped by torchrun
    for i in range(1, 4):
        agent.step(i)
    """
)


@pytest.mark.slow
@pytest.mark.torch
def test_group_restart_of_two_workers_gets_one_new_attempt(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    (tmp_path / "worker.py").write_text(WORKER)
    server = FakeIngest()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ETT_", "TORCHELASTIC_"))}
    env.update(
        PYTHONPATH=str(REPO),
        ETT_ENDPOINT=server.url,
        ETT_TOKEN="secret",
        ETT_JOB_ID="elastic-1",
        ETT_SPOOL_DIR=str(tmp_path / "spool"),
    )
    try:
        run = subprocess.run(
            [
                sys.executable,
                "-m",
                "trainer_agent.elastic",
                "--standalone",
                "--nproc-per-node",
                "2",
                "--max-restarts",
                "1",
                "--monitor-interval",
                "0.1",
                str(tmp_path / "worker.py"),
                str(tmp_path),
            ],
            env=env,
            capture_output=True,
            text=True,
            timeout=240,
        )
        assert run.returncode == 0, run.stderr[-4000:]
        records = [json.loads(p.read_text()) for p in tmp_path.glob("worker-*.json")]
        seen = sorted((r["agent_attempt"], r["RANK"]) for r in records)
        assert seen == [(0, "0"), (0, "1"), (1, "0"), (1, "1")]
        # Every worker of a group start agrees: the attempt is the rendezvous round.
        assert all(r["ETT_ATTEMPT"] == r["ETT_ELASTIC_ROUND"] for r in records)
        events = list(server.events.values())
        phases = sorted(
            (e["attempt"], e["phase"])
            for e in events
            if e["type"] == "phase" and e["phase"].startswith("custom.")
        )
        assert phases == [
            (0, "custom.rank0"),
            (0, "custom.rank1"),
            (1, "custom.rank0"),
            (1, "custom.rank1"),
        ]
        assert sorted(e["attempt"] for e in events if e["type"] == "attempt_started") == [0, 1]
        failures = [e for e in events if e["type"] == "failure"]
        # The launcher saw rank 1 die of SIGKILL and said so; rank 0 was stopped with SIGTERM.
        infra = [f for f in failures if f["kind"] == "infra"]
        assert [f["attempt"] for f in infra] == [0] and "SIGKILL" in infra[0]["message"]
        assert all(f["attempt"] == 0 for f in failures)
        assert [e["status"] for e in events if e["type"] == "job_ended"] == ["succeeded"]
        assert [e["attempt"] for e in events if e["type"] == "progress"] == [1]
        # The group restart is in place: attempt 1 says so, and its wait is not queue time.
        started = {e["attempt"]: e for e in events if e["type"] == "attempt_started"}
        assert "in_place" not in started[0] and started[1]["in_place"] is True
        result = compute_job(events, now=time.time())
        assert [f.kind for f in result.l1.failures] == ["infra"]
        assert result.components["scheduling"] == 0.0
        gap = started[1]["ts"] - result.l1.failures[0].ts
        assert gap > 0
        assert result.components["hardware_setup"] >= gap - 1e-6
    finally:
        server.close()


def test_attempt_numbering_rules(monkeypatch: pytest.MonkeyPatch) -> None:
    state = SimpleNamespace(round=3)
    handler = SimpleNamespace(_state_holder=SimpleNamespace(state=state))
    assert elastic.rendezvous_round(handler) == 3
    assert elastic.rendezvous_round(SimpleNamespace()) is None  # static rendezvous: no round
    # The allocation's base: the SLURM TaskProlog's ETT_ATTEMPT_BASE, else the requeue count
    # x 1000 (what the SLURM hooks number the allocation), else the launcher's own ETT_ATTEMPT.
    assert elastic.attempt_offset({"ETT_ATTEMPT_BASE": "2000"}) == (2000, True)
    assert elastic.attempt_offset({"SLURM_RESTART_COUNT": "1"}) == (1000, True)
    assert elastic.attempt_offset({"ETT_ATTEMPT": "7"}) == (7, True)
    assert elastic.attempt_offset({"ETT_ATTEMPT_OFFSET": "10"}) == (10, True)
    assert elastic.attempt_offset({}) == (0, False)
    # Inside an allocation the restart counts from the first round this launcher saw; outside
    # one (a node that joins late) the shared round itself; without a round, local starts.
    assert elastic.restart_in_allocation(5, 3, 0, allocated=True) == 2
    assert elastic.restart_in_allocation(5, 3, 0, allocated=False) == 5
    assert elastic.restart_in_allocation(None, None, 2, allocated=True) == 2
    assert elastic.restart_in_allocation(5000, 0, 9, allocated=False) == 999


HOST_WORKER = textwrap.dedent(
    """
    import trainer_agent
    agent = trainer_agent.init(model="hosts-test", gpus=2, heartbeat_s=0)
    for i in range(1, 3):
        agent.step(i)
    assert agent.flush(10)
    """
)


def _torchrun(args: list[str], env: dict[str, str]) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "trainer_agent.elastic", *args],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


@pytest.mark.slow
@pytest.mark.torch
def test_each_host_of_a_torchrun_is_named_once(tmp_path: Path) -> None:
    """Two workers on one host name it once; two nodes of one rendezvous name both hosts."""
    pytest.importorskip("torch")
    import socket

    from tests.trainer_agent.live_server import free_port

    (tmp_path / "worker.py").write_text(HOST_WORKER)
    server = FakeIngest()
    base = {k: v for k, v in os.environ.items() if not k.startswith(("ETT_", "TORCHELASTIC_"))}
    base.update(
        PYTHONPATH=str(REPO),
        ETT_ENDPOINT=server.url,
        ETT_TOKEN="secret",
        ETT_SPOOL_DIR=str(tmp_path / "spool"),
    )
    worker = str(tmp_path / "worker.py")
    try:
        one = _torchrun(
            ["--standalone", "--nproc-per-node", "2", worker], {**base, "ETT_JOB_ID": "hosts-1"}
        )
        _, err = one.communicate(timeout=240)
        assert one.returncode == 0, err[-4000:]
        port = free_port()
        rdzv = ["--nnodes", "2", "--nproc-per-node", "1", "--rdzv-backend", "c10d"]
        rdzv += ["--rdzv-endpoint", f"127.0.0.1:{port}", "--rdzv-id", "hosts-2", worker]
        nodes = [
            _torchrun(rdzv, {**base, "ETT_JOB_ID": "hosts-2", "ETT_HOST": name})
            for name in ("node-a", "node-b")
        ]
        for node in nodes:
            _, err = node.communicate(timeout=240)
            assert node.returncode == 0, err[-4000:]
        events = list(server.events.values())
        for job_id, want in (("hosts-1", [socket.gethostname()]), ("hosts-2", None)):
            mine = [e for e in events if e["job_id"] == job_id]
            naming = [e for e in mine if e.get("host")]
            result = compute_job(mine, now=time.time())
            (attempt,) = result.attempts
            hosts = want or ["node-a", "node-b"]
            # Each host is named by exactly one event: rank 0's attempt_started, the other
            # host's first process a heartbeat.
            assert sorted(e["host"] for e in naming) == sorted(hosts), naming
            assert sorted(attempt.hosts) == sorted(hosts) and attempt.hosts_total == len(hosts)
        assert sorted(e["type"] for e in events if e["job_id"] == "hosts-2" and e.get("host")) == [
            "attempt_started",
            "heartbeat",
        ]
    finally:
        server.close()
