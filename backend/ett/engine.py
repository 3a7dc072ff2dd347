"""The ETT accounting engine: one job's raw events in, its partition and Level-1 metrics out.

Pure and database-free. `compute_job` never raises on malformed timelines: every repair is a
documented rule (backend.ett.timeline.WARNING_RULES) listed in the result's `warnings`.
"""

from __future__ import annotations

import gc
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from backend.ett.catalogue import COMPONENTS, WASTE_KINDS, attempt_label
from backend.ett.level1 import Level1, level1
from backend.ett.livefacts import live_facts
from backend.ett.partition import (
    EFFECTIVE,
    WASTED,
    Partition,
    PhaseTime,
    Piece,
    partition,
    piece_gpus,
)
from backend.ett.timeline import AttemptInfo, Timeline, build_timeline
from backend.liveness import ABANDON_TIMEOUT_S, HEARTBEAT_TIMEOUT_S


@dataclass(slots=True)
class Interval:
    """One attributed piece of a job's wall time."""

    start: float
    end: float
    attempt: int | None
    component: str
    phase: str | None
    # The GPUs its seconds are charged at (partition.piece_gpus).
    gpus: int = 1

    @property
    def duration_s(self) -> float:
        """Length in seconds."""
        return self.end - self.start

    @property
    def gpu_s(self) -> float:
        """GPU-seconds: its length times the GPUs it is charged at."""
        return (self.end - self.start) * self.gpus


@dataclass(slots=True)
class AttemptSummary:
    """One attempt as the views and the attempts table show it."""

    attempt: int
    started_at: float
    ended_at: float | None
    reason: str | None
    host: str | None
    gpus: int | None
    # An in-place restart (attempt_started.in_place); in the stored result, not the attempts table.
    in_place: bool = False
    # Its hosts (at most catalogue.MAX_HOSTS; the attempt_hosts table) and how many there were.
    hosts: list[str] = field(default_factory=list)
    hosts_total: int = 0

    def to_dict(self) -> dict[str, Any]:
        """JSON shape (times as epoch seconds): the attempts table's row."""
        return {
            "attempt": self.attempt,
            "started_at": self.started_at,
            "ended_at": self.ended_at,
            "reason": self.reason,
            "host": self.host,
            "gpus": self.gpus,
            "hosts_total": self.hosts_total or None,
        }


