"""Jobs through a real one-node SLURM, with the integration's hooks, into a real `ett serve`.

Each job's queue time, attempts, failures and end as SLURM recorded them (`scontrol show job`)
must be what the ETT engine computed (GET /api/v1/jobs/{id}/ett).
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.error
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.trainer_agent.live_server import LiveServer, free_port
from tests.trainer_agent.slurm_cluster import (
    INSTALL_HINT,
    SlurmCluster,
    SlurmError,
    missing_binaries,
    parse_time,
    slurm_time,
)
from trainer_agent.spool import job_spool_dir

pytestmark = pytest.mark.slow


@pytest.fixture(scope="session")
def slurm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SlurmCluster]:
    """munged + slurmctld + slurmd on their own ports and folders; fails (never skips) if absent."""
    missing = missing_binaries()
    if missing:
        pytest.fail(f"SLURM is not installed here (missing: {', '.join(missing)}); {INSTALL_HINT}")
    root = tmp_path_factory.mktemp("slurm")
    own_root = len(str(root)) > 60  # slurmd and munged put Unix sockets in here (108-byte paths)
    if own_root:
        root = Path(tempfile.mkdtemp(prefix="ett-slurm-"))
    cluster = SlurmCluster(root, hooks_dir=root / "hooks")
    # slurmctld ignores hook scripts that are missing when it starts: install them first (the
    # `hooks` fixture installs them again with its server's address).
    install_hooks(cluster, [])
    try:
        cluster.start()
    except SlurmError as err:
        cluster.stop()
        pytest.fail(f"SLURM did not start: {err}")
    yield cluster
    cluster.stop()
    if own_root:
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="module")
def hooks(live: LiveServer, slurm: SlurmCluster) -> Path:
    """The integration installed as docs/SLURM.md says, sending to this module's server."""
    out = install_hooks(slurm, server_options(slurm, live))
    assert f"PrologSlurmctld={slurm.hooks_dir}/prolog_slurmctld.sh" in out
    assert f"JobCompLoc={slurm.hooks_dir}/jobcomp.sh" in out
    return slurm.root / "ett-slurm"


def server_options(slurm: SlurmCluster, live: LiveServer) -> list[str]:
    """--endpoint and --token-file for this module's server, and the site's trust policy: the
    account ml-rank belongs to the team ranking, and a comment may name the owner infra."""
    token_file = slurm.root / "ett-token"
    token_file.write_text(live.token + "\n")
    return [
        "--endpoint",
        live.url,
        "--token-file",
        str(token_file),
        "--owner-map",
        "account:ml-rank=ranking",
        "--allowed-owners",
        "infra",
    ]


def install_hooks(slurm: SlurmCluster, options: list[str], timeout_s: float = 5.0) -> str:
    """`python -m trainer_agent.slurm ... install` for this cluster; returns what it printed."""
    cmd = [sys.executable, "-m", "trainer_agent.slurm", *options]
    cmd += ["--dir", str(slurm.root / "ett-slurm"), "--timeout", str(timeout_s)]
    cmd += ["install", "--scripts-dir", str(slurm.hooks_dir), "--slurm-conf", str(slurm.conf)]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return out.stdout


def ett_result(
    live: LiveServer, job_id: str, status: str, timeout_s: float = 30.0
) -> dict[str, Any]:
    """The engine's answer for a job once it has ended with `status`."""
    return live.ended_ett(job_id, status, timeout_s)


def hook_log(state_dir: Path) -> str:
    """What the hooks logged, for assertion messages."""
    path = state_dir / "ett-slurm.log"
    return path.read_text(errors="replace")[-3000:] if path.exists() else "(no hook log)"


def wait_for_hook_log(state_dir: Path, line: str, timeout_s: float = 30.0) -> None:
    """Wait until the hooks' log holds `line` (a hook logs what it did once it has done it)."""
    deadline = time.monotonic() + timeout_s
    path = state_dir / "ett-slurm.log"
    while not path.exists() or line not in path.read_text(errors="replace"):
        assert time.monotonic() < deadline, f"no {line!r} in the hook log:\n{hook_log(state_dir)}"
        time.sleep(0.2)


