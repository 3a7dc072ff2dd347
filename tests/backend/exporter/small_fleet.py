"""A small hand-computable fleet for the exporter tests, placed just before a given `now`.

Three models of three teams: every job is finished except `live-1`, which is open (training).
Each builder returns the job's wire events; the docstrings give the expected seconds.
"""

from __future__ import annotations

from typing import Any

from tests.backend.fleet.fleet_jobs import Job


def finished_a(t: float, job_id: str = "a-1") -> Job:
    """m-a (ranking), 8 GPUs: scheduling 60, hardware_setup 60, trainer_init 120,
    pt2_compile 60, effective 1000 - 30 blocking, checkpoint_blocking 30, shutdown 60. E2E 1360."""
    j = Job(job_id)
    j.add("job_submitted", ts=t, model="m-a", gpus=8, labels={"owner": "ranking"})
    j.add("attempt_started", 0, ts=t + 60)
    j.phase(0, "trainer_init", t + 120, t + 240)
    j.phase(0, "pt2_compile", t + 240, t + 300)
    j.progress(0, t + 300, t + 1300, 0, 1000)
    j.add("checkpoint", 0, start=t + 700, blocking_end=t + 730)
    j.add("attempt_ended", 0, ts=t + 1300, reason="completed")
    j.add("job_ended", ts=t + 1360, status="succeeded")
    return j


def finished_b(t: float, job_id: str = "b-1") -> Job:
    """m-b (ads), 2 GPUs, one preemption: effective 800, replay 200, trainer_init 200, ..."""
    j = Job(job_id)
    j.add("job_submitted", ts=t, model="m-b", gpus=2, labels={"owner": "ads"})
    j.add("attempt_started", 0, ts=t)
    j.phase(0, "trainer_init", t, t + 100)
    j.progress(0, t + 100, t + 600, 0, 500)
    j.add("failure", 0, ts=t + 600, kind="preemption")
    j.add("attempt_ended", 0, ts=t + 600, reason="preempted")
    j.add("attempt_started", 1, ts=t + 700)
    j.phase(1, "trainer_init", t + 700, t + 800)
    j.progress(1, t + 800, t + 1300, 300, 800)
    j.add("attempt_ended", 1, ts=t + 1300, reason="completed")
    j.add("job_ended", ts=t + 1300, status="succeeded")
    return j


def finished_c(t: float, job_id: str = "c-1") -> Job:
    """m-c (search), 4 GPUs, one app_error and a data stall."""
    j = Job(job_id)
    j.add("job_submitted", ts=t, model="m-c", gpus=4, labels={"owner": "search"})
    j.add("attempt_started", 0, ts=t + 30)
    j.phase(0, "trainer_init.device_init", t + 30, t + 90)
    j.phase(0, "trainer_init.first_batch", t + 90, t + 150)
    j.progress(0, t + 150, t + 450, 0, 300)
    j.progress(0, t + 450, t + 550, 300, 300)
    j.add("failure", 0, ts=t + 550, kind="app_error")
    j.add("attempt_ended", 0, ts=t + 550, reason="failure")
    j.add("attempt_started", 1, ts=t + 600)
    j.progress(1, t + 620, t + 1020, 300, 700)
    j.phase(1, "publish", t + 1020, t + 1080)
    j.add("attempt_ended", 1, ts=t + 1080, reason="completed")
    j.add("job_ended", ts=t + 1100, status="succeeded")
    return j


def live(t: float, job_id: str = "live-1") -> Job:
    """m-a, 16 GPUs, still training (no attempt_ended or job_ended)."""
    j = Job(job_id)
    j.add("job_submitted", ts=t, model="m-a", gpus=16, labels={"owner": "ranking"})
    j.add("attempt_started", 0, ts=t + 10)
    j.progress(0, t + 20, t + 200, 0, 180)
    return j


def submissions(jobs: list[Job]) -> list[dict[str, Any]]:
    """Each job's job_submitted event: makes its model known before it finishes."""
    return [j.events[0] for j in jobs]


def rest_of(jobs: list[Job]) -> list[dict[str, Any]]:
    """Every event but the job_submitted ones."""
    return [e for j in jobs for e in j.events[1:]]
