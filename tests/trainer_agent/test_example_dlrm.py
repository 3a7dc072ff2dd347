"""The TorchRec DLRM example under torchrun with a crash and a SIGTERM, against a live `ett serve`."""

from __future__ import annotations

import os
import subprocess
import sys
from collections import defaultdict
from datetime import datetime
from pathlib import Path

import pytest

from tests.trainer_agent.live_server import LiveServer

pytestmark = [pytest.mark.slow, pytest.mark.torch]

REPO = Path(__file__).resolve().parents[2]


def epoch(text: str) -> float:
    return datetime.fromisoformat(text).timestamp()


def test_dlrm_with_a_crash_and_a_sigterm(live: LiveServer, tmp_path: Path) -> None:
    pytest.importorskip("torchrec", reason="install with requirements/torch.sh")
    job = "dlrm-example-1"
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "trainer_agent.examples.launch",
            "--endpoint",
            live.url,
            "--token",
            live.token,
            "--job-id",
            job,
            "--workdir",
            str(tmp_path),
            "--max-restarts",
            "2",
            "--",
            "--steps",
            "200",
            "--ckpt-every",
            "40",
            "--crash-at",
            "90",
            "--sigterm-at",
            "150",
        ],
        env=dict(os.environ, PYTHONPATH=str(REPO)),
        capture_output=True,
        text=True,
        timeout=540,
    )
    log = (tmp_path / "torchrun.log").read_text(errors="replace")
    assert run.returncode == 0, run.stdout + run.stderr + log[-4000:]
    assert "injected crash at step 90" in log
    assert "attempt 2 finished at step 200" in log

    answer = live.ended_ett(job, "succeeded")
    kinds = {k: n for k, n in answer["l1"]["nof_by_kind"].items() if n}
    assert kinds == {"app_error": 1, "preemption": 1}
    assert [f["attempt"] for f in answer["l1"]["failures"]] == [0, 1]
    assert answer["wasted"]["replay"] > 0
    assert answer["effective_s"] > 0
    assert [a["attempt"] for a in answer["attempts"]] == [0, 1, 2]
    # Each attempt starts (process start time) after the previous one ended.
    assert not [w for w in answer["warnings"] if w["code"] == "overlapping_attempts"]

    compile_s: dict[int, float] = defaultdict(float)
    for iv in answer["intervals"]:
        if iv["component"] == "pt2_compile":
            compile_s[iv["attempt"]] += epoch(iv["end"]) - epoch(iv["start"])
    assert all(compile_s[a] > 0 for a in (0, 1, 2)), dict(compile_s)

    # SPEC section 4 identities, to REST's rounding: each value is within 0.5 ms of its own.
    e2e = answer["e2e_s"]
    comps = answer["components"].values()
    assert abs(sum(comps) - e2e) <= 5e-4 * (len(comps) + 1) + 1e-9
    l1 = answer["l1"]
    level1 = (
        answer["effective_s"]
        + l1["tts_s"]
        + sum(l1["ttr_s"])
        + l1["in_loop_waste_s"]
        + l1["final_shutdown_s"]
    )
    terms = 4 + len(l1["ttr_s"]) + 1
    assert abs(level1 - e2e) <= 5e-4 * (terms + 1) + 1e-9
    # Every event the agents produced was accepted: none rejected, and checkpoints were seen.
    assert live.rejected_count() == 0
    stored = live.stored_events(job)
    assert sum(1 for e in stored if e["type"] == "checkpoint") >= 4
    phases = defaultdict(set)
    for e in stored:
        if e["type"] == "phase":
            phases[e["attempt"]].add(e["phase"])
    hooked = {"trainer_init.process_group", "trainer_init.train_module", "trainer_init.first_batch"}
    for attempt in (0, 1, 2):
        assert hooked <= phases[attempt], phases[attempt]
    assert "checkpoint_restore" not in phases[0]
    assert "checkpoint_restore" in phases[1] and "checkpoint_restore" in phases[2]
    reasons = {e["attempt"]: e["reason"] for e in stored if e["type"] == "attempt_ended"}
    assert reasons == {0: "failure", 1: "preempted", 2: "completed"}