def ett_id(slurm: SlurmCluster, job: str) -> str:
    """The integration's job id scheme."""
    return f"slurm-{slurm.cluster}-{job}"


def test_job_that_completes(slurm: SlurmCluster, hooks: Path, live: LiveServer) -> None:
    job = slurm.sbatch(
        f'env | grep "^ETT_" > "{slurm.root}/env-$SLURM_JOB_ID"; sleep 2',
        "--gpus=2",
        "--comment=ett-model=slurm-ok ett-owner=infra",
    )
    rec = slurm.wait_job(job, ("COMPLETED",))
    assert rec["Restarts"] == "0" and rec["ExitCode"] == "0:0"
    got = ett_result(live, ett_id(slurm, job), "succeeded")
    submit, start, end = (slurm_time(rec[k]) for k in ("SubmitTime", "StartTime", "EndTime"))

    assert got["model"] == "slurm-ok"
    assert got["gpus"] == 2
    assert got["labels"]["owner"] == "infra" and got["labels"]["cluster"] == slurm.cluster
    assert parse_time(got["submitted_at"]) == submit
    assert parse_time(got["ended_at"]) == end
    assert [a["attempt"] for a in got["attempts"]] == [0]
    (attempt,) = got["attempts"]
    assert parse_time(attempt["started_at"]) == start
    assert parse_time(attempt["ended_at"]) == end
    assert attempt["reason"] == "completed" and attempt["gpus"] == 2
    # SLURM_JOB_NODELIST expanded: the allocation's one node.
    assert attempt["hosts"] == [slurm.node] and attempt["hosts_total"] == 1, hook_log(hooks)
    assert got["l1"]["nof"] == 0
    assert got["e2e_s"] == pytest.approx(end - submit)
    assert got["components"].get("scheduling", 0.0) == pytest.approx(start - submit)

    # The job's tasks report under the same ETT job, and leave its lifecycle to the scheduler.
    exported = (slurm.root / f"env-{job}").read_text().split()
    assert f"ETT_JOB_ID={ett_id(slurm, job)}" in exported, hook_log(hooks)
    assert "ETT_JOB_OWNER=scheduler" in exported
    assert "ETT_ATTEMPT_BASE=0" in exported


@pytest.mark.parametrize(
    "nodelist", ["gpu[01-03,07]", "a1,b[2-3],c", "rack[1-2]-n[1-2]", "n[098-101]", "x[1,1,2],x1"]
)
def test_the_expander_agrees_with_scontrol(slurm: SlurmCluster, nodelist: str) -> None:
    from trainer_agent.slurm.hostlist import expand

    assert expand(nodelist) == list(
        dict.fromkeys(slurm.scontrol("show", "hostnames", nodelist).split())
    )


def test_job_requeued_then_completes(slurm: SlurmCluster, hooks: Path, live: LiveServer) -> None:
    # The first attempt runs until requeued; the second (SLURM_RESTART_COUNT=1) finishes.
    job = slurm.sbatch(
        'if [ "${SLURM_RESTART_COUNT:-0}" -ge 1 ]; then sleep 2; exit 0; fi; sleep 120',
        "--comment=ett-model=slurm-requeue",
        "--gpus=1",
    )
    first = slurm.wait_job(job, ("RUNNING",))
    time.sleep(1.5)
    requeue_called = float(int(time.time()))
    slurm.scontrol("requeue", job)
    queued = slurm.wait_job(job, ("PENDING",), restarts=1)
    slurm.start_requeued_now(job)
    done = slurm.wait_job(job, ("COMPLETED",), restarts=1, timeout_s=40)
    assert done["Restarts"] == "1" and done["ExitCode"] == "0:0"
    got = ett_result(live, ett_id(slurm, job), "succeeded")

    submit0, start0 = slurm_time(first["SubmitTime"]), slurm_time(first["StartTime"])
    # SLURM ends the attempt when asked (jobcomp's END) and requeues it once its processes are
    # gone (the new SubmitTime); `scontrol show job` keeps no EndTime of a requeued attempt.
    requeued_at = slurm_time(queued["SubmitTime"])
    start1, end = slurm_time(done["StartTime"]), slurm_time(done["EndTime"])
    assert start0 < requeued_at < start1 < end

    assert got["model"] == "slurm-requeue" and got["gpus"] == 1
    assert parse_time(got["submitted_at"]) == submit0  # the first submission, not the requeue
    assert parse_time(got["ended_at"]) == end
    attempts = got["attempts"]
    assert [a["attempt"] for a in attempts] == [0, 1000]  # allocation 1 is attempt 1000
    assert parse_time(attempts[0]["started_at"]) == start0
    preempted_at = parse_time(attempts[0]["ended_at"])
    assert requeue_called <= preempted_at <= requeued_at
    assert attempts[0]["reason"] == "preempted"
    assert parse_time(attempts[1]["started_at"]) == start1
    assert parse_time(attempts[1]["ended_at"]) == end
    assert attempts[1]["reason"] == "completed"
    (failure,) = got["l1"]["failures"]
    assert failure["kind"] == "preemption" and failure["attempt"] == 0
    assert parse_time(failure["ts"]) == preempted_at
    assert failure["inferred"] is False
    # Queue time: before the first start, and from the requeue to the second start.
    assert got["components"].get("scheduling", 0.0) == pytest.approx(
        (start0 - submit0) + (start1 - preempted_at)
    )
    assert [w for w in got["warnings"] if "attempt" in w.get("code", "")] == []