@dataclass(slots=True)
class JobETT:
    """The engine's answer for one job."""

    job_id: str | None
    model: str | None
    gpus: int
    labels: dict[str, Any]
    config: dict[str, Any]
    status: str | None
    provisional: bool
    abandoned: bool
    submitted_at: float
    ended_at: float
    e2e_s: float
    components: dict[str, float]
    wasted: dict[str, float]
    l1: Level1
    phases: dict[str, PhaseTime]
    warnings: list[dict[str, Any]]
    intervals: list[Interval] = field(default_factory=list)
    attempts: list[AttemptSummary] = field(default_factory=list)
    # An open job's time after its last event: still provisional ("now" moves), shown as such.
    live_tail_start: float | None = None
    # Every phase span at its full extent, hidden parts included: (attempt, phase, start, end).
    spans: list[tuple[int, str, float, float]] = field(default_factory=list)
    # Distinct raw events the answer was computed from.
    events: int = 0
    # What the live state of an open job is derived from (backend.ett.livefacts): attempts,
    # open spans, the last cursor advance, the current piece. Stored with the result.
    live: dict[str, Any] = field(default_factory=dict)
    # GPU-seconds, each interval at the GPUs of its attempt (partition.piece_gpus).
    e2e_gpu_s: float = 0.0
    effective_gpu_s: float = 0.0

    @property
    def effective_s(self) -> float:
        """Seconds of effective training."""
        return self.components["effective_training"]

    @property
    def ett_pct(self) -> float:
        """ETT% = effective / E2E x 100 (0 for an empty job)."""
        return self.effective_s / self.e2e_s * 100.0 if self.e2e_s > 0 else 0.0

    @property
    def gpu_hours_lost(self) -> float:
        """Lost GPU-seconds / 3600: each lost second at the GPUs it is charged at."""
        return (self.e2e_gpu_s - self.effective_gpu_s) / 3600.0

    def to_dict(
        self,
        *,
        with_intervals: bool = True,
        with_spans: bool = False,
        time_format: Callable[[float], Any] | None = None,
    ) -> dict[str, Any]:
        """The REST shape of issue 3 item 4; times go through `time_format` (default: epoch floats).

        `with_spans` adds the phase spans as [attempt, phase, start, end] and the live facts
        (`live`), in epoch seconds, for the stored result (the advice and the live state read
        them), not for REST.
        """
        fmt = time_format or (lambda t: t)
        l1 = self.l1.to_dict()
        for f in l1["failures"]:
            f["ts"] = fmt(f["ts"])
            for c in f["cascade"]:
                c["ts"] = fmt(c["ts"])
        out: dict[str, Any] = {
            "job_id": self.job_id,
            "model": self.model,
            "gpus": self.gpus,
            "labels": self.labels,
            "status": self.status,
            "provisional": self.provisional,
            "abandoned": self.abandoned,
            "events": self.events,
            "live_tail_start": None if self.live_tail_start is None else fmt(self.live_tail_start),
            "submitted_at": fmt(self.submitted_at),
            "ended_at": fmt(self.ended_at),
            "e2e_s": self.e2e_s,
            "effective_s": self.effective_s,
            "ett_pct": self.ett_pct,
            "gpu_hours_lost": self.gpu_hours_lost,
            "e2e_gpu_s": self.e2e_gpu_s,
            "effective_gpu_s": self.effective_gpu_s,
            "components": dict(self.components),
            "wasted": dict(self.wasted),
            "l1": l1,
            "phases": {
                name: {"total_s": pt.total_s, "exposed_s": pt.exposed_s}
                for name, pt in sorted(self.phases.items())
            },
            "attempts": [
                {
                    **a.to_dict(),
                    "started_at": fmt(a.started_at),
                    "ended_at": None if a.ended_at is None else fmt(a.ended_at),
                    "in_place": a.in_place,
                    "hosts": list(a.hosts),
                    "hosts_total": a.hosts_total,
                    "label": attempt_label(a.attempt, a.in_place),
                }
                for a in self.attempts
            ],
            "warnings": self.warnings,
        }
        if with_intervals:
            out["intervals"] = [
                {
                    "start": fmt(iv.start),
                    "end": fmt(iv.end),
                    "attempt": iv.attempt,
                    "component": iv.component,
                    "phase": iv.phase,
                    "gpus": iv.gpus,
                }
                for iv in self.intervals
            ]
        if with_spans:
            out["spans"] = [list(sp) for sp in self.spans]
            out["live"] = self.live
        return out


def _summaries(attempts: list[AttemptInfo]) -> list[AttemptSummary]:
    return [
        AttemptSummary(
            attempt=a.attempt,
            started_at=a.start,
            ended_at=None if a.live else (a.ended_at if a.ended_at is not None else a.end),
            reason=a.reason if a.reason is not None else ("failure" if a.failure else None),
            host=a.host,
            gpus=a.gpus,
            in_place=a.in_place,
            hosts=a.hosts,
            hosts_total=a.hosts_total,
        )
        for a in sorted(attempts, key=lambda x: x.attempt)
    ]


def _sums(pieces: list[Piece]) -> tuple[dict[str, float], dict[str, float]]:
    components = dict.fromkeys(COMPONENTS, 0.0)
    wasted = dict.fromkeys(WASTE_KINDS, 0.0)
    for s, e, _a, comp, phase in pieces:
        components[comp] += e - s
        if comp == WASTED and phase is not None:
            wasted[phase] += e - s
    return components, wasted


