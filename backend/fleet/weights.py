"""How GPU-time is weighted: the rules, applied once when the rollups are written.

Each second counts at the GPUs of the attempt it belongs to (the interval's count, the job's
outside attempts); NULL `gpus` (or anything not a positive integer) counts as 1 GPU, the
engine's default when no event names a size. The metrics layer reads these weighted sums and names the same rule
(`backend.metrics.core`); nothing weights a second time.
"""

from __future__ import annotations

import numbers
from collections.abc import Mapping
from typing import Any

NULL_GPUS = 1


def gpus_of(gpus: Any) -> int:
    """A job's GPU count for weighting: NULL (or anything not a positive int) counts as 1."""
    if isinstance(gpus, bool) or not isinstance(gpus, numbers.Real) or not gpus >= 1:
        return NULL_GPUS
    return int(gpus)


def gpu_s(seconds: float, gpus: Any) -> float:
    """Wall seconds of a job as GPU-seconds."""
    return seconds * gpus_of(gpus)


# Per-attempt GPUs (partial capacity): each second is charged at the GPUs of the attempt it
# belongs to, the job's requested count outside attempts (docs/METRICS.md "Per-attempt GPUs").


def interval_gpus(gpus: Any, job_gpus: Any) -> int:
    """The GPUs an interval is charged at: its own count, else (stored before intervals had
    one) the job's, NULL as 1."""
    if not isinstance(gpus, bool) and isinstance(gpus, numbers.Real) and gpus >= 1:
        return int(gpus)
    return gpus_of(job_gpus)


def interval_gpu_s(seconds: float, gpus: Any, job_gpus: Any) -> float:
    """An interval's seconds as GPU-seconds, at its attempt's GPUs."""
    return seconds * interval_gpus(gpus, job_gpus)


def job_gpu_s(result: Mapping[str, Any]) -> tuple[float, float]:
    """(effective, wall) GPU-seconds of one job's stored result: the engine's per-attempt
    sums, or for results stored before them its seconds times its GPUs."""
    gpus = result.get("gpus")
    eff, wall = result.get("effective_gpu_s"), result.get("e2e_gpu_s")
    if isinstance(eff, int | float) and isinstance(wall, int | float):
        return float(eff), float(wall)
    return (
        gpu_s(float(result.get("effective_s") or 0.0), gpus),
        gpu_s(float(result.get("e2e_s") or 0.0), gpus),
    )


def mean_gpus(gpu_seconds: float, seconds: float, gpus: Any) -> float:
    """The GPUs a job held on average over `seconds` (its count when there are none)."""
    return gpu_seconds / seconds if seconds > 0 else float(gpus_of(gpus))


def job_weight(gpus: Any, e2e_s: Any, e2e_gpu_s: Any) -> float:
    """A job's GPU weight in fleet averages (TTS, TTR, NoF per job): the GPUs it held on
    average over its wall time, or its count for results stored without GPU-seconds."""
    if isinstance(e2e_gpu_s, int | float) and isinstance(e2e_s, int | float):
        return mean_gpus(float(e2e_gpu_s), float(e2e_s), gpus)
    return float(gpus_of(gpus))
