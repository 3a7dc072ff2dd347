"""Seed the per-job tables directly: a small fleet whose numbers the tests know exactly."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy.orm import Session

from backend.ett.models import JobInterval, JobResult
from backend.fleet.rollups import refresh_job_rollups
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
            result={"l1": {"failures": list(failures)}},
        )
    )
    for b, e, component, phase in intervals:
        s.add(
            JobInterval(
                job_id=job_id, attempt=attempt, start=b, end=e, component=component, phase=phase
            )
        )
    s.flush()
    refresh_job_rollups(db_session=s, job_ids=[job_id])  # as every recompute does
    return t


def slow_scheduling(extra_s: float) -> tuple[tuple[str, str | None, float], ...]:
    """The healthy job with a longer queue wait."""
    return (("scheduling", "scheduling", 300.0 + extra_s), *HEALTHY[1:])


def job_events(
    job_id: str,
    model: str,
    t0: float,
    *,
    gpus: int = 8,
    preempted_queue_s: float | None = None,
) -> list[dict[str, Any]]:
    """Wire events of one job; with preempted_queue_s, attempt 0 is preempted and re-queued."""
    n = 0

    def ev(etype: str, attempt: int | None, **fields: Any) -> dict[str, Any]:
        nonlocal n
        n += 1
        return {
            "event_id": f"{job_id}-{n}",
            "job_id": job_id,
            "type": etype,
            "attempt": attempt,
            **fields,
        }

    out = [ev("job_submitted", None, ts=t0, model=model, gpus=gpus)]
    t = t0 + 300.0
    out += [
        ev("attempt_started", 0, ts=t),
        ev("phase", 0, phase="trainer_init", start=t + 60, end=t + 600),
        ev("phase", 0, phase="pt2_compile", start=t + 600, end=t + 900),
        ev("progress", 0, start=t + 900, end=t + 4500, cursor_start=0, cursor_end=3600, steps=3600),
    ]
    t += 4500
    if preempted_queue_s is not None:
        out += [
            ev("failure", 0, ts=t, kind="preemption"),
            ev("attempt_ended", 0, ts=t, reason="preempted"),
        ]
        t += preempted_queue_s
        out += [
            ev("attempt_started", 1, ts=t),
            ev("phase", 1, phase="trainer_init", start=t + 60, end=t + 600),
            ev("phase", 1, phase="checkpoint_restore", start=t + 600, end=t + 700),
            ev(
                "progress",
                1,
                start=t + 700,
                end=t + 2500,
                cursor_start=3000,
                cursor_end=4800,
                steps=1800,
            ),
        ]
        t += 2500
        out.append(ev("attempt_ended", 1, ts=t, reason="completed"))
    else:
        out.append(ev("attempt_ended", 0, ts=t, reason="completed"))
    out.append(ev("job_ended", None, ts=t + 60, status="succeeded"))
    return out