@contextmanager
def _cycle_gc_paused() -> Iterator[None]:
    # The engine allocates no reference cycles, but its many short-lived objects trigger
    # collections that rescan every event dict of a large job (about 15% of the time at 100k
    # events). Refcounting still frees everything; GC is restored only if we turned it off.
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def compute_parts(
    events: Iterable[Mapping[str, Any]],
    *,
    now: float,
    heartbeat_timeout_s: float = HEARTBEAT_TIMEOUT_S,
    abandon_timeout_s: float = ABANDON_TIMEOUT_S,
    custom_phases: Mapping[str, str] | None = None,
) -> tuple[Timeline, Partition]:
    """The repaired timeline and the partition of one job's events (compute_job's first half)."""
    with _cycle_gc_paused():
        tl = build_timeline(
            events,
            now=now,
            heartbeat_timeout_s=heartbeat_timeout_s,
            abandon_timeout_s=abandon_timeout_s,
        )
        return tl, partition(tl, custom_phases)


def account(
    tl: Timeline,
    pieces: list[Piece],
    phases: dict[str, PhaseTime],
    *,
    loops: Mapping[int, Mapping[str, Any]] | None = None,
) -> JobETT:
    """The answer from a timeline and its partition: sums, Level 1, live facts, GPU-seconds.

    A function of the pieces and the timeline's attempts, spans, failures and meta; the
    windows are read only for the loop facts, which `loops` may give instead (the incremental
    accounting of backend.ett.incremental passes the ones it keeps).
    """
    with _cycle_gc_paused():
        components, wasted = _sums(pieces)
        l1 = level1(pieces, tl.failures, tl.submitted_at, tl.ended_at)
        live = live_facts(tl, pieces, loops=loops)
        gpus = piece_gpus(tl, pieces)
        intervals = [Interval(*p, g) for p, g in zip(pieces, gpus, strict=True)]
    return job_answer(
        tl,
        components=components,
        wasted=wasted,
        l1=l1,
        phases=phases,
        intervals=intervals,
        live=live,
        e2e_gpu_s=sum(iv.gpu_s for iv in intervals),
        effective_gpu_s=sum(iv.gpu_s for iv in intervals if iv.component == EFFECTIVE),
    )


def job_answer(
    tl: Timeline,
    *,
    components: dict[str, float],
    wasted: dict[str, float],
    l1: Level1,
    phases: dict[str, PhaseTime],
    intervals: list[Interval],
    live: dict[str, Any],
    e2e_gpu_s: float,
    effective_gpu_s: float,
) -> JobETT:
    """The JobETT of a timeline from its sums (the full and the incremental accounting's end)."""
    return JobETT(
        job_id=tl.job_id,
        model=tl.model,
        gpus=tl.gpus,
        labels=tl.labels,
        config=tl.config,
        status=tl.status,
        provisional=tl.provisional,
        abandoned=tl.abandoned,
        submitted_at=tl.submitted_at,
        ended_at=tl.ended_at,
        e2e_s=tl.ended_at - tl.submitted_at,
        components=components,
        wasted=wasted,
        l1=l1,
        phases=phases,
        warnings=tl.warnings.to_list(),
        intervals=intervals,
        attempts=_summaries(tl.attempts),
        live_tail_start=(
            min(tl.last_event_at, tl.ended_at)
            if tl.provisional and tl.last_event_at < tl.ended_at
            else None
        ),
        spans=[(sp.attempt, sp.phase, sp.start, sp.end) for sp in tl.spans],
        events=tl.events,
        live=live,
        e2e_gpu_s=e2e_gpu_s,
        effective_gpu_s=effective_gpu_s,
    )


def compute_job(
    events: Iterable[Mapping[str, Any]],
    *,
    now: float,
    heartbeat_timeout_s: float = HEARTBEAT_TIMEOUT_S,
    abandon_timeout_s: float = ABANDON_TIMEOUT_S,
    custom_phases: Mapping[str, str] | None = None,
) -> JobETT:
    """Account one job's events: partition of [submission, end], phases, Level 1, warnings."""
    tl, part = compute_parts(
        events,
        now=now,
        heartbeat_timeout_s=heartbeat_timeout_s,
        abandon_timeout_s=abandon_timeout_s,
        custom_phases=custom_phases,
    )
    return account(tl, part.pieces, part.phases)


__all__ = [
    "EFFECTIVE",
    "AttemptSummary",
    "Interval",
    "JobETT",
    "account",
    "compute_job",
    "compute_parts",
]
