"""Eq. 2 and the Fig. 3 curve with hand-computed numbers."""

from __future__ import annotations

import math

import pytest

from backend.advice.checkpoint import (
    curve_intervals,
    median_gap,
    minutes_per_day_saved,
    optimal_interval_s,
    wtt_curve,
    wtt_fraction,
)

# CSBT 30 s, 3 failures in 10 training hours.
CSBT = 30.0
RATE = 3 / 36_000


def test_optimum_balances_the_two_terms() -> None:
    tau = optimal_interval_s(CSBT, RATE)
    assert tau == pytest.approx(math.sqrt(720_000))  # 848.5 s
    assert RATE * tau / 2 == pytest.approx(CSBT / tau)
    assert wtt_fraction(tau, CSBT, RATE) <= wtt_fraction(tau * 1.1, CSBT, RATE)
    assert wtt_fraction(tau, CSBT, RATE) <= wtt_fraction(tau * 0.9, CSBT, RATE)


def test_wtt_at_a_30_minute_interval() -> None:
    # UTT/T = 3/36000 * 1800 / 2 = 0.075; blocking = 30 / 1800 = 0.016667
    assert wtt_fraction(1800, CSBT, RATE) == pytest.approx(0.075 + 30 / 1800)
    saved = minutes_per_day_saved(1800, math.sqrt(720_000), CSBT, RATE)
    assert saved == pytest.approx(1440 * (0.075 + 30 / 1800 - 2 * 30 / math.sqrt(720_000)))
    assert saved == pytest.approx(30.18, abs=0.01)


def test_no_failures_means_no_optimum() -> None:
    assert optimal_interval_s(CSBT, 0.0) is None
    assert optimal_interval_s(0.0, RATE) is None


def test_curve_points_and_marks() -> None:
    taus = curve_intervals([1800.0, 848.0], points=20)
    assert 1800.0 in taus and 848.0 in taus
    assert taus == sorted(taus) and taus[0] <= 60 and taus[-1] == pytest.approx(7200)
    curve = wtt_curve([600.0, 1800.0], CSBT, RATE)
    assert curve[1] == pytest.approx(
        {"interval_s": 1800, "wtt_pct": 9.1666667, "utt_pct": 7.5, "blocking_pct": 1.6666667}
    )


def test_median_gap() -> None:
    assert median_gap([100.0, 1900.0, 3700.0, 6000.0]) == 1800.0
    assert median_gap([5.0]) is None
