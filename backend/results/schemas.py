"""Response models of the job routes: GET /jobs and GET /jobs/{job_id}/ett (docs/API.md).

Times are RFC 3339 UTC strings; units are in the field names (`_s` seconds). The answer is the
engine's `JobETT.to_dict` (stored, or extended to now for an open job) plus `quarantine`;
tests/backend/ett/test_job_ett_schema.py checks these models name every key of it.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

from backend.ett.catalogue import (
    COMPONENTS_HELP,
    FAILURE_CAUSES,
    FAILURE_DOMAINS,
    FAILURE_KINDS,
    WASTE_KINDS,
)


class JobSummary(BaseModel):
    """One row of the job list."""

    job_id: str
    model: str | None
    team: str | None = Field(description="the job's team: its owner label, else its model's team")
    owner: str | None = Field(description="deprecated: the same as team", deprecated=True)
    labels: dict[str, Any]
    gpus: int
    status: str
    provisional: bool
    submitted_at: str | None
    ended_at: str | None
    e2e_s: float
    effective_s: float
    ett_pct: float
    gpu_hours_lost: float = Field(description="GPU-hours lost")
    nof: int
    tts_s: float
    recovery_s: float
    component_gpu_h: float | None = Field(
        None, description="with component=: the GPU-hours the job spent in it (whole job)"
    )


class JobPage(BaseModel):
    """A page of jobs and the total that matched."""

    total: int
    limit: int
    offset: int
    start: str | None = Field(None, description="the range asked for (jobs overlapping it)")
    end: str | None = None
    jobs: list[JobSummary]


class CascadeRead(BaseModel):
    """Another failure reported by the same attempt (another rank, the scheduler): a cascade."""

    ts: str = Field(description="when it was reported")
    kind: str = Field(description=f"one of {', '.join(FAILURE_KINDS)}")
    cause: str = Field(description=f"one of {', '.join(FAILURE_CAUSES)}")
    domain: str = Field(description=f"one of {', '.join(FAILURE_DOMAINS)}")
    planned: bool = Field(description="preemption, maintenance, a user cancel or a drill")
    rank: int | None = Field(description="the rank that reported it, when it said")
    event_id: str | None = Field(description="the failure event")
    message: str | None = Field(description="the sender's message, if any")


class FailureRead(BaseModel):
    """One failure (an interruption) and its recovery window (Level 1): its initiating cause,
    and the attempt's other failures as its cascade."""

    ts: str = Field(description="when it happened")
    kind: str = Field(description=f"one of {', '.join(FAILURE_KINDS)}")
    attempt: int = Field(description="the attempt it ended")
    inferred: bool = Field(description="no failure event: inferred from job_ended failed")
    event_id: str | None = Field(description="the failure event (null when inferred)")
    message: str | None = Field(description="the sender's message, if any")
    ttr_s: float = Field(description="time to recover: to the next effective training")
    interrupted: bool = Field(description="another failure came before the recovery")
    censored: bool = Field(description="the job ended (or is still open) before it recovered")
    cause: str = Field(
        "unknown", description=f"the initiating cause: one of {', '.join(FAILURE_CAUSES)}"
    )
    domain: str = Field("unknown", description=f"one of {', '.join(FAILURE_DOMAINS)}")
    planned: bool = Field(False, description="preemption, maintenance, a user cancel or a drill")
    rank: int | None = Field(None, description="the rank that reported it, when it said")
    cascade: list[CascadeRead] = Field(
        default_factory=list,
        description="the attempt's other failures, by time (docs/ACCOUNTING.md, cascade rule)",
    )


class Level1Read(BaseModel):
    """Level-1 metrics: the same wall time cut by the failures."""

    tts_s: float = Field(description="time to start: submission to the first effective training")
    tts_interrupted: bool = Field(description="a failure came before the first training")
    tts_censored: bool = Field(description="the job never trained and never failed")
    ttr_s: list[float] = Field(description="each failure's time to recover, in failure order")
    failures: list[FailureRead]
    nof: int = Field(description="number of failures")
    nof_by_kind: dict[str, int] = Field(description="failures per kind, zeros included")
    recovery_s: float = Field(description="the sum of the TTRs")
    in_loop_waste_s: float = Field(
        description="lost time outside TTS and the TTRs, before the last effective training"
    )
    final_shutdown_s: float = Field(
        description="lost time outside the TTRs, after the last effective training"
    )


class PhaseRead(BaseModel):
    """One phase's time: as reported, and the part not hidden by a layer above it."""

    total_s: float = Field(description="the union of its spans")
    exposed_s: float = Field(description="the part of it that counts against ETT%")