def test_job_that_fails(slurm: SlurmCluster, hooks: Path, live: LiveServer) -> None:
    job = slurm.sbatch("sleep 1; exit 3", "--comment=ett-model=slurm-fail,ett-gpus=8")
    rec = slurm.wait_job(job, ("FAILED",))
    assert rec["ExitCode"] == "3:0" and rec["Restarts"] == "0"
    got = ett_result(live, ett_id(slurm, job), "failed")
    submit, start, end = (slurm_time(rec[k]) for k in ("SubmitTime", "StartTime", "EndTime"))

    assert got["model"] == "slurm-fail" and got["gpus"] == 8
    assert parse_time(got["submitted_at"]) == submit
    assert parse_time(got["ended_at"]) == end
    (attempt,) = got["attempts"]
    assert parse_time(attempt["started_at"]) == start
    assert attempt["reason"] == "failure"
    (failure,) = got["l1"]["failures"]
    assert failure["kind"] == "app_error" and failure["inferred"] is False
    assert (failure["cause"], failure["domain"], failure["planned"]) == (
        "nonzero_exit",
        "workload",
        False,
    )
    assert parse_time(failure["ts"]) == end
    assert "FAILED" in failure["message"] and "exit code 3:0" in failure["message"]
    assert got["components"].get("scheduling", 0.0) == pytest.approx(start - submit)


def test_node_failure_requeues_as_infra_failure(
    slurm: SlurmCluster, hooks: Path, live: LiveServer
) -> None:
    job = slurm.sbatch(
        'if [ "${SLURM_RESTART_COUNT:-0}" -ge 1 ]; then sleep 1; exit 0; fi; sleep 120',
        "--comment=ett-model=slurm-nodefail",
    )
    first = slurm.wait_job(job, ("RUNNING",))
    time.sleep(1.0)
    down_called = float(int(time.time()))
    slurm.scontrol("update", f"NodeName={slurm.node}", "State=DOWN", "Reason=ett-test")
    try:
        queued = slurm.wait_job(job, ("PENDING",), restarts=1)
        # Held while the node comes back: slurmd refuses a relaunch of a job it has just killed
        # ("already killed, do not launch batch job") for a moment after the node failure.
        slurm.scontrol("hold", job, check=False)
    finally:
        # ReturnToService=2 brings the node back once slurmd answers; RESUME if it did not yet.
        slurm.scontrol("update", f"NodeName={slurm.node}", "State=RESUME", check=False)
        slurm.wait_node_idle()
    time.sleep(3.0)
    slurm.scontrol("release", job)
    slurm.start_requeued_now(job)
    done = slurm.wait_job(job, ("COMPLETED",), restarts=1, timeout_s=40)
    got = ett_result(live, ett_id(slurm, job), "succeeded")

    attempts = got["attempts"]
    assert [a["attempt"] for a in attempts] == [0, 1000]
    assert parse_time(attempts[0]["started_at"]) == slurm_time(first["StartTime"])
    failed_at = parse_time(attempts[0]["ended_at"])
    assert down_called <= failed_at < slurm_time(queued["SubmitTime"]) + 1  # SLURM: whole seconds
    assert attempts[0]["reason"] == "failure"
    (failure,) = got["l1"]["failures"]
    assert failure["kind"] == "infra" and "NODE_FAIL" in failure["message"]
    assert (failure["cause"], failure["domain"], failure["planned"]) == (
        "node_failure",
        "infrastructure",
        False,
    )
    assert got["gpus"] == 1  # it asked for none: counted as 1, with a warning in the hook log
    assert f"job {job}: the job requested no GPUs" in hook_log(hooks)
    assert parse_time(attempts[1]["started_at"]) == slurm_time(done["StartTime"])
    assert parse_time(got["ended_at"]) == slurm_time(done["EndTime"])


