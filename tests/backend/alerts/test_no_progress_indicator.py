"""The no_progress_s indicator on both databases: live open jobs only, from the last effective instant."""

from __future__ import annotations

from backend.alerts.indicators import measure
from backend.alerts.slos import SloSpec
from backend.db import Database
from backend.ett.models import JobInterval, JobResult
from backend.jobs.models import Attempt, Job
from tests.backend.alerts.fleet import ensure_model

NOW = 1_800_000_000.0


def _job(
    s, job_id: str, *, open_: bool, last_event: float, attempt_start: float, effective_end=None
) -> None:
    ensure_model(s, "m")
    start = attempt_start - 100
    s.add(
        Job(
            job_id=job_id,
            model="m",
            gpus=8,
            labels={},
            config={},
            submitted_at=start,
            ended_at=None if open_ else last_event,
            status=None if open_ else "succeeded",
            dirty=False,
            last_event_at=last_event,
            created_at=start,
            updated_at=last_event,
        )
    )
    s.flush()
    s.add(
        JobResult(
            job_id=job_id,
            computed_at=NOW,
            model="m",
            gpus=8,
            status="running" if open_ else "succeeded",
            provisional=open_,
            submitted_at=start,
            ended_at=None if open_ else last_event,
            e2e_s=1.0,
            effective_s=0.0,
            ett_pct=0.0,
            gpu_hours_lost=0.0,
            nof=0,
            tts_s=0.0,
            recovery_s=0.0,
            result={},
        )
    )
    s.add(Attempt(job_id=job_id, attempt=0, started_at=attempt_start))
    if effective_end is not None:
        s.add(
            JobInterval(
                job_id=job_id,
                attempt=0,
                start=attempt_start + 10,
                end=effective_end,
                component="effective_training",
                phase=None,
            )
        )
        s.add(
            JobInterval(
                job_id=job_id,
                attempt=0,
                start=effective_end,
                end=NOW,
                component="wasted_training",
                phase="stalled",
            )
        )
    s.flush()


def test_no_progress_counts_live_open_jobs_from_their_last_effective_instant(
    database: Database,
) -> None:
    slo = SloSpec(
        name="np",
        owner="trainer",
        component="effective_training",
        indicator="no_progress_s",
        objective=600,
        window="10m",
    )
    with database.session() as s:
        # Hung loop: trained until 900 s ago, still heartbeating.
        _job(
            s,
            "hung-loop",
            open_=True,
            last_event=NOW - 5,
            attempt_start=NOW - 3000,
            effective_end=NOW - 900,
        )
        # Hung in a phase of a fresh attempt: never trained, started 700 s ago.
        _job(s, "hung-phase", open_=True, last_event=NOW - 30, attempt_start=NOW - 700)
        # Healthy: trained a second ago.
        _job(
            s,
            "healthy",
            open_=True,
            last_event=NOW - 1,
            attempt_start=NOW - 3000,
            effective_end=NOW - 1,
        )
        # Dead (no event for 20 minutes) and ended jobs are not "alive".
        _job(
            s,
            "dead",
            open_=True,
            last_event=NOW - 1200,
            attempt_start=NOW - 9000,
            effective_end=NOW - 5000,
        )
        _job(
            s,
            "ended",
            open_=False,
            last_event=NOW - 10,
            attempt_start=NOW - 9000,
            effective_end=NOW - 5000,
        )
        s.commit()
        (ev,) = measure(s, slo, NOW)
    assert ev.value == 900.0 and ev.jobs == 3
    assert [(d["job_id"], d["value"]) for d in ev.job_drivers] == [
        ("hung-loop", 900.0),
        ("hung-phase", 700.0),
        ("healthy", 1.0),
    ]
    assert slo.breached(ev.value)


def test_no_progress_has_no_value_without_live_jobs(database: Database) -> None:
    slo = SloSpec(
        name="np",
        owner="trainer",
        component="effective_training",
        indicator="no_progress_s",
        objective=600,
        window="10m",
    )
    with database.session() as s:
        assert measure(s, slo, NOW) == []
