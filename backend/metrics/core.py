"""Pure arithmetic of the metrics layer: no database, no web; every rule is written once here.

- NULL `gpus` counts as 1 GPU (the engine's default when no event names a size).
- A second is charged at the GPUs of the attempt it belongs to, the job's requested count
  outside attempts (queue time); an interval stored without its own count takes the job's.
- ETT% = effective GPU-time / wall GPU-time x 100, None when there is no GPU-time.
- GPU-hours = GPU-seconds / 3600.
- A bucket is partial when the range cuts it or it has not ended yet at `now`.
- A trend (or a regression) needs a base: the range before must hold at least MIN_BASE_JOBS
  jobs and MIN_BASE_SHARE of the current range's GPU-hours (at least MIN_BASE_GPU_H).
"""

from __future__ import annotations

import math
import numbers
from collections import defaultdict
from collections.abc import Iterable, Mapping
from typing import Any, Protocol

from backend.ett.catalogue import COMPONENTS
from backend.ett.partition import EFFECTIVE
from backend.fleet.days import bucket_end, bucket_start, bucket_starts

# The GPU weighting rule is the rollups' (they weight once, at write time); named here too.
from backend.fleet.weights import NULL_GPUS as NULL_GPUS
from backend.fleet.weights import gpu_s as gpu_s
from backend.fleet.weights import gpus_of as gpus_of
from backend.fleet.weights import interval_gpu_s as interval_gpu_s
from backend.fleet.weights import interval_gpus as interval_gpus
from backend.fleet.weights import job_gpu_s as job_gpu_s
from backend.fleet.weights import job_weight as job_weight
from backend.fleet.weights import mean_gpus as mean_gpus

HOUR_S = 3600.0
ZERO = 1e-6
LOST_BY = ("component", "phase", "owner", "system")
# A trend compared against fewer jobs than this, or against a range that ran under
# MIN_BASE_SHARE of the current range's GPU-hours (or under MIN_BASE_GPU_H), is not given.
MIN_BASE_JOBS = 3
MIN_BASE_SHARE = 0.1
MIN_BASE_GPU_H = 1.0


class OwnerResolver(Protocol):
    """What lost-by-owner needs from the owner mapping."""

    def owner(self, component: str, phase: str | None) -> str: ...  # noqa: D102

    def system(self, component: str, phase: str | None) -> str: ...  # noqa: D102


def attempt_gpus(attempts: Any, job_gpus: Any) -> list[int]:
    """The distinct GPU counts a job's attempts ran on (the job's for one that named none)."""
    counts = {
        interval_gpus(a.get("gpus"), job_gpus) for a in attempts or [] if isinstance(a, Mapping)
    }
    return sorted(counts) or [gpus_of(job_gpus)]


def gpu_h(gpu_seconds: float) -> float:
    """GPU-seconds as GPU-hours."""
    return gpu_seconds / HOUR_S


def pct(part: float, whole: float) -> float | None:
    """100 x part / whole, None when whole is not positive."""
    return 100.0 * part / whole if whole > 0 else None


def ett_pct(components: Mapping[str, float]) -> float | None:
    """Effective GPU-time as a percentage of wall GPU-time (None when there is none)."""
    return pct(components.get(EFFECTIVE, 0.0), sum(components.values()))


def weighted_ett_pct(jobs: Iterable[tuple[float, float]]) -> float | None:
    """GPU-weighted ETT% of whole jobs from (effective, wall) GPU-seconds pairs (`job_gpu_s`)."""
    eff = wall = 0.0
    for effective_gpu_s, wall_gpu_s in jobs:
        eff += effective_gpu_s
        wall += wall_gpu_s
    return pct(eff, wall)


def empty_components() -> dict[str, float]:
    """Every component at zero GPU-seconds."""
    return dict.fromkeys(COMPONENTS, 0.0)


def point(components: Mapping[str, float]) -> dict[str, Any]:
    """ETT% and GPU-hours (wall, effective, lost, per component) of GPU-seconds per component."""
    wall = sum(components.values())
    eff = components.get(EFFECTIVE, 0.0)
    return {
        "ett_pct": ett_pct(components),
        "wall_gpu_h": gpu_h(wall),
        "effective_gpu_h": gpu_h(eff),
        "lost_gpu_h": gpu_h(wall - eff),
        "components_gpu_h": {c: gpu_h(v) for c, v in components.items()},
    }


