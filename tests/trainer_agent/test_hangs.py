"""Hangs are visible within one window, and the "no progress while alive" SLO fires while hung.

Real processes that block (a loop that stops stepping; a hang inside an open phase span) report
to a real `ett serve` that evaluates a copy of the shipped SLO with a short objective.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from backend.alerts.slos import load_slo_file
from tests.trainer_agent.live_server import LiveServer

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
WINDOW_S = 0.5
OBJECTIVE_S = 3.0


@pytest.fixture(scope="module")
def alerting(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    """`ett serve` evaluating the shipped no-progress SLO, with a 3 s objective, twice a second."""
    home = tmp_path_factory.mktemp("ett-hangs")
    shipped = next(s for s in load_slo_file().slos if s.indicator == "no_progress_s")
    slo = shipped.to_doc()
    slo.update(objective=OBJECTIVE_S, window_s=60.0, for_s=0.0)
    slo["window"], slo["for"] = slo.pop("window_s"), slo.pop("for_s")
    (home / "slos.yaml").write_text(yaml.safe_dump({"slos": [slo]}))
    server = LiveServer(home)
    server.env.update(
        ETT_ALERTS_ENABLED="true",
        ETT_ALERT_EVAL_INTERVAL_S="0.5",
        ETT_SLOS_FILE=str(home / "slos.yaml"),
    )
    server.start()
    yield server
    server.close()


def start_trainer(server: LiveServer, job: str, body: str, tmp_path: Path) -> subprocess.Popen:
    script = textwrap.dedent(
        f"""
        import threading, time
        import trainer_agent
        agent = trainer_agent.init(model="hang-test", gpus=1, progress_window_s={WINDOW_S},
                                   heartbeat_s=0.5)
        """
    ) + textwrap.dedent(body)
    env = {k: v for k, v in os.environ.items() if not k.startswith("ETT_")}
    env.update(
        PYTHONPATH=str(REPO),
        ETT_ENDPOINT=server.url,
        ETT_TOKEN=server.token,
        ETT_JOB_ID=job,
        ETT_SPOOL_DIR=str(tmp_path / "spool"),
    )
    return subprocess.Popen(
        [sys.executable, "-c", script], env=env, stdout=subprocess.PIPE, text=True
    )


def wait_until(check: Any, timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = check()
        if last:
            return last
        time.sleep(0.25)
    raise AssertionError(f"timed out waiting for {what}")


def firing_for(server: LiveServer, job: str) -> dict[str, Any] | None:
    for alert in server.get("/api/v1/alerts?slo=no_progress_while_alive"):
        drivers = [d["job_id"] for d in alert["job_drivers"]]
        if alert["state"] == "firing" and job in drivers:
            return alert
    return None


def stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=10)


def test_a_loop_that_stops_stepping_shows_as_stalled_and_fires(
    alerting: LiveServer, tmp_path: Path
) -> None:
    job = "hang-in-loop"
    proc = start_trainer(
        alerting,
        job,
        """
        for i in range(1, 101):
            agent.step(i)
            time.sleep(0.01)
        print("hung", flush=True)
        threading.Event().wait(120)  # the loop blocks: no more step() calls
        """,
        tmp_path,
    )
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "hung"
        hung_at = time.time()

        def stalled() -> dict[str, Any] | None:
            answer = alerting.get(f"/api/v1/jobs/{job}/ett")
            return answer if answer["wasted"].get("stalled", 0) > 0 else None

        answer = wait_until(stalled, 20, "stalled wasted training")
        # Seen within about one window (quiet for a window, then the next quarter-window tick),
        # plus the server's recompute: not after the heartbeat timeout.
        assert time.time() - hung_at < 10
        assert answer["provisional"] and answer["effective_s"] > 0
        stored = alerting.stored_events(job)
        idle = [e for e in stored if e["type"] == "progress" and e["steps"] == 0]
        assert idle and all(e["cursor_start"] == e["cursor_end"] == 100 for e in idle)
        alert = wait_until(lambda: firing_for(alerting, job), 30, "the no-progress alert")
        assert alert["owner"] == "trainer" and alert["value"] > OBJECTIVE_S
        assert proc.poll() is None, "the alert must fire while the job is still hung"
        # A stalled window goes out every window period while the loop stays stopped.
        count = len([e for e in alerting.stored_events(job) if e["type"] == "progress"])
        time.sleep(4 * WINDOW_S)
        later = len([e for e in alerting.stored_events(job) if e["type"] == "progress"])
        assert later >= count + 2
    finally:
        stop(proc)


def test_a_hang_inside_a_phase_is_an_open_span_and_fires(
    alerting: LiveServer, tmp_path: Path
) -> None:
    job = "hang-in-phase"
    proc = start_trainer(
        alerting,
        job,
        """
        with agent.phase("trainer_init.process_group"):
            print("hung", flush=True)
            threading.Event().wait(120)  # e.g. init_process_group waiting for a dead peer
        """,
        tmp_path,
    )
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "hung"
        alert = wait_until(lambda: firing_for(alerting, job), 30, "the no-progress alert")
        assert alert["value"] > OBJECTIVE_S
        assert proc.poll() is None, "the alert must fire while the job is still hung"
        stored = alerting.stored_events(job)
        (open_span,) = [e for e in stored if e["type"] == "phase_started"]
        assert open_span["phase"] == "trainer_init.process_group" and open_span.get("span_id")
        assert not [e for e in stored if e["type"] == "phase" and e["phase"] == open_span["phase"]]
        assert [e for e in stored if e["type"] == "heartbeat"]  # alive: the sender still beats
        answer = alerting.get(f"/api/v1/jobs/{job}/ett")
        assert answer["provisional"] and answer["effective_s"] == 0
    finally:
        stop(proc)