class AttemptRead(BaseModel):
    """One attempt: its span, why it ended, where it ran."""

    attempt: int
    started_at: str
    ended_at: str | None = Field(description="null while the attempt is running")
    reason: str | None = Field(description="why it ended (attempt_ended reason, or failure)")
    host: str | None = Field(None, description="the host it ran on, when the events say")
    gpus: int | None = Field(None, description="its GPUs, when its events say (null: the job's)")
    hosts: list[str] = Field(
        default_factory=list,
        description="every host it ran on (attempt_started host and hosts, heartbeat host), at "
        "most 1024; empty in results stored before hosts were recorded",
    )
    hosts_total: int | None = Field(
        None, description="how many hosts it ran on (more than `hosts` lists past the bound)"
    )
    in_place: bool | None = Field(
        None,
        description="an in-place restart (torchrun restarted the workers on the capacity the "
        "previous attempt held); absent in results stored before it was recorded",
    )
    label: str | None = Field(
        None,
        description="the number in words, as the agent and the SLURM hooks number attempts "
        "(allocation x 1000 + in-place restart): 'requeue 1' for 1000, 'requeue 1, in-place "
        "restart 1' for 1001, 'in-place restart 1' for an in-place 1; null for the first "
        "allocation's other attempts (docs/AGENT.md)",
    )


class WarningRead(BaseModel):
    """One data-quality rule the engine applied (docs/ACCOUNTING.md), with the events it touched."""

    code: str
    message: str
    count: int = Field(description="how many events it touched")
    event_ids: list[str] = Field(description="their ids, sorted (at most 1,000)")


class IntervalRead(BaseModel):
    """One attributed interval of the partition: every second of the job is in exactly one."""

    start: str
    end: str
    attempt: int | None = Field(description="null between attempts")
    component: str
    phase: str | None = Field(description="the phase, or the kind of wasted training")
    gpus: int | None = Field(
        None,
        description="the GPUs its seconds are charged at: its attempt's, the job's outside "
        "attempts (absent in results stored before per-attempt GPUs)",
    )


class QuarantineRead(BaseModel):
    """A job whose computation fails: its error and when it is tried next."""

    error: str
    failures: int
    first_failed_at: str
    last_failed_at: str
    retry_at: str


class JobEtt(BaseModel):
    """GET /jobs/{job_id}/ett: one job's accounting (seconds, GPU-hours, percentages)."""

    job_id: str
    model: str | None
    gpus: int
    labels: dict[str, Any] = Field(description="the job's submission labels")
    status: str | None = Field(description="running, succeeded, failed, cancelled, ...")
    provisional: bool = Field(description="the job is open: its end is now and moves")
    abandoned: bool = Field(description="open but silent past the abandon timeout")
    events: int | None = Field(
        None,
        description="distinct raw events this result was computed from (absent in results "
        "stored before it was recorded)",
    )
    live_tail_start: str | None = Field(
        description="an open job's last event: the time after it is provisional"
    )
    submitted_at: str
    ended_at: str = Field(description="the job's end (now, for an open job)")
    e2e_s: float = Field(description="wall time, submission to end")
    effective_s: float = Field(description="seconds of effective training")
    ett_pct: float = Field(description="effective_s / e2e_s x 100")
    gpu_hours_lost: float = Field(
        description="GPU-hours lost: (e2e_gpu_s - effective_gpu_s) / 3600, each lost second at "
        "the GPUs of its attempt"
    )
    e2e_gpu_s: float | None = Field(
        None,
        description="wall GPU-seconds, each second at its attempt's GPUs (the job's outside "
        "attempts); absent in results stored before per-attempt GPUs",
    )
    effective_gpu_s: float | None = Field(
        None, description="effective GPU-seconds, each at its attempt's GPUs; absent likewise"
    )
    components: dict[str, float] = Field(description=f"seconds {COMPONENTS_HELP}")
    wasted: dict[str, float] = Field(
        description=f"seconds of wasted training by kind ({', '.join(WASTE_KINDS)})"
    )
    l1: Level1Read
    phases: dict[str, PhaseRead] = Field(description="per reported phase")
    attempts: list[AttemptRead]
    warnings: list[WarningRead]
    intervals: list[IntervalRead] = Field(description="the attributed intervals, in time order")
    quarantine: QuarantineRead | None = Field(
        description="null, or the error of a job whose recompute fails (its answer here is the "
        "last one stored)"
    )


class JobUncomputable(BaseModel):
    """422 of GET /jobs/{job_id}/ett: nothing could be computed for the job."""

    detail: str = Field(description="job '<id>' cannot be computed: <the error>")
    quarantine: QuarantineRead | None