def is_partial(b: float, bucket: str, *, start: float, end: float, now: float) -> bool:
    """True when [start, end) cuts the bucket or the bucket is still in progress at `now`."""
    e = bucket_end(b, bucket)
    return b < start or e > end or e > now


def series_from_rows(
    rows: Iterable[tuple[float, str, float]],
    *,
    start: float,
    end: float,
    bucket: str,
    now: float,
) -> dict[str, Any]:
    """The fleet ETT% answer from (day, component, GPU-seconds) rows, partial buckets flagged."""
    per: dict[float, dict[str, float]] = {
        b: empty_components() for b in bucket_starts(start, end, bucket)
    }
    total = empty_components()
    for day, comp, gpu in rows:
        b = bucket_start(day, bucket)
        comps = per.setdefault(b, empty_components())
        comps[comp] = comps.get(comp, 0.0) + gpu
        total[comp] = total.get(comp, 0.0) + gpu
    series = [
        {
            "bucket": b,
            "partial": is_partial(b, bucket, start=start, end=end, now=now),
            **point(c),
        }
        for b, c in sorted(per.items())
    ]
    return {"bucket": bucket, "start": start, "end": end, "series": series, "total": point(total)}


def lost_from_rows(
    rows: Iterable[tuple[str, str | None, float]], *, by: str, resolver: OwnerResolver
) -> list[dict[str, Any]]:
    """Lost GPU-hours grouped by component, phase, owner or system from (component, phase,
    GPU-seconds) rows, largest first: {by, gpu_h, share, components}."""
    if by not in LOST_BY:
        raise ValueError(f"by must be one of {list(LOST_BY)}, not {by!r}")
    groups: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    for comp, phase, gpu in rows:
        if comp == EFFECTIVE:
            continue
        ph = phase or None
        if by == "component":
            key = comp
        elif by == "phase":
            key = ph or comp
        elif by == "owner":
            key = resolver.owner(comp, ph)
        else:
            key = resolver.system(comp, ph)
        groups[key][comp] += gpu
    total = sum(sum(c.values()) for c in groups.values())
    out = []
    for key, comps in groups.items():
        gpu = sum(comps.values())
        if gpu <= ZERO:
            continue
        out.append(
            {
                by: key,
                "gpu_h": gpu_h(gpu),
                "share": gpu / total if total > 0 else None,
                "components": {c: gpu_h(v) for c, v in sorted(comps.items())},
            }
        )
    out.sort(key=lambda r: (-r["gpu_h"], r[by]))
    return out


def trend_reason(
    base_gpu_h: float | None, current_gpu_h: float | None, base_jobs: int | None
) -> str | None:
    """Why a trend against this base is not given (None: it is): too few jobs or GPU-hours.

    `base_jobs` None means the count is unknown and only the GPU-hours are checked.
    """
    if base_jobs is not None and base_jobs < MIN_BASE_JOBS:
        word = "job" if base_jobs == 1 else "jobs"
        return f"the range before holds {base_jobs} {word} (a trend needs {MIN_BASE_JOBS})"
    if base_gpu_h is None:
        return None
    floor = max(MIN_BASE_GPU_H, MIN_BASE_SHARE * (current_gpu_h or 0.0))
    if base_gpu_h < floor:
        return f"the range before ran {base_gpu_h:.1f} GPU-hours (a trend needs {floor:.1f})"
    return None


def headline(
    now: Mapping[str, float], before: Mapping[str, float] | None, before_jobs: int | None = None
) -> dict[str, Any]:
    """A model's headline: ETT% and its trend against `before` (null when `before` is too small
    a base, `trend_reason` saying why), wall and lost GPU-hours, the component losing most."""
    wall = sum(now.values())
    ett, prev = ett_pct(now), ett_pct(before or {})
    lost = {c: v for c, v in now.items() if c != EFFECTIVE and v > 0}
    base_gpu_h = gpu_h(sum((before or {}).values()))
    if ett is None:
        reason: str | None = "no GPU-time in the range"
    elif prev is None:
        reason = "no GPU-time in the range before"
    else:
        reason = trend_reason(base_gpu_h, gpu_h(wall), before_jobs)
    return {
        "ett_pct": ett,
        "previous_ett_pct": prev,
        "previous_wall_gpu_h": base_gpu_h,
        "previous_jobs": before_jobs,
        "trend_pp": ett - prev if ett is not None and prev is not None and not reason else None,
        "trend_reason": reason,
        "wall_gpu_h": gpu_h(wall),
        "lost_gpu_h": gpu_h(wall - now.get(EFFECTIVE, 0.0)),
        "top_lost_component": max(sorted(lost), key=lambda c: lost[c]) if lost else None,
    }


