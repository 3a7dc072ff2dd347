"""Real processes that block are paged within their model's learned bound plus a minute.

A real `ett serve` (on SQLite and on Postgres) learns the bounds of model `hang-test` from its
finished history (sent through ingest), runs the live pass twice a second, and sends notices to a
local HTTP receiver. Real trainer processes then block: a loop that stops stepping with its
heartbeats alive, and a hang inside `trainer_init.process_group`. Each is seen as stalled or open
within a window, and paged, naming the job, at most 60 s after the bound is crossed.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from backend.alerts.slos import load_slo_file
from tests.backend.alerts.conftest import HttpReceiver, serve_receiver
from tests.backend.live import fleet
from tests.conftest import DIALECTS, empty_database
from tests.trainer_agent.live_server import LiveServer

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
MODEL = "hang-test"
WINDOW_S = 0.5
# The model's history: 2 s windows, process groups of 2.0-2.9 s. Learned with a 1 s floor:
# loop 3 x 2 = 6 s; process group 3 x p95 (2.855 s) = 8.565 s.
HISTORY_WINDOW_S = 2.0
PAGE_WITHIN_S = 60.0


class Alerting:
    """The live server, its receiver and the bounds it learned for the model."""

    def __init__(self, server: LiveServer, receiver: HttpReceiver, bounds: dict[str, float]):
        self.server = server
        self.receiver = receiver
        self.bounds = bounds


def _post(server: LiveServer, events: list[dict[str, Any]]) -> None:
    req = urllib.request.Request(
        server.url + "/api/v1/events",
        data=json.dumps({"events": events}).encode(),
        headers={"Authorization": f"Bearer {server.token}", "Content-Type": "application/json"},
    )
    with urllib.request.urlopen(req, timeout=60) as answer:
        assert json.loads(answer.read())["rejected"] == []


def wait_until(check: Any, timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        last = check()
        if last:
            return last
        time.sleep(0.2)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")


@pytest.fixture(scope="module", params=DIALECTS)
def alerting(
    request: pytest.FixtureRequest, _databases: Any, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Alerting]:
    """`ett serve` with the shipped hang SLO and a fast live pass, its bounds learned."""
    db = _databases.get(request.param)
    empty_database(db)
    home = tmp_path_factory.mktemp(f"ett-hangs-{request.param}")
    hung = next(s for s in load_slo_file().slos if s.indicator == "live_hung").to_doc()
    hung["window"], hung["for"] = hung.pop("window_s"), hung.pop("for_s")
    with serve_receiver() as receiver:
        channels = {
            "trainer": [{"name": "hook", "kind": "webhook", "target": f"{receiver.url}/trainer"}]
        }
        (home / "slos.yaml").write_text(yaml.safe_dump({"slos": [hung], "channels": channels}))
        server = LiveServer(home, database_url=db.url)
        server.env.update(
            ETT_ALERTS_ENABLED="true",
            ETT_LIVE_EVAL_INTERVAL_S="0.5",
            ETT_SLOS_FILE=str(home / "slos.yaml"),
            ETT_BOUNDS_FLOOR_S="1",
            ETT_BOUNDS_REFRESH_INTERVAL_S="1",
        )
        server.start()
        try:
            t0 = time.time() - 3 * 3600
            history = []
            for i in range(10):
                history += fleet.finished(
                    f"hist-{i}",
                    MODEL,
                    t0 + 600 * i,
                    process_group_s=2.0 + 0.1 * i,
                    compile_s=5.0,
                    window_s=HISTORY_WINDOW_S,
                )
            _post(server, history)

            def learned() -> dict[str, float] | None:
                rows = server.get(f"/api/v1/live/bounds?model={MODEL}&samples=0")["bounds"]
                got = {r["phase"]: r for r in rows if r["variant"] == ""}
                if got["loop"]["source"] != "model":
                    return None
                return {k: v["bound_s"] for k, v in got.items()}

            bounds = wait_until(learned, 60, "the bounds learned from the history")
            assert bounds["loop"] == pytest.approx(3 * HISTORY_WINDOW_S)
            assert bounds["trainer_init.process_group"] == pytest.approx(8.565)
            yield Alerting(server, receiver, bounds)
        finally:
            server.close()


def start_trainer(server: LiveServer, job: str, body: str, tmp_path: Path) -> subprocess.Popen:
    script = textwrap.dedent(
        f"""
        import threading, time
        import trainer_agent
        agent = trainer_agent.init(model={MODEL!r}, gpus=8, progress_window_s={WINDOW_S},
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


def notice_for(receiver: HttpReceiver, job: str, status: str = "firing") -> Any:
    for req in receiver.on("/trainer"):
        for alert in req.body["alerts"]:
            if alert["labels"].get("job_id") == job and alert["status"] == status:
                return req, alert
    return None


def stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=10)