def test_server_down_then_flush_and_rerun_store_each_event_once(
    slurm: SlurmCluster, hooks: Path, live: LiveServer
) -> None:
    # The hooks' server is down (nothing listens at its address) for the job's whole life; a
    # short hook timeout, since SLURM waits for PrologSlurmctld.
    down = server_options(slurm, live)
    down[1] = f"http://127.0.0.1:{free_port()}"
    install_hooks(slurm, down, timeout_s=1.0)
    try:
        job = slurm.sbatch("sleep 1", "--comment=ett-model=slurm-offline")
        rec = slurm.wait_job(job, ("COMPLETED",))
        # slurmctld runs the jobcomp hook after the job shows COMPLETED, and that hook first
        # tries the server for its timeout: wait for it to spool before the live hooks go in.
        wait_for_hook_log(hooks, f"jobcomp: {ett_id(slurm, job)}:")
    finally:
        install_hooks(slurm, server_options(slurm, live))
    with pytest.raises(urllib.error.HTTPError):
        live.get(f"/api/v1/jobs/{ett_id(slurm, job)}/ett")  # nothing reached the server
    spooled = list(job_spool_dir(hooks / "spool", ett_id(slurm, job)).glob("*.json"))
    assert len(spooled) >= 2, hook_log(hooks)  # the prolog's batch and the jobcomp's batch

    flush = subprocess.run(
        [sys.executable, "-m", "trainer_agent.slurm", *server_options(slurm, live)]
        + ["--dir", str(hooks), "flush", "--wait", "20"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert flush.returncode == 0, flush.stderr
    assert not list((hooks / "spool").glob("*/*.json"))
    got = ett_result(live, ett_id(slurm, job), "succeeded")
    assert parse_time(got["submitted_at"]) == slurm_time(rec["SubmitTime"])
    assert parse_time(got["attempts"][0]["started_at"]) == slurm_time(rec["StartTime"])
    assert parse_time(got["ended_at"]) == slurm_time(rec["EndTime"])
    stored = live.stored_events(ett_id(slurm, job))
    assert sorted(e["type"] for e in stored) == [
        "attempt_ended",
        "attempt_started",
        "job_ended",
        "job_submitted",
    ]

    # SLURM (or an operator) runs both hooks again for the same job: nothing new is stored.
    hook_env = {k: v for k, v in slurm.env.items() if not k.startswith(("ETT_", "SLURM_JOB"))}
    prolog_env = dict(
        hook_env, SLURM_JOB_ID=job, SLURM_JOB_RESTART_COUNT="0", SLURM_CLUSTER_NAME=slurm.cluster
    )
    jobcomp_env = dict(
        hook_env,
        JOBID=job,
        JOBSTATE="COMPLETED",
        START=str(int(slurm_time(rec["StartTime"]))),
        END=str(int(slurm_time(rec["EndTime"]))),
        EXITCODE="0:0",
    )
    for script, env in (("prolog_slurmctld.sh", prolog_env), ("jobcomp.sh", jobcomp_env)):
        subprocess.run([str(slurm.hooks_dir / script)], env=env, timeout=60, check=True)
    again = live.stored_events(ett_id(slurm, job))
    assert sorted(e["event_id"] for e in again) == sorted(e["event_id"] for e in stored)
    assert live.rejected_count() == 0
    assert ett_result(live, ett_id(slurm, job), "succeeded")["attempts"] == got["attempts"]


def test_trainer_agent_in_the_job_reports_into_the_schedulers_job(
    slurm: SlurmCluster, hooks: Path, live: LiveServer
) -> None:
    # A real trainer agent in the job: the first attempt trains until SLURM requeues it
    # (SIGTERM), the second trains 1.5 s and ends.
    trainer = (
        "import os, time, trainer_agent\n"
        "agent = trainer_agent.init(progress_window_s=0.2, heartbeat_s=0)\n"
        "steps = 15 if os.environ.get('SLURM_RESTART_COUNT', '0') != '0' else 1200\n"
        "for _ in range(steps):\n"
        "    time.sleep(0.1)\n"
        "    agent.step()\n"
        "assert agent.close(timeout=10), 'events not delivered'\n"
    )
    (slurm.root / "trainer.py").write_text(trainer)
    job = slurm.sbatch(
        f"exec {sys.executable} {slurm.root}/trainer.py",
        "--comment=ett-model=slurm-paired",
        f"--export=ALL,ETT_ENDPOINT={live.url},ETT_TOKEN={live.token}",
    )
    first = slurm.wait_job(job, ("RUNNING",))
    deadline = time.monotonic() + 30
    while not any(
        e["type"] == "progress" for e in live.stored_events(ett_id(slurm, job))
    ):  # the trainer is up and training
        assert time.monotonic() < deadline, (slurm.root / "jobs" / f"{job}.out").read_text()
        time.sleep(0.2)
    slurm.scontrol("requeue", job)
    slurm.wait_job(job, ("PENDING",), restarts=1)
    slurm.start_requeued_now(job)
    rec = slurm.wait_job(job, ("COMPLETED", "FAILED"), restarts=1, timeout_s=40)
    assert rec["JobState"] == "COMPLETED", (slurm.root / "jobs" / f"{job}.out").read_text()
    got = ett_result(live, ett_id(slurm, job), "succeeded")

    stored = live.stored_events(ett_id(slurm, job))
    by_type: dict[str, list[dict[str, Any]]] = {}
    for event in stored:
        by_type.setdefault(str(event["type"]), []).append(event)
    trainer_progress = {e["attempt"] for e in by_type.get("progress", [])}
    assert trainer_progress == {0, 1000}, "the trainer's progress did not reach the scheduler's job"
    # The scheduler owns the job's lifecycle: one submission, one end, from the hooks.
    assert [e["event_id"] for e in by_type["job_submitted"]] == [f"{ett_id(slurm, job)}:submitted"]
    assert [e["event_id"] for e in by_type["job_ended"]] == [f"{ett_id(slurm, job)}:job-ended"]
    # Both sides number attempts alike (the allocation x 1000): two attempts, not three or four.
    assert {e["attempt"] for e in stored if e.get("attempt") is not None} == {0, 1000}
    assert [a["attempt"] for a in got["attempts"]] == [0, 1000]
    assert parse_time(got["attempts"][0]["started_at"]) == slurm_time(first["StartTime"])
    assert parse_time(got["attempts"][1]["started_at"]) == slurm_time(rec["StartTime"])
    (failure,) = got["l1"]["failures"]
    # the trainer's SIGTERM came first; the scheduler says why: the requeue initiates
    assert (failure["kind"], failure["cause"], failure["planned"]) == (
        "preemption",
        "requeue",
        True,
    )
    assert [c["cause"] for c in failure["cascade"]] == ["sigterm"]
    assert parse_time(failure["ts"]) <= parse_time(failure["cascade"][0]["ts"]) + 1.0
    assert got["model"] == "slurm-paired"
    assert got["components"]["effective_training"] > 0


def test_scancel_of_a_training_job_is_a_cancel_not_a_preemption(
    slurm: SlurmCluster, hooks: Path, live: LiveServer
) -> None:
    # A real trainer agent in the job gets scancel's SIGTERM: a user cancel, planned, NoF 0.
    trainer = (
        "import time, trainer_agent\n"
        "agent = trainer_agent.init(progress_window_s=0.2, heartbeat_s=0)\n"
        "for _ in range(1200):\n"
        "    time.sleep(0.1)\n"
        "    agent.step()\n"
    )
    (slurm.root / "trainer_cancel.py").write_text(trainer)
    job = slurm.sbatch(
        f"exec {sys.executable} {slurm.root}/trainer_cancel.py",
        "--comment=ett-model=slurm-cancelled",
        f"--export=ALL,ETT_ENDPOINT={live.url},ETT_TOKEN={live.token}",
    )
    slurm.wait_job(job, ("RUNNING",))
    deadline = time.monotonic() + 30
    # Train for over 2 s first: SLURM's times are whole seconds, so a job cancelled within its
    # first second of training can end (by SLURM's clock) before its training did.
    while sum(e["type"] == "progress" for e in live.stored_events(ett_id(slurm, job))) < 12:
        assert time.monotonic() < deadline, (slurm.root / "jobs" / f"{job}.out").read_text()
        time.sleep(0.2)
    subprocess.run(["scancel", job], env=slurm.env, check=True, timeout=30)
    slurm.wait_job(job, ("CANCELLED",))
    got = ett_result(live, ett_id(slurm, job), "cancelled")

    stored = live.stored_events(ett_id(slurm, job))
    sigterms = [e for e in stored if e["type"] == "failure"]
    # the agent did see the SIGTERM (and said it could not tell who sent it)
    assert [(e["kind"], e.get("cause")) for e in sigterms] == [("preemption", "sigterm")]
    assert got["l1"]["nof"] == 0 and got["l1"]["failures"] == []
    assert got["l1"]["nof_by_kind"]["preemption"] == 0
    (attempt,) = got["attempts"]
    assert attempt["reason"] == "cancelled"
    assert got["components"]["effective_training"] > 0


def test_job_cancelled_while_pending_is_all_queue(
    slurm: SlurmCluster, hooks: Path, live: LiveServer
) -> None:
    job = slurm.sbatch("sleep 1", "--hold", "--comment=ett-model=slurm-never-ran")
    slurm.wait_job(job, ("PENDING",))
    time.sleep(1.0)
    subprocess.run(["scancel", job], env=slurm.env, check=True, timeout=30)
    rec = slurm.wait_job(job, ("CANCELLED",))
    got = ett_result(live, ett_id(slurm, job), "cancelled")

    assert got["model"] == "slurm-never-ran"
    assert got["attempts"] == []
    assert parse_time(got["submitted_at"]) == slurm_time(rec["SubmitTime"])
    assert parse_time(got["ended_at"]) == slurm_time(rec["EndTime"])
    assert got["e2e_s"] >= 1.0
    assert got["components"].get("scheduling", 0.0) == pytest.approx(got["e2e_s"])


def test_the_hooks_do_not_trust_the_job_comment(
    slurm: SlurmCluster, hooks: Path, live: LiveServer
) -> None:
    """Any cluster user writes the comment. GPUs come from SLURM's allocation, not ett-gpus;
    the owner from the site's account mapping or its allow-list, not ett-owner."""
    hostile = slurm.sbatch(
        "sleep 1",
        "--gpus=2",
        "--account=students",
        "--comment=ett-model=slurm-hostile ett-gpus=10000000 ett-owner=ads ett-tier=tier-0",
    )
    mapped = slurm.sbatch(
        "sleep 1", "--gpus=1", "--account=ml-rank", "--comment=ett-model=slurm-mapped ett-owner=ads"
    )
    slurm.wait_job(hostile, ("COMPLETED",))
    slurm.wait_job(mapped, ("COMPLETED",))
    detail = slurm.scontrol("show", "job", "-d", hostile)
    assert "JOB_GRES=gpu:2" in detail  # what SLURM gave the job
    got = ett_result(live, ett_id(slurm, hostile), "succeeded")
    assert got["gpus"] == 2 and [a["gpus"] for a in got["attempts"]] == [2]
    assert "owner" not in got["labels"] and "tier" not in got["labels"]
    assert got["labels"]["account"] == "students"
    log = hook_log(hooks)
    assert f"job {hostile}: ett-gpus=10000000 ignored: SLURM gave the job 2 GPUs" in log
    # At PrologSlurmctld the count is the allocation's own (squeue's gres_detail).
    assert f"job {hostile} attempt 0: 2 GPUs from SLURM's allocation" in log
    assert f"job {hostile}: ett-owner='ads' ignored" in log
    other = ett_result(live, ett_id(slurm, mapped), "succeeded")
    assert other["labels"]["owner"] == "ranking" and other["gpus"] == 1
    assert f"job {mapped}: ett-owner='ads' ignored: account 'ml-rank'" in hook_log(hooks)
    models = {m["model"]: m for m in live.get("/api/v1/models?q=slurm-")["models"]}
    assert models["slurm-mapped"]["team"] == "ranking"
    assert models["slurm-hostile"]["team"] is None


TORCHRUN_WORKER = """
import json, os, sys, time
import trainer_agent
agent = trainer_agent.init(progress_window_s=0.2, heartbeat_s=0)
state = sys.argv[1]
try:
    cursor = json.load(open(state))
except (OSError, ValueError):
    cursor = 0
log = lambda what: print(f"worker attempt {agent.attempt} {what} at {time.time():.6f}", flush=True)
in_place = os.environ.get("ETT_ATTEMPT_IN_PLACE") == "1"
steps = 12 if agent.attempt == 0 else (10**6 if in_place else 15)
for i in range(steps):
    time.sleep(0.1)
    if i == 0:
        log("first step")
    cursor += 1
    agent.step(cursor)
    with open(state + ".tmp", "w") as fh:  # atomic: SLURM may kill it mid-write
        json.dump(cursor, fh)
    os.replace(state + ".tmp", state)
    if agent.attempt == 0 and i == steps - 1:
        log("crashes")
        raise RuntimeError("worker crash in attempt 0")
assert agent.close(timeout=10), "events not delivered"
"""


def _times(output: str, what: str) -> dict[int, float]:
    """The worker's logged instants of `what`, by attempt."""
    found = re.findall(rf"worker attempt (\d+) {what} at (\d+\.\d+)", output)
    return {int(a): float(t) for a, t in found}


@pytest.mark.torch
def test_torchrun_inside_sbatch_numbers_each_real_restart_once(
    slurm: SlurmCluster, hooks: Path, live: LiveServer
) -> None:
    """torchrun (trainer_agent.elastic) in an sbatch job with the SLURM hooks, as docs/AGENT.md
    and docs/SLURM.md recommend together: one in-place group restart (a worker crash) and one
    `scontrol requeue`. Three attempts (0, 1 in place, 1000 after the requeue), NoF 2 (one
    app_error, one preemption), each TTR from its failure to the next attempt's first step, and
    the in-place wait outside the queue time."""
    pytest.importorskip("torch")
    (slurm.root / "torchrun_worker.py").write_text(TORCHRUN_WORKER)
    state = slurm.root / "torchrun-cursor.json"
    state.unlink(missing_ok=True)
    launcher = (
        f"exec {sys.executable} -m trainer_agent.elastic --standalone --nproc-per-node 1 "
        f"--max-restarts 2 --monitor-interval 0.2 {slurm.root}/torchrun_worker.py {state}"
    )
    env = (
        f"--export=ALL,ETT_ENDPOINT={live.url},ETT_TOKEN={live.token},LOGLEVEL=INFO,"
        f"ETT_SPOOL_DIR={slurm.root}/torchrun-spool"
    )
    job = slurm.sbatch(
        launcher, "--comment=ett-model=slurm-torchrun", "--gpus=2", "--open-mode=append", env
    )
    out_file = slurm.root / "jobs" / f"{job}.out"
    first = slurm.wait_job(job, ("RUNNING",))
    deadline = time.monotonic() + 120
    # Wait for the in-place restart (attempt 1) to train, then requeue the job.
    while not any(
        e["type"] == "progress" and e.get("attempt") == 1
        for e in live.stored_events(ett_id(slurm, job))
    ):
        assert time.monotonic() < deadline, out_file.read_text()[-4000:]
        time.sleep(0.3)
    requeue_called = float(int(time.time()))
    slurm.scontrol("requeue", job)
    queued = slurm.wait_job(job, ("PENDING",), restarts=1, timeout_s=60)
    slurm.start_requeued_now(job)
    rec = slurm.wait_job(job, ("COMPLETED", "FAILED"), restarts=1, timeout_s=120)
    output = out_file.read_text()
    assert rec["JobState"] == "COMPLETED", output[-4000:]
    got = ett_result(live, ett_id(slurm, job), "succeeded")

    # The torchrun log: the launcher's group starts, the workers' first steps and the crash.
    groups = re.findall(
        r"worker group start (\d+) \(rendezvous round (\S+)\) at [\d.]+: "
        r"attempt (\d+)( \(in place\))?",
        output,
    )
    assert [(g[2], bool(g[3])) for g in groups] == [("0", False), ("1", True), ("1000", False)]
    first_steps, crashes = _times(output, "first step"), _times(output, "crashes")
    assert sorted(first_steps) == [0, 1, 1000] and list(crashes) == [0]

    assert [a["attempt"] for a in got["attempts"]] == [0, 1, 1000]
    start0 = slurm_time(first["StartTime"])
    start1000, end = slurm_time(rec["StartTime"]), slurm_time(rec["EndTime"])
    by = {a["attempt"]: a for a in got["attempts"]}
    assert parse_time(by[0]["started_at"]) == start0  # SLURM's StartTime, not the process's
    assert parse_time(by[1000]["started_at"]) == start1000
    assert start0 < parse_time(by[1]["started_at"]) < slurm_time(queued["SubmitTime"])
    assert parse_time(got["ended_at"]) == end
    assert got["l1"]["nof"] == 2
    assert {k: v for k, v in got["l1"]["nof_by_kind"].items() if v} == {
        "app_error": 1,
        "preemption": 1,
    }
    crash, requeued = got["l1"]["failures"]
    assert crash["attempt"] == 0 and crash["kind"] == "app_error" and not crash["inferred"]
    assert "worker crash in attempt 0" in crash["message"]
    assert parse_time(crash["ts"]) == pytest.approx(crashes[0], abs=0.05)
    assert requeued["attempt"] == 1 and requeued["kind"] == "preemption"
    # SLURM prints the requeue's SubmitTime in whole seconds (truncated), the agent keeps the fraction.
    assert requeue_called - 1 <= parse_time(requeued["ts"]) < slurm_time(queued["SubmitTime"]) + 1
    # Each TTR runs from its failure to the next attempt's first (effective) step.
    assert crash["ttr_s"] == pytest.approx(first_steps[1] - crashes[0], abs=0.05)
    assert requeued["ttr_s"] == pytest.approx(
        first_steps[1000] - parse_time(requeued["ts"]), abs=0.05
    )
    # Queue time is SLURM's: before the first start and from the requeue to the next start;
    # the in-place restart's wait (crash to attempt 1) is hardware setup, not scheduling.
    stopped = min(parse_time(by[1]["ended_at"]), parse_time(requeued["ts"]))
    queue = (start0 - slurm_time(first["SubmitTime"])) + (start1000 - stopped)
    # REST rounds seconds to 3 decimals: half a millisecond more than the timestamps' own slack.
    assert got["components"]["scheduling"] == pytest.approx(queue, abs=2e-3)
    in_place_wait = parse_time(by[1]["started_at"]) - parse_time(crash["ts"])
    assert in_place_wait > 0
    assert got["components"]["hardware_setup"] >= in_place_wait - 1e-3
    assert got["components"]["effective_training"] > 0


def test_zz_under_five_percent_of_failures_have_no_cause(live: LiveServer) -> None:
    """Over every job this module ran through SLURM (the last test of the module)."""
    jobs = live.get("/api/v1/jobs?limit=500")["jobs"]
    failures = [
        f for job in jobs for f in live.get(f"/api/v1/jobs/{job['job_id']}/ett")["l1"]["failures"]
    ]
    assert len(failures) >= 3
    unknown = [f for f in failures if f["cause"] == "unknown"]
    share = len(unknown) / len(failures)
    print(f"unknown-cause share on the SLURM tests: {len(unknown)}/{len(failures)} = {share:.1%}")
    assert share < 0.05, unknown
