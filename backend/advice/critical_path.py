"""An attempt's init critical path (Fig. 2) and the fast-batch what-if of Eq. 4; pure functions.

The critical path is what the partition's rule 3 exposed: at each instant before the attempt's
first training instant, the span that ended latest. Work that ran but was hidden behind it is the
difference between a phase's total (union of its spans) and its exposed time.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

DPP_PHASE = "trainer_init.first_batch"
PT2_PHASE = "pt2_compile"
TRAINING = ("effective_training", "wasted_training")

Interval = tuple[float, float, str, str | None]  # start, end, component, phase
Span = tuple[str, float, float]  # phase, start, end


def _in_family(phase: str, family: str) -> bool:
    return phase == family or phase.startswith(family + ".")


def union(intervals: Sequence[tuple[float, float]]) -> list[tuple[float, float]]:
    """Sorted disjoint union of [start, end) intervals."""
    out: list[tuple[float, float]] = []
    for s, e in sorted(intervals):
        if e <= s:
            continue
        if out and s <= out[-1][1]:
            if e > out[-1][1]:
                out[-1] = (out[-1][0], e)
        else:
            out.append((s, e))
    return out


def length(intervals: Sequence[tuple[float, float]]) -> float:
    """Total length of a disjoint interval list."""
    return sum(e - s for s, e in intervals)


def intersection_length(
    a: Sequence[tuple[float, float]], b: Sequence[tuple[float, float]]
) -> float:
    """Length of the overlap of two sorted disjoint interval lists."""
    i = j = 0
    total = 0.0
    while i < len(a) and j < len(b):
        lo, hi = max(a[i][0], b[j][0]), min(a[i][1], b[j][1])
        if hi > lo:
            total += hi - lo
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return total


def fast_batch_what_if(spans: Sequence[Span]) -> dict[str, Any]:
    """Eq. 4: the saving of running the first-batch warm-up (DPP) in parallel with PT2.

    saving = min(DPP, PT2) minus the overlap they already have (never below zero).
    """
    dpp = union([(s, e) for p, s, e in spans if _in_family(p, DPP_PHASE)])
    pt2 = union([(s, e) for p, s, e in spans if _in_family(p, PT2_PHASE)])
    dpp_s, pt2_s = length(dpp), length(pt2)
    overlap = intersection_length(dpp, pt2)
    saving = max(0.0, min(dpp_s, pt2_s) - overlap)
    return {
        "dpp_s": dpp_s,
        "pt2_s": pt2_s,
        "overlap_s": overlap,
        "saving_s": saving,
        "already_parallel": bool(dpp_s and pt2_s and saving == 0.0),
    }


def attempt_critical_path(intervals: Sequence[Interval], spans: Sequence[Span]) -> dict[str, Any]:
    """One attempt: its path to the first training instant, hidden work, and fast-batch."""
    ordered = sorted(intervals, key=lambda iv: iv[0])
    training_start = next((iv[0] for iv in ordered if iv[2] in TRAINING), None)
    path: list[dict[str, Any]] = []
    for start, end, comp, phase in ordered:
        if training_start is not None and start >= training_start:
            break
        if (
            path
            and path[-1]["component"] == comp
            and path[-1]["phase"] == phase
            and (abs(path[-1]["end"] - start) < 1e-9)
        ):
            path[-1]["end"] = end
        else:
            path.append({"phase": phase, "component": comp, "start": start, "end": end})
    for step in path:
        step["duration_s"] = step["end"] - step["start"]
    init_end = training_start if training_start is not None else (path[-1]["end"] if path else None)
    exposed: dict[str, float] = {}
    for step in path:
        if step["phase"]:
            exposed[step["phase"]] = exposed.get(step["phase"], 0.0) + step["duration_s"]
    by_phase: dict[str, list[tuple[float, float]]] = {}
    for phase, s, e in spans:
        if init_end is None or s < init_end:
            by_phase.setdefault(phase, []).append((s, min(e, init_end) if init_end else e))
    phases = []
    for phase in sorted(set(by_phase) | set(exposed)):
        total = length(union(by_phase.get(phase, [])))
        total = max(total, exposed.get(phase, 0.0))
        phases.append(
            {
                "phase": phase,
                "total_s": total,
                "exposed_s": exposed.get(phase, 0.0),
                "hidden_s": total - exposed.get(phase, 0.0),
            }
        )
    init_spans = [(p, s, e) for p, s, e in spans if init_end is None or s < init_end]
    return {
        "start": path[0]["start"] if path else None,
        "training_start": training_start,
        "init_s": (init_end - path[0]["start"]) if path and init_end is not None else 0.0,
        "path": path,
        "phases": phases,
        "fast_batch": fast_batch_what_if(init_spans),
    }