def test_a_loop_that_stops_stepping_is_paged_within_its_bound_plus_a_minute(
    alerting: Alerting, tmp_path: Path
) -> None:
    job = "hang-in-loop"
    proc = start_trainer(
        alerting.server,
        job,
        """
        for i in range(1, 101):
            agent.step(i)
            time.sleep(0.01)
        print("hung", flush=True)
        threading.Event().wait(180)  # the loop blocks: no more step() calls
        """,
        tmp_path,
    )
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "hung"
        hung_at = time.time()

        def stalled() -> dict[str, Any] | None:
            answer = alerting.server.get(f"/api/v1/jobs/{job}/ett")
            return answer if answer["wasted"].get("stalled", 0) > 0 else None

        answer = wait_until(stalled, 20, "stalled wasted training")
        # Seen within about one window (quiet for a window, then the next quarter-window tick)
        # plus the server's recompute: not after the heartbeat timeout.
        assert time.time() - hung_at < 10
        assert answer["provisional"] and answer["effective_s"] > 0
        bound = alerting.bounds["loop"]
        req, alert = wait_until(
            lambda: notice_for(alerting.receiver, job), bound + PAGE_WITHIN_S, "the hang's page"
        )
        # The loop's last advance is at most a window before the hang was printed.
        assert req.at - hung_at <= bound + PAGE_WITHIN_S
        assert req.at >= hung_at, "paged before the loop stopped: a false page"
        assert alert["labels"]["phase"] == "loop" and alert["labels"]["model"] == MODEL
        assert alert["annotations"]["bound"] == "6 s"
        assert proc.poll() is None, "the page must come while the job is still hung"
        print(f"loop hang paged {req.at - hung_at:.1f} s after it began (bound {bound:.1f} s)")
        # The state is the same on REST: hung:loop, owner trainer.
        live = alerting.server.get(f"/api/v1/live/jobs/{job}")
        assert live["state"] == "hung:loop" and live["owner"] == "trainer"
    finally:
        stop(proc)


def test_a_hang_inside_process_group_is_paged_within_its_bound_plus_a_minute(
    alerting: Alerting, tmp_path: Path
) -> None:
    job = "hang-in-phase"
    proc = start_trainer(
        alerting.server,
        job,
        """
        with agent.phase("trainer_init.process_group"):
            print("hung", flush=True)
            threading.Event().wait(180)  # e.g. init_process_group waiting for a dead peer
        """,
        tmp_path,
    )
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "hung"
        hung_at = time.time()
        bound = alerting.bounds["trainer_init.process_group"]
        req, alert = wait_until(
            lambda: notice_for(alerting.receiver, job), bound + PAGE_WITHIN_S, "the hang's page"
        )
        assert bound <= req.at - hung_at + 1.0, "paged before the bound: a false page"
        assert req.at - hung_at <= bound + PAGE_WITHIN_S
        assert alert["labels"]["phase"] == "trainer_init.process_group"
        assert alert["labels"]["owner"] == "trainer"
        assert "learned from 10 samples" in alert["annotations"]["description"]
        assert proc.poll() is None, "the page must come while the job is still hung"
        print(
            f"process group hang paged {req.at - hung_at:.1f} s after it began (bound {bound:.1f} s)"
        )
        answer = alerting.server.get(f"/api/v1/jobs/{job}/ett")
        assert answer["provisional"] and answer["effective_s"] == 0
    finally:
        stop(proc)
