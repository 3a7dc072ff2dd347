"""SPEC 4 "Live state": what an open job is doing now, from its stored result, its bounds and now.

Pure, no database, no clock of its own: `live_state(result, bounds, now)` reads the live facts
the engine keeps with every result (backend/ett/livefacts.py), so every API replica, the
/metrics collector and the live alert pass answer the same for the same `now`. It changes no
accounting: it names what the partition already says.

States (docs/ALERTS.md, "Live states"), the bad ones first in the order one is chosen when
several hold: `hung:<phase>` (also `hung:loop`, `hung:hardware_setup`, `hung:unattributed`),
`silent`, `crash_looping`, `restart_storm`; then `checkpointing`, `training`,
`starting:<component>`, `queued`. Each bad condition that holds is a `Detection`, with when it
began (the instant the bound was crossed), its bound, the overrun, and the GPU-hours it has
lost so far and loses per hour.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from backend.ett.catalogue import is_ancestor, resolve_phase
from backend.live.bounds import (
    HARDWARE_SETUP,
    LOOP,
    UNATTRIBUTED,
    Bound,
    compile_variant,
)

# The bad kinds, in the order the state names one when several hold.
BAD_KINDS = ("hung", "silent", "crash_looping", "restart_storm")
STATES = (
    "queued",
    "starting",
    "training",
    "checkpointing",
    "hung",
    "crash_looping",
    "restart_storm",
    "silent",
)
HOUR_S = 3600.0

BoundLookup = Callable[[str, str], Bound]


@dataclass(frozen=True, slots=True)
class LiveRules:
    """The detectors' parameters (ETT_HEARTBEAT_TIMEOUT_S, ETT_LIVE_* settings)."""

    heartbeat_timeout_s: float = 300.0
    abandon_timeout_s: float = 3600.0
    crash_loop_attempts: int = 3
    restart_storm_attempts: int = 5
    restart_storm_window_s: float = 3600.0


@dataclass(slots=True)
class Detection:
    """One bad condition of a job that holds now."""

    kind: str  # silent | hung | crash_looping | restart_storm
    state: str  # e.g. hung:trainer_init.process_group
    since: float  # when the condition began: the instant its bound was crossed
    overrun_s: float  # now - since
    lost_gpu_h: float  # GPU-hours lost so far to it
    lost_gpu_h_per_h: float  # GPU-hours it loses per hour now
    phase: str | None = None
    component: str | None = None
    attempt: int | None = None
    bound_s: float | None = None
    bound_source: str | None = None
    bound_samples: int = 0
    started_at: float | None = None  # when what is judged began (span start, last advance, ...)
    detail: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """JSON shape (times as epoch seconds)."""
        return {
            "kind": self.kind,
            "state": self.state,
            "since": self.since,
            "overrun_s": self.overrun_s,
            "lost_gpu_h": self.lost_gpu_h,
            "lost_gpu_h_per_h": self.lost_gpu_h_per_h,
            "phase": self.phase,
            "component": self.component,
            "attempt": self.attempt,
            "bound_s": self.bound_s,
            "bound_source": self.bound_source,
            "bound_samples": self.bound_samples,
            "started_at": self.started_at,
            "detail": dict(self.detail),
        }


@dataclass(slots=True)
class LiveState:
    """An open job's live state now."""

    job_id: str | None
    model: str | None
    gpus: int
    state: str
    since: float
    attempt: int | None = None
    component: str | None = None
    phase: str | None = None
    detections: list[Detection] = field(default_factory=list)

    @property
    def kind(self) -> str:
        """The state without its detail: `hung` for `hung:loop`, `starting` for `starting:x`."""
        return self.state.split(":", 1)[0]

    @property
    def bad(self) -> bool:
        """True for silent, hung, crash_looping and restart_storm."""
        return self.kind in BAD_KINDS

    @property
    def primary(self) -> Detection | None:
        """The detection that names the state (None for a good state)."""
        return self.detections[0] if self.bad and self.detections else None

    def to_dict(self) -> dict[str, Any]:
        """JSON shape (times as epoch seconds)."""
        p = self.primary
        return {
            "job_id": self.job_id,
            "model": self.model,
            "gpus": self.gpus,
            "state": self.state,
            "kind": self.kind,
            "bad": self.bad,
            "since": self.since,
            "attempt": self.attempt,
            "component": self.component,
            "phase": self.phase,
            "bound_s": p.bound_s if p else None,
            "overrun_s": p.overrun_s if p else None,
            "gpu_hours_burned": p.lost_gpu_h if p else None,
            "detections": [d.to_dict() for d in self.detections],
        }


def _gpu_h(seconds: float, gpus: int) -> float:
    return max(seconds, 0.0) * gpus / HOUR_S


