"""Seed the per-job tables directly: a small fleet whose numbers the tests know exactly."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy.orm import Session

from backend.ett.models import JobInterval, JobResult
from backend.jobs.models import Job, Model

# (component, phase, seconds) in wall order; scheduling first, then the attempt.
HEALTHY: tuple[tuple[str, str | None, float], ...] = (
    ("scheduling", "scheduling", 300.0),
    ("hardware_setup", "hardware_setup", 120.0),
    ("trainer_init", "trainer_init.first_batch", 180.0),
    ("pt2_compile", "pt2_compile", 300.0),
    ("effective_training", None, 5400.0),
    ("shutdown", "shutdown", 60.0),
)


def ensure_model(s: Session, name: str, owner: str = "ml-team") -> None:
    """Add a model row once."""
    if s.get(Model, name) is None:
        s.add(Model(name=name, owner=owner, tier="t1", labels={}, created_at=0.0))
        s.flush()


def seed_job(
    s: Session,
    job_id: str,
    model: str,
    start: float,
    pieces: Sequence[tuple[str, str | None, float]] = HEALTHY,
    *,
    gpus: int = 8,
    failures: Sequence[dict[str, Any]] = (),
    labels: dict[str, str] | None = None,
    attempt: int = 0,
) -> float:
    """Write one finished job laid end to end from pieces; returns its end time."""
    ensure_model(s, model)
    t = start
    intervals = []
    for component, phase, seconds in pieces:
        intervals.append((t, t + seconds, component, phase))
        t += seconds
    effective = sum(e - b for b, e, c, _ in intervals if c == "effective_training")
    e2e = t - start
    s.add(
        Job(
            job_id=job_id,
            model=model,
            gpus=gpus,
            labels=labels or {},
            config={},
            submitted_at=start,
            ended_at=t,
            status="succeeded",
            dirty=False,
            created_at=start,
            updated_at=t,
        )
    )
    s.flush()
    s.add(
        JobResult(
            job_id=job_id,
            computed_at=t,
            model=model,
            gpus=gpus,
            status="succeeded",
            provisional=False,
            submitted_at=start,
            ended_at=t,
            e2e_s=e2e,
            effective_s=effective,
            ett_pct=100.0 * effective / e2e,
            gpu_hours_lost=(e2e - effective) * gpus / 3600,
            nof=len(failures),
            tts_s=0.0,
            recovery_s=0.0,
            result={"failures": list(failures)},
        )
    )
    for b, e, component, phase in intervals:
        s.add(
            JobInterval(
                job_id=job_id, attempt=attempt, start=b, end=e, component=component, phase=phase
            )
        )
    s.flush()
    return t


def slow_scheduling(extra_s: float) -> tuple[tuple[str, str | None, float], ...]:
    """The healthy job with a longer queue wait."""
    return (("scheduling", "scheduling", 300.0 + extra_s), *HEALTHY[1:])
