"""How GPU-time is weighted: the one NULL rule, applied once when the rollups are written.

NULL `gpus` (or anything not a positive integer) counts as 1 GPU, the engine's default when no
event names a size. The metrics layer reads these weighted sums and names the same rule
(`backend.metrics.core`); nothing weights a second time.
"""

from __future__ import annotations

import numbers
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
