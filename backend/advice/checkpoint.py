"""Checkpoint interval arithmetic (SPEC "Checkpoint interval", paper Eq. 2 and Fig. 3); pure.

Per unit of training time T: UTT/T = lambda x tau / 2 (NoF = lambda x T failures, each losing half
an interval on average) and NoS x CSBT / T = CSBT / tau. WTT/T is their sum; its minimum is at
tau* = sqrt(2 x CSBT / lambda), where the two terms are equal.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Sequence

MINUTES_PER_DAY = 1440.0


def optimal_interval_s(csbt_s: float, failures_per_s: float) -> float | None:
    """tau* = sqrt(2 x CSBT / lambda); None without failures (any longer interval is better)."""
    if failures_per_s <= 0 or csbt_s <= 0:
        return None
    return math.sqrt(2.0 * csbt_s / failures_per_s)


def wtt_fraction(interval_s: float, csbt_s: float, failures_per_s: float) -> float:
    """WTT / T at checkpoint interval tau: lambda x tau / 2 + CSBT / tau."""
    return utt_fraction(interval_s, failures_per_s) + csbt_s / interval_s


def utt_fraction(interval_s: float, failures_per_s: float) -> float:
    """UTT / T: the unsaved training lost to failures, half an interval each."""
    return failures_per_s * interval_s / 2.0


def minutes_per_day_saved(
    current_s: float, optimal_s: float, csbt_s: float, failures_per_s: float
) -> float:
    """Minutes of WTT saved per day of training by moving from the current interval to tau*."""
    now = wtt_fraction(current_s, csbt_s, failures_per_s)
    best = wtt_fraction(optimal_s, csbt_s, failures_per_s)
    return (now - best) * MINUTES_PER_DAY


def curve_intervals(
    marks: Iterable[float | None], points: int = 60, lo_s: float = 60.0
) -> list[float]:
    """Interval values for the WTT curve: geometric from `lo_s` to 4x the largest mark, marks kept."""
    known = [m for m in marks if m is not None and m > 0]
    hi = max([lo_s * 10.0, *(4.0 * m for m in known)])
    lo = min([lo_s, *(m / 2.0 for m in known)])
    ratio = (hi / lo) ** (1.0 / (points - 1))
    values = {lo * ratio**i for i in range(points)} | set(known)
    return sorted(values)


def wtt_curve(
    intervals: Sequence[float], csbt_s: float, failures_per_s: float
) -> list[dict[str, float]]:
    """The Fig. 3 curve: WTT%, UTT% and blocking % of training time at each interval."""
    return [
        {
            "interval_s": tau,
            "wtt_pct": wtt_fraction(tau, csbt_s, failures_per_s) * 100.0,
            "utt_pct": utt_fraction(tau, failures_per_s) * 100.0,
            "blocking_pct": csbt_s / tau * 100.0,
        }
        for tau in intervals
    ]


def median_gap(starts: Sequence[float]) -> float | None:
    """Median time between consecutive checkpoint starts (None with fewer than two)."""
    ordered = sorted(starts)
    gaps = [b - a for a, b in zip(ordered, ordered[1:], strict=False) if b > a]
    return statistics.median(gaps) if gaps else None
