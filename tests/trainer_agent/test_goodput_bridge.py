"""Google's ml-goodput-measurement (0.2.3, offline) through GoodputLogger, against a live server.

One job, two attempts (a crash, a restart from a checkpoint step): the recorder's calls stay as
Google documents them, with our logger as cloud_logger. Our ETT% sits beside
GoodputCalculator.get_job_goodput computed from the same logger's entries, and the difference is
exactly what the definitions say (docs/OTLP.md): the time before the first job_start_time and
after the last job_end_time, and the replayed steps.
"""

from __future__ import annotations

import datetime
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from ml_goodput_measurement.src import goodput

from tests.ingest.twins import settled
from tests.trainer_agent.live_server import LiveServer
from trainer_agent import Agent
from trainer_agent.bridges.goodput import GoodputLogger

pytestmark = pytest.mark.slow
JOB = "goodput-run"


@pytest.fixture
def live(database: Any, tmp_path: Path) -> Iterator[LiveServer]:
    """`ett serve` on this test's database (SQLite or Postgres)."""
    server = LiveServer(tmp_path, database_url=database.url)
    server.start()
    yield server
    server.close()


def _epoch(text: str) -> float:
    return datetime.datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def agent_for(live: LiveServer, attempt: int, spool: Path, **kw: Any) -> Agent:
    return Agent(JOB, attempt, live.url, live.token, spool_dir=spool, rank=0, heartbeat_s=0,
                 install_handlers=False, job_owner="scheduler", progress_window_s=0.5, **kw)  # fmt: skip


def run_attempt(recorder: Any, first_step: int, last_step: int) -> None:
    recorder.record_job_start_time()
    recorder.record_tpu_init_start_time()
    time.sleep(0.2)
    recorder.record_tpu_init_end_time()
    recorder.record_training_preparation_start_time()
    time.sleep(0.2)
    recorder.record_training_preparation_end_time()
    recorder.record_data_loading_start_time()
    time.sleep(0.1)
    recorder.record_data_loading_end_time()
    for step in range(first_step, last_step + 1):
        recorder.record_step_start_time(step)
        time.sleep(0.02)


def test_goodput_recorder_job_beside_google_goodput(live: LiveServer, tmp_path: Path) -> None:
    spool = tmp_path / "spool"
    scheduler = Agent(JOB, 0, live.url, live.token, spool_dir=spool, report_attempt=False,
                      report_progress=False, heartbeat_s=0, install_handlers=False,
                      job_owner="scheduler")  # fmt: skip
    submitted = time.time()
    scheduler.job_submitted("maxtext", 8, ts=submitted)
    time.sleep(1.0)  # queued: before Google's first job_start_time
    monkey = pytest.MonkeyPatch()
    monkey.setattr("trainer_agent.agent.process_start_time", lambda: None)
    first = agent_for(live, 0, spool)
    logger = GoodputLogger(first, JOB)
    recorder = goodput.GoodputRecorder(JOB, "goodput", logging_enabled=True, cloud_logger=logger)
    run_attempt(recorder, 0, 99)  # checkpointed at step 50 (outside the recorder in 0.2.3)
    first.failure("app_error", "crash after step 99")
    logger.flush()
    assert first.close(timeout=20)
    time.sleep(0.5)
    second = agent_for(live, 1, spool)
    logger.attach(second)
    run_attempt(recorder, 50, 199)
    recorder.record_job_end_time()  # the bridge closes the attempt here
    assert second.close(timeout=20)
    time.sleep(1.0)  # teardown: after Google's last job_end_time
    scheduler.job_ended("succeeded")
    assert scheduler.close(timeout=20)
    monkey.undo()

    ours = settled(live, JOB, want_status="succeeded")
    calculator = goodput.GoodputCalculator(JOB, "goodput", cloud_logger=logger,
                                           cache_dir=str(tmp_path))  # fmt: skip
    google_pct, badput, last_step = calculator.get_job_goodput(include_badput_breakdown=True)
    assert last_step == 199
    entries, _ = logger.read_cloud_logging_entries()
    starts = [e["job_start_time"] for e in entries if "job_start_time" in e]
    end = [e["job_end_time"] for e in entries if "job_end_time" in e][-1]
    google_total = end - min(starts)
    google_productive = google_pct / 100.0 * google_total
    # Pre-attempt time and final teardown: in our E2E, not in Google's total job time.
    submitted_at, ended_at = (_epoch(ours["submitted_at"]), _epoch(ours["ended_at"]))
    outside = (min(starts) - submitted_at) + (ended_at - end)
    assert outside > 1.5
    assert ours["e2e_s"] == pytest.approx(google_total + outside, abs=0.2)
    # Replay (steps 50-99 again) is wasted for both; Google counts it as wasted progress.
    assert ours["wasted"]["replay"] > 0.5
    assert badput[goodput.BadputType.WASTED_PROGRESS_FROM_DISRUPTION] > 0.5
    assert ours["l1"]["nof"] == 1
    assert ours["phases"]["trainer_init.device_init"]["total_s"] == pytest.approx(0.4, abs=0.15)
    # Productive time differs by the definitions only: ours over a longer E2E, so a lower share.
    assert ours["ett_pct"] < google_pct
    assert abs(ours["effective_s"] - google_productive) < 1.0, (
        ours["effective_s"],
        google_productive,
    )
    print(f"ETT% {ours['ett_pct']:.1f} beside Google goodput {google_pct:.1f} "
          f"({datetime.timedelta(seconds=ours['e2e_s'])} vs {google_total:.1f} s)")  # fmt: skip
