"""SPEC section 4 "Level 1": the same wall time cut by the failures (TTS, TTR_i, waste, shutdown)."""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field
from typing import Any

from backend.ett.catalogue import FAILURE_KINDS, failure_cause, failure_domain, is_planned
from backend.ett.partition import EFFECTIVE, Piece, subtract
from backend.ett.timeline import Failure

# The Level-2 component whose time after the last effective instant is final shutdown.
SHUTDOWN = "shutdown"


@dataclass(slots=True)
class FailureL1:
    """One failure and its recovery window [ts, recovered_at]."""

    ts: float
    kind: str
    attempt: int
    inferred: bool
    event_id: str | None
    message: str | None
    recovered_at: float
    interrupted: bool
    censored: bool
    cause: str = "unknown"
    domain: str = "unknown"
    planned: bool = False
    rank: int | None = None
    # The attempt's other failures (other ranks, the scheduler), each as cascade_dict gives it.
    cascade: list[dict[str, Any]] = field(default_factory=list)

    @property
    def ttr_s(self) -> float:
        """Time to recover from this failure."""
        return self.recovered_at - self.ts

    def to_dict(self) -> dict[str, Any]:
        """The REST shape of one failure (times as epoch seconds)."""
        return {
            "ts": self.ts,
            "kind": self.kind,
            "attempt": self.attempt,
            "inferred": self.inferred,
            "event_id": self.event_id,
            "message": self.message,
            "ttr_s": self.ttr_s,
            "interrupted": self.interrupted,
            "censored": self.censored,
            "cause": self.cause,
            "domain": self.domain,
            "planned": self.planned,
            "rank": self.rank,
            "cascade": [dict(c) for c in self.cascade],
        }


def cause_of(f: Failure) -> tuple[str, str, bool]:
    """A failure's (cause, domain, planned): what it says, else what its cause and kind imply."""
    cause = failure_cause(f.kind, f.cause)
    domain = f.domain or failure_domain(f.kind, f.cause)
    planned = f.planned if f.planned is not None else is_planned(f.kind, f.cause)
    return cause, domain, planned


def cascade_dict(f: Failure) -> dict[str, Any]:
    """The REST shape of one cascade failure (time as epoch seconds)."""
    cause, domain, planned = cause_of(f)
    return {
        "ts": f.ts,
        "kind": f.kind,
        "cause": cause,
        "domain": domain,
        "planned": planned,
        "rank": f.rank,
        "event_id": f.event_id,
        "message": f.message,
    }


@dataclass(slots=True)
class Level1:
    """TTS, one TTR per failure, NoF by kind, in-loop waste and the final shutdown."""

    effective_s: float
    tts_s: float
    tts_interrupted: bool
    tts_censored: bool
    failures: list[FailureL1] = field(default_factory=list)
    in_loop_waste_s: float = 0.0
    final_shutdown_s: float = 0.0

    @property
    def nof(self) -> int:
        """Number of failures."""
        return len(self.failures)

    @property
    def recovery_s(self) -> float:
        """Sum of the TTRs."""
        return sum(f.ttr_s for f in self.failures)

    def nof_by_kind(self) -> dict[str, int]:
        """Failure counts per kind (every kind listed, zeros included)."""
        counts = dict.fromkeys(FAILURE_KINDS, 0)
        for f in self.failures:
            counts[f.kind] = counts.get(f.kind, 0) + 1
        return counts

    def to_dict(self) -> dict[str, Any]:
        """The REST `l1` object (times as epoch seconds)."""
        return {
            "tts_s": self.tts_s,
            "tts_interrupted": self.tts_interrupted,
            "tts_censored": self.tts_censored,
            "ttr_s": [f.ttr_s for f in self.failures],
            "failures": [f.to_dict() for f in self.failures],
            "nof": self.nof,
            "nof_by_kind": self.nof_by_kind(),
            "recovery_s": self.recovery_s,
            "in_loop_waste_s": self.in_loop_waste_s,
            "final_shutdown_s": self.final_shutdown_s,
        }


def level1(pieces: list[Piece], failures: list[Failure], start: float, end: float) -> Level1:
    """Cut [start, end] into effective time, TTS, the TTR windows, in-loop waste, final shutdown."""
    eff = [(p[0], p[1]) for p in pieces if p[3] == EFFECTIVE]
    eff_ends = [e for _, e in eff]
    effective_s = sum(e - s for s, e in eff)
    ordered = sorted(
        failures, key=lambda f: (min(max(f.ts, start), end), f.attempt, f.event_id or "")
    )
    times = [min(max(f.ts, start), end) for f in ordered]

    def next_effective(t: float) -> float | None:
        j = bisect.bisect_right(eff_ends, t)
        return max(eff[j][0], t) if j < len(eff) else None

    first_eff = eff[0][0] if eff else None
    first_fail = times[0] if times else None
    tts_end = min(x for x in (first_eff, first_fail, end) if x is not None)
    tts_interrupted = first_fail is not None and (first_eff is None or first_fail < first_eff)
    windows: list[Piece] = [(start, tts_end, None, "tts", None)]
    result = Level1(
        effective_s=effective_s,
        tts_s=tts_end - start,
        tts_interrupted=tts_interrupted,
        tts_censored=first_eff is None and first_fail is None,
    )
    for i, f in enumerate(ordered):
        ts = times[i]
        nxt_eff = next_effective(ts)
        nxt_fail = times[i + 1] if i + 1 < len(times) else None
        interrupted = nxt_fail is not None and (nxt_eff is None or nxt_fail < nxt_eff)
        censored = nxt_eff is None and nxt_fail is None
        if interrupted and nxt_fail is not None:
            recovered = nxt_fail
        elif nxt_eff is not None:
            recovered = nxt_eff
        else:
            recovered = end
        cause, domain, planned = cause_of(f)
        result.failures.append(
            FailureL1(
                ts=ts,
                kind=f.kind,
                attempt=f.attempt,
                inferred=f.inferred,
                event_id=f.event_id,
                message=f.message,
                recovered_at=recovered,
                interrupted=interrupted,
                censored=censored,
                cause=cause,
                domain=domain,
                planned=planned,
                rank=f.rank,
                cascade=[cascade_dict(c) for c in f.cascade],
            )
        )
        if recovered > ts:
            windows.append((ts, recovered, None, "ttr", None))

    last_eff = eff[-1][1] if eff else start
    lost = [p for p in pieces if p[3] != EFFECTIVE]
    for piece in subtract(lost, windows):
        waste, shutdown = split_final_shutdown(piece, last_eff)
        result.in_loop_waste_s += waste
        result.final_shutdown_s += shutdown
    return result


def split_final_shutdown(piece: Piece, last_effective: float) -> tuple[float, float]:
    """(in-loop waste, final shutdown) seconds of a lost piece outside the TTS and TTR windows.

    Revision 2.1: only what the partition gives to the shutdown component (`shutdown`,
    `publish`, the implicit shutdown after the last attempt) after the last effective instant
    is final shutdown. A hang is never shutdown: a stall, an open phase or uncovered time after
    the last effective instant, before the job's last failure or end, is in-loop waste, and so
    is an open job's hang while it lasts (provisional).
    """
    s, e, _attempt, component, _phase = piece
    if component != SHUTDOWN or e <= last_effective:
        return e - s, 0.0
    if s >= last_effective:
        return 0.0, e - s
    return last_effective - s, e - last_effective
