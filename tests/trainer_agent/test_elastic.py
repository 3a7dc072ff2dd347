"""Attempts under torchrun: a real group restart of two CPU workers, numbered by the rendezvous."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from types import SimpleNamespace

import pytest

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
    if agent.attempt == 0 and rank == 1:
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
    finally:
        server.close()


def test_attempt_numbering_rules(monkeypatch: pytest.MonkeyPatch) -> None:
    state = SimpleNamespace(round=3)
    handler = SimpleNamespace(_state_holder=SimpleNamespace(state=state))
    assert elastic.rendezvous_round(handler) == 3
    assert elastic.rendezvous_round(SimpleNamespace()) is None  # static rendezvous: no round
    assert elastic.attempt_offset(2, {"SLURM_RESTART_COUNT": "1"}) == 3
    assert elastic.attempt_offset(2, {"ETT_ATTEMPT_OFFSET": "10"}) == 10
    assert elastic.attempt_offset(2, {}) == 0