def _silent(
    facts: Mapping[str, Any], current: Mapping[str, Any] | None, now: float, rules: LiveRules
) -> float | None:
    """When the job went silent (last event + heartbeat timeout), or None.

    A job waiting in the queue sends nothing and is not silent: only a running attempt (live,
    or stopped by an inferred failure, i.e. it stopped sending) can be.
    """
    last = facts.get("last_event_at")
    if last is None or current is None:
        return None
    running = current.get("stopped_at") is None or (
        current.get("failure_inferred") and current.get("ended_at") is None
    )
    if not running or now - last <= rules.heartbeat_timeout_s:
        return None
    return last + rules.heartbeat_timeout_s


def _hang(
    facts: Mapping[str, Any],
    attempt: Mapping[str, Any],
    first_attempt: int,
    bounds: BoundLookup,
    now: float,
) -> tuple[str, float, float, Bound, str | None, float] | None:
    """(phase, started, crossed, bound, component, last advance) of the live attempt's hang."""
    a = attempt["attempt"]
    loop_start = attempt.get("loop_started_at")
    advance = attempt.get("last_advance_at")
    ref = max(x for x in (loop_start, advance) if x is not None) if loop_start is not None else None
    spans = [(p, s) for at, p, s in facts.get("open_spans") or [] if at == a]
    if ref is not None:
        # In the loop: a phase opened after the last advance (a recompile) is judged as that
        # phase; otherwise the gap since the last cursor advance against the loop's bound.
        spans = [(p, s) for p, s in spans if s >= ref]
        if not spans:
            bound = bounds(LOOP, "")
            return LOOP, ref, ref + bound.bound_s, bound, None, ref
    if spans:
        restored = attempt.get("restore_started_at")
        best = None
        for phase, start in spans:
            variant = compile_variant(phase, a, start, first_attempt, restored)
            bound = bounds(phase, variant)
            crossed = start + bound.bound_s
            leaf = not any(is_ancestor(phase, other) for other, _s in spans)
            key = (crossed, 0 if leaf else 1)
            if best is None or key < best[0]:
                best = (key, phase, start, bound)
        assert best is not None
        _key, phase, start, bound = best
        return (
            phase,
            start,
            start + bound.bound_s,
            bound,
            resolve_phase(phase).component,
            ref or start,
        )
    if attempt.get("first_span_at") is None:
        bound = bounds(HARDWARE_SETUP, "")
        start = attempt["started_at"]
        return HARDWARE_SETUP, start, start + bound.bound_s, bound, "hardware_setup", start
    current = facts.get("current") or {}
    if current.get("attempt") == a and current.get("component") == UNATTRIBUTED:
        bound = bounds(UNATTRIBUTED, "")
        start = current["since"]
        return UNATTRIBUTED, start, start + bound.bound_s, bound, UNATTRIBUTED, start
    return None


def _crash_loop(attempts: list[Mapping[str, Any]], k: int) -> tuple[float, int, float] | None:
    """(since, attempts that made no progress, high-water) when the last k failed attempts in a
    row never got past the high-water cursor of the attempts before them, else None."""
    if k <= 0 or len(attempts) < 2:
        return None
    best = float("-inf")
    run = 0
    since: float | None = None
    for i, a in enumerate(attempts):
        high = a.get("cursor_high")
        high = float("-inf") if high is None else float(high)
        if i == 0:
            best = high
            continue
        if a.get("stopped_at") is None:
            # the live attempt ends the loop once it passes the mark (new data: progress)
            if high > best:
                run, since = 0, None
            break
        if a.get("failed_at") is not None and high <= best:
            run += 1
            if run == k:
                since = a["failed_at"]
        else:
            run, since = 0, None
        best = max(best, high)
    if run >= k and since is not None:
        return since, run, best
    return None


def _restart_storm(
    starts: list[float], n: int, window: float, now: float
) -> tuple[float, int] | None:
    """(since, attempts in the window) while at least n attempts started in (now - window, now]."""
    if n <= 0 or len(starts) < n:
        return None
    recent = [s for s in starts if now - window < s <= now]
    if len(recent) < n:
        return None
    # The storm holds on [s_j, s_(j-n+1) + window) for every j; since = start of the run of
    # overlapping intervals that reaches now.
    intervals = [(starts[j], starts[j - n + 1] + window) for j in range(n - 1, len(starts))]
    intervals = [iv for iv in intervals if iv[1] > iv[0]]
    since = None
    reach = float("-inf")
    for s, e in intervals:
        if s > now:
            break
        if since is None or s > reach:
            since = s
        reach = max(reach, e)
    if since is None or reach <= now:
        return None
    return since, len(recent)


