"""Shared measurements for the demo tests: GPU-weighted shares of a fleet's wall time by window."""

from __future__ import annotations

from collections.abc import Iterable


def share(
    intervals: Iterable[tuple[float, float, str, int]],
    lo: float,
    hi: float,
    components: set[str],
) -> float:
    """GPU-time share (%) of [lo, hi) spent in `components`, splitting intervals at the window."""
    inside = total = 0.0
    for start, end, component, gpus in intervals:
        overlap = max(0.0, min(end, hi) - max(start, lo)) * gpus
        total += overlap
        if component in components:
            inside += overlap
    assert total > 0, "no job ran in the window"
    return inside / total * 100.0


PAPER_BASELINE = (59.0, 85.0)
PAPER_OPTIMIZED = (80.0, 93.0)
