"""Hand-computable jobs for the analytics tests (wire events; times in epoch seconds).

D0 is a UTC midnight (a Saturday); every expected number in the tests is worked out from the
timelines below by hand.
"""

from __future__ import annotations

from typing import Any

D0 = 1_777_075_200.0  # 2026-04-25T00:00:00Z, a Saturday
DAY = 86_400.0


class Job:
    """Collects one job's wire events with sequential ids."""

    def __init__(self, job_id: str) -> None:
        self.job_id = job_id
        self.events: list[dict[str, Any]] = []

    def add(self, etype: str, attempt: int | None = None, **fields: Any) -> Job:
        """Append one event."""
        ev: dict[str, Any] = {
            "event_id": f"{self.job_id}-{len(self.events):04d}",
            "job_id": self.job_id,
            "type": etype,
            **fields,
        }
        if attempt is not None:
            ev["attempt"] = attempt
        self.events.append(ev)
        return self

    def phase(self, attempt: int, name: str, start: float, end: float) -> Job:
        """A completed span."""
        return self.add("phase", attempt, phase=name, start=start, end=end)

    def progress(self, attempt: int, start: float, end: float, c0: float, c1: float) -> Job:
        """A training-loop window."""
        return self.add(
            "progress", attempt, start=start, end=end, cursor_start=c0, cursor_end=c1, steps=10
        )


def job_a() -> Job:
    """m-a, 8 GPUs, across midnight, no failure.

    Day D0-1: scheduling 600, hardware_setup 600, trainer_init 600, pt2_compile 600,
    effective 1200 (s). Day D0: effective 5900, checkpoint_blocking 100, shutdown 300.
    """
    j = Job("job-a")
    j.add(
        "job_submitted",
        ts=D0 - 3600,
        model="m-a",
        gpus=8,
        labels={"owner": "ranking", "variant": "baseline"},
    )
    j.add("attempt_started", 0, ts=D0 - 3000)
    j.phase(0, "trainer_init", D0 - 2400, D0 - 1800)
    j.phase(0, "pt2_compile", D0 - 1800, D0 - 1200)
    j.progress(0, D0 - 1200, D0 + 6000, 0, 7200)
    j.add("checkpoint", 0, start=D0 + 2000, blocking_end=D0 + 2100)
    j.add("attempt_ended", 0, ts=D0 + 6000, reason="completed")
    j.add("job_ended", ts=D0 + 6300, status="succeeded")
    return j


def job_b() -> Job:
    """m-b, 2 GPUs, on D0, one preemption.

    trainer_init 400, effective 1500, scheduling 300, replay 500 (s); TTS 200, TTR 1000.
    """
    j = Job("job-b")
    j.add("job_submitted", ts=D0 + 1000, model="m-b", gpus=2, labels={"owner": "ads", "team": "x"})
    j.add("attempt_started", 0, ts=D0 + 1000)
    j.phase(0, "trainer_init", D0 + 1000, D0 + 1200)
    j.progress(0, D0 + 1200, D0 + 2200, 0, 1000)
    j.add("failure", 0, ts=D0 + 2200, kind="preemption")
    j.add("attempt_ended", 0, ts=D0 + 2200, reason="preempted")
    j.add("attempt_started", 1, ts=D0 + 2500)
    j.phase(1, "trainer_init", D0 + 2500, D0 + 2700)
    j.progress(1, D0 + 2700, D0 + 3700, 500, 1500)
    j.add("attempt_ended", 1, ts=D0 + 3700, reason="completed")
    j.add("job_ended", ts=D0 + 3700, status="succeeded")
    return j


def pair_job(
    job_id: str,
    t: float,
    *,
    init_s: float,
    restart_init_s: float,
    shutdown_s: float,
    variant: str,
    model: str = "m-c",
) -> Job:
    """A job of `model` (4 GPUs) with one app_error failure, for the compare tests.

    600 s of scheduling before each attempt, trainer_init of `init_s` (attempt 0) and
    `restart_init_s` (attempt 1), 3600 s of training before the failure, 3600 s after it of
    which the first 600 s replay, then `shutdown_s`. So TTS = 600 + init_s,
    TTR = 600 + restart_init_s + 600, final shutdown = shutdown_s, effective = 6600.
    """
    j = Job(job_id)
    j.add(
        "job_submitted",
        ts=t,
        model=model,
        gpus=4,
        labels={"variant": variant},
        config={"checkpoint_interval_s": 1800},
    )
    j.add("attempt_started", 0, ts=t + 600)
    j.phase(0, "trainer_init", t + 600, t + 600 + init_s)
    a0 = t + 600 + init_s
    j.progress(0, a0, a0 + 3600, 0, 3600)
    j.add("failure", 0, ts=a0 + 3600, kind="app_error")
    j.add("attempt_ended", 0, ts=a0 + 3600, reason="failure")
    s1 = a0 + 3600 + 600
    j.add("attempt_started", 1, ts=s1)
    j.phase(1, "trainer_init", s1, s1 + restart_init_s)
    b0 = s1 + restart_init_s
    j.progress(1, b0, b0 + 3600, 3000, 6600)
    j.add("attempt_ended", 1, ts=b0 + 3600, reason="completed")
    j.add("job_ended", ts=b0 + 3600 + shutdown_s, status="succeeded")
    return j