def regression(
    before: Mapping[str, float], after: Mapping[str, float], before_jobs: int | None = None
) -> dict[str, Any] | None:
    """How a model's ETT% fell from `before` to `after` (None when it did not fall, or when
    `before` is too small a base, `trend_reason`): the component whose share of wall GPU-time
    grew most drives it."""
    ett_a, ett_b = ett_pct(after), ett_pct(before)
    if ett_a is None or ett_b is None or ett_a >= ett_b:
        return None
    wall_a, wall_b = sum(after.values()), sum(before.values())
    if trend_reason(gpu_h(wall_b), gpu_h(wall_a), before_jobs) is not None:
        return None
    shifts = {
        c: (after.get(c, 0.0) / wall_a - before.get(c, 0.0) / wall_b) * 100.0
        for c in set(after) | set(before)
        if c != EFFECTIVE
    }
    driver = max(sorted(shifts), key=lambda c: shifts[c])
    return {
        "ett_pct_before": ett_b,
        "ett_pct_after": ett_a,
        "delta_pp": ett_a - ett_b,
        "wall_gpu_h_after": gpu_h(wall_a),
        "lost_gpu_h_after": gpu_h(wall_a - after.get(EFFECTIVE, 0.0)),
        "driver": driver,
        "driver_share_pp": shifts[driver],
    }


def failure_point(
    kinds: Mapping[str, int], jobs: int, attempts: int, attempts_excl: int, wall_gpu_s: float
) -> dict[str, Any]:
    """NoF by kind, attempts per job and failures per 1,000 wall GPU-hours."""
    failures = sum(kinds.values())
    gpu_kh = gpu_h(wall_gpu_s) / 1000.0
    return {
        "failures": failures,
        "nof_by_kind": dict(kinds),
        "jobs": jobs,
        "attempts": attempts,
        "attempts_per_job": attempts / jobs if jobs else None,
        "attempts_per_job_excl_preemption": attempts_excl / jobs if jobs else None,
        "nof_per_job_by_kind": {k: v / jobs for k, v in kinds.items()} if jobs else None,
        "wall_gpu_h": gpu_h(wall_gpu_s),
        "failures_per_1000_gpu_h": failures / gpu_kh if gpu_kh > 0 else None,
        "failures_per_1000_gpu_h_by_kind": (
            {k: v / gpu_kh for k, v in kinds.items()} if gpu_kh > 0 else None
        ),
    }


def weighted_level1(
    jobs: Iterable[tuple[Any, Any, float | None, float | None, int | None]],
) -> list[dict[str, Any]]:
    """GPU-weighted TTS per job, TTR per failure and NoF per job, per key, from (key, gpus,
    tts_s, recovery_s, nof) rows, `gpus` a job's weight (its mean GPUs, `mean_gpus`); sorted
    by key."""
    acc: dict[Any, list[float]] = defaultdict(lambda: [0.0, 0.0, 0.0, 0.0])
    for key, gpus, tts, rec, nof in jobs:
        w = _weight(gpus)
        a = acc[key]
        a[0] += w
        a[1] += _num(tts) * w
        a[2] += _num(rec) * w
        a[3] += _num(nof) * w
    out = []
    for key in sorted(acc):
        w, tts_w, rec_w, nof_w = acc[key]
        out.append(
            {
                "x": key,
                "tts_min": tts_w / w / 60.0 if w > 0 else None,
                "ttr_min": rec_w / nof_w / 60.0 if nof_w > 0 else None,
                "nof": nof_w / w if w > 0 else None,
            }
        )
    return out


def _weight(gpus: Any) -> float:
    """A job's GPU weight: a positive count (a mean may be fractional), else the NULL rule."""
    if isinstance(gpus, bool) or not isinstance(gpus, numbers.Real) or not gpus > 0:
        return float(NULL_GPUS)
    return float(gpus)


def _num(value: float | int | None) -> float:
    if value is None:
        return 0.0
    v = float(value)
    return 0.0 if math.isnan(v) else v


def share_pct(hit: float, total: float) -> float:
    """A share of GPU-time in percent (0 when there is none), for drivers' rows."""
    return 100.0 * hit / total if total > 0 else 0.0
