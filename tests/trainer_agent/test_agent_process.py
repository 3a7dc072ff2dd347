"""The agent inside real processes: SIGTERM, uncaught exceptions, fork, exit while the API hangs."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

from tests.trainer_agent.fake_ingest import FakeIngest
from trainer_agent.spool import Spool, job_spool_dir

REPO = Path(__file__).resolve().parents[2]


def run_trainer(
    body: str, server: FakeIngest, tmp_path: Path, job_id: str = "job-proc", **popen: object
) -> subprocess.Popen[str]:
    """Start a python process that makes an agent (handlers installed) and runs `body`."""
    script = textwrap.dedent(
        """
        import os, signal, sys, threading, time
        from trainer_agent import Agent
        agent = Agent({job!r}, 0, {url!r}, "secret", spool_dir={spool!r}, exit_timeout_s=3,
                      rank=0, heartbeat_s=0)
        """
    ).format(job=job_id, url=server.url, spool=str(tmp_path / "spool")) + textwrap.dedent(body)
    env = dict(os.environ, PYTHONPATH=str(REPO))
    return subprocess.Popen(
        [sys.executable, "-c", script],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        **popen,  # type: ignore[arg-type]
    )


def test_sigterm_is_a_preemption_and_the_process_still_dies_of_it(
    fake_ingest: FakeIngest, tmp_path: Path
) -> None:
    proc = run_trainer(
        """
        for i in range(3):
            agent.step(cursor=i + 1)
        print("ready", flush=True)
        time.sleep(60)
        """,
        fake_ingest,
        tmp_path,
    )
    assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=20) == -signal.SIGTERM
    failures = fake_ingest.of_type("failure")
    assert [f["kind"] for f in failures] == ["preemption"]
    assert fake_ingest.of_type("attempt_ended")[0]["reason"] == "preempted"
    assert sum(p["steps"] for p in fake_ingest.of_type("progress")) == 2
    # A trainer that owns its job ends it as preempted (no restart follows it here).
    assert [e["status"] for e in fake_ingest.of_type("job_ended")] == ["preempted"]


def test_sigterm_chains_to_the_previous_handler(fake_ingest: FakeIngest, tmp_path: Path) -> None:
    # A trainer's own handler, installed before the agent existed, must still run.
    script_head = textwrap.dedent(
        """
        import os, signal, sys, time
        seen = []
        signal.signal(signal.SIGTERM, lambda s, f: seen.append(s))
        from trainer_agent import Agent
        agent = Agent("job-chain", 0, {url!r}, "secret", spool_dir={spool!r}, rank=0, heartbeat_s=0)
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(0.5)
        print("seen", seen, flush=True)
        agent.close(timeout=3)
        """
    ).format(url=fake_ingest.url, spool=str(tmp_path / "spool"))
    out = subprocess.run(
        [sys.executable, "-c", script_head],
        env=dict(os.environ, PYTHONPATH=str(REPO)),
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert out.returncode == 0, out.stderr
    assert "seen [15]" in out.stdout
    chained = [e for e in fake_ingest.events.values() if e["job_id"] == "job-chain"]
    assert [e["kind"] for e in chained if e["type"] == "failure"] == ["preemption"]
    assert [e["reason"] for e in chained if e["type"] == "attempt_ended"] == ["preempted"]


def test_uncaught_exception_is_an_app_error(fake_ingest: FakeIngest, tmp_path: Path) -> None:
    proc = run_trainer(
        """
        with agent.phase("trainer_init"):
            pass
        raise RuntimeError("loss is NaN at step 17")
        """,
        fake_ingest,
        tmp_path,
    )
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 1
    assert "loss is NaN at step 17" in err  # the original excepthook still printed it
    failure = fake_ingest.of_type("failure")
    assert [f["kind"] for f in failure] == ["app_error"]
    assert "RuntimeError: loss is NaN at step 17" in failure[0]["message"]
    assert fake_ingest.of_type("attempt_ended")[0]["reason"] == "failure"


def test_thread_exception_is_an_app_error(fake_ingest: FakeIngest, tmp_path: Path) -> None:
    proc = run_trainer(
        """
        def loader():
            raise ValueError("corrupt shard 12")
        t = threading.Thread(target=loader, name="loader")
        t.start(); t.join()
        agent.close(timeout=3)
        """,
        fake_ingest,
        tmp_path,
    )
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    assert "corrupt shard 12" in err
    failure = fake_ingest.of_type("failure")
    assert failure[0]["kind"] == "app_error" and "in thread loader" in failure[0]["message"]


def test_sender_thread_is_restarted_in_a_forked_child(
    fake_ingest: FakeIngest, tmp_path: Path
) -> None:
    proc = run_trainer(
        """
        agent.flush(5)
        pid = os.fork()
        if pid == 0:
            with agent.phase("custom.child_work"):
                pass
            ok = agent.flush(5)
            names = [t.name for t in threading.enumerate()]
            print("child", ok, "ett-agent-sender" in names, flush=True)
            agent.close(timeout=3)
            os._exit(0)
        os.waitpid(pid, 0)
        with agent.phase("custom.parent_work"):
            pass
        agent.close(timeout=3)
        """,
        fake_ingest,
        tmp_path,
    )
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    assert "child True True" in out
    phases = sorted(e["phase"] for e in fake_ingest.of_type("phase"))
    assert phases == ["custom.child_work", "custom.parent_work", "trainer_init.process_start"]
    # The child never ends its parent's attempt.
    assert len(fake_ingest.of_type("attempt_ended")) == 1
    assert all(n == 1 for n in fake_ingest.deliveries.values())


def test_exit_while_the_api_hangs_is_bounded_and_spools(
    fake_ingest: FakeIngest, tmp_path: Path
) -> None:
    fake_ingest.hang()
    started = time.monotonic()
    proc = run_trainer(
        """
        for i in range(5):
            agent.step(cursor=i + 1)
        agent.failure("infra", "nccl timeout")
        sys.exit(3)
        """,
        fake_ingest,
        tmp_path,
        job_id="job-exit-hang",
    )
    proc.communicate(timeout=30)
    assert proc.returncode == 3
    assert time.monotonic() - started < 3 + 8  # exit_timeout_s plus interpreter start-up
    spool = Spool(job_spool_dir(tmp_path / "spool", "job-exit-hang"))
    assert spool.pending_bytes() > 0  # pending, or claimed by the dead process's stuck sender
    fake_ingest.unhang()
    from trainer_agent import Agent

    agent = Agent(
        "job-exit-hang",
        1,
        fake_ingest.url,
        "secret",
        spool_dir=tmp_path / "spool",
        install_handlers=False,
    )
    assert agent.flush(timeout=10)
    agent.close(timeout=3)
    first = [e for e in fake_ingest.events.values() if e.get("attempt") == 0]
    assert sorted({e["type"] for e in first}) == [
        "attempt_ended",
        "attempt_started",
        "failure",
        "phase",
        "progress",
    ]