def live_state(
    result: Mapping[str, Any],
    bounds: BoundLookup,
    now: float,
    rules: LiveRules | None = None,
) -> LiveState | None:
    """The live state of an open job's stored result at `now`; None for a finished one.

    `bounds(phase, variant)` gives the bound in force for the job's model (a BoundSet).
    """
    if not result.get("provisional"):
        return None
    rules = rules or LiveRules()
    facts = result.get("live") or {}
    gpus = int(result.get("gpus") or 1)
    submitted_at = result.get("submitted_at")
    submitted = float(now if submitted_at is None else submitted_at)
    job = LiveState(
        job_id=result.get("job_id"),
        model=result.get("model"),
        gpus=gpus,
        state="queued",
        since=submitted,
    )
    if "attempts" not in facts:
        job.state = "unknown"  # a result stored before live facts existed: recompute it
        return job
    last_event = facts.get("last_event_at")
    if last_event is not None and now - last_event > rules.abandon_timeout_s:
        return None  # abandoned since the result was stored: it ends at its last event
    attempts = sorted(facts["attempts"], key=lambda a: (a["started_at"], a["attempt"]))
    current = attempts[-1] if attempts else None
    last_eff = facts.get("last_effective_at")
    origin = last_eff if last_eff is not None else submitted
    lost_since_effective = _gpu_h(now - origin, gpus)
    found: list[Detection] = []

    silent_since = _silent(facts, current, now, rules)
    if silent_since is not None:
        found.append(
            Detection(
                kind="silent",
                state="silent",
                since=silent_since,
                overrun_s=now - silent_since,
                lost_gpu_h=lost_since_effective,
                lost_gpu_h_per_h=float(gpus),
                attempt=current["attempt"] if current else None,
                bound_s=rules.heartbeat_timeout_s,
                bound_source="heartbeat_timeout",
                started_at=facts.get("last_event_at"),
            )
        )
    live_attempt = current if current is not None and current.get("stopped_at") is None else None
    if live_attempt is not None:
        first = min(a["attempt"] for a in attempts)
        hang = _hang(facts, live_attempt, first, bounds, now)
        if hang is not None:
            phase, started, crossed, bound, component, _ref = hang
            if now > crossed:
                state = "hung:" + phase
                found.append(
                    Detection(
                        kind="hung",
                        state=state,
                        since=crossed,
                        overrun_s=now - crossed,
                        lost_gpu_h=lost_since_effective,
                        lost_gpu_h_per_h=float(gpus),
                        phase=phase,
                        component=component,
                        attempt=live_attempt["attempt"],
                        bound_s=bound.bound_s,
                        bound_source=bound.source,
                        bound_samples=bound.samples,
                        started_at=started,
                    )
                )
    loop = _crash_loop(attempts, rules.crash_loop_attempts)
    if loop is not None:
        since, run, high = loop
        found.append(
            Detection(
                kind="crash_looping",
                state="crash_looping",
                since=since,
                overrun_s=now - since,
                lost_gpu_h=lost_since_effective,
                lost_gpu_h_per_h=float(gpus),
                attempt=current["attempt"] if current else None,
                started_at=origin,
                detail={
                    "attempts_without_progress": run,
                    "high_water_cursor": high if high > float("-inf") else None,
                },
            )
        )
    starts = [a["started_at"] for a in attempts]
    storm = _restart_storm(starts, rules.restart_storm_attempts, rules.restart_storm_window_s, now)
    if storm is not None:
        since, count = storm
        # Priced from the failure that began its first counted restart (or that attempt's start).
        first_i = next(i for i, s in enumerate(starts) if s > now - rules.restart_storm_window_s)
        begin = attempts[first_i - 1].get("failed_at") if first_i > 0 else None
        begin = begin if begin is not None else starts[first_i]
        effective = sum(a.get("effective_s") or 0.0 for a in attempts if a["started_at"] >= begin)
        lost = _gpu_h((now - begin) - effective, gpus)
        hours = (now - begin) / HOUR_S
        found.append(
            Detection(
                kind="restart_storm",
                state="restart_storm",
                since=since,
                overrun_s=now - since,
                lost_gpu_h=lost,
                lost_gpu_h_per_h=lost / hours if hours > 0 else float(gpus),
                attempt=current["attempt"] if current else None,
                started_at=begin,
                detail={"attempts": count, "window_s": rules.restart_storm_window_s},
            )
        )
    found.sort(key=lambda d: BAD_KINDS.index(d.kind))
    job.detections = found
    if current is not None:
        job.attempt = current["attempt"]
    if found:
        job.state, job.since = found[0].state, found[0].since
        job.phase, job.component = found[0].phase, found[0].component
        return job
    return _good_state(job, facts, current, live_attempt)


def _good_state(
    job: LiveState,
    facts: Mapping[str, Any],
    current: Mapping[str, Any] | None,
    live_attempt: Mapping[str, Any] | None,
) -> LiveState:
    """queued, starting:<component>, training or checkpointing."""
    if current is None:
        return job  # queued since submission
    if live_attempt is None:
        job.state, job.since = "queued", current.get("stopped_at") or current["started_at"]
        return job
    piece = facts.get("current") or {}
    mine = piece.get("attempt") == live_attempt["attempt"]
    if (
        mine
        and piece.get("component") == "wasted_training"
        and piece.get("phase") == "checkpoint_blocking"
    ):
        job.state, job.since = "checkpointing", piece["since"]
    elif live_attempt.get("first_effective_at") is not None:
        job.state, job.since = "training", live_attempt["first_effective_at"]
    else:
        component = piece.get("component") if mine else "hardware_setup"
        job.state = f"starting:{component}"
        job.since = piece["since"] if mine else live_attempt["started_at"]
        job.component, job.phase = component, piece.get("phase") if mine else None
    return job
