"""The fit's level estimator: a lasting step is followed, a recent rise is excluded as an
incident (and said so), noise alone leaves the window's mean."""

from __future__ import annotations

import random

import pytest

from backend.planner.fit import DAY_S, SEGMENT_MIN, level, segments

END = 100 * DAY_S


def _daily(values: list[float]) -> list[tuple[float, float, float]]:
    # One point a day, the last one a day before END.
    n = len(values)
    return [(END - (n - i) * DAY_S, v, 1.0) for i, v in enumerate(values)]


def _noisy(rng: random.Random, mean: float, n: int) -> list[float]:
    return [max(0.0, rng.gauss(mean, mean * 0.2)) for _ in range(n)]


def test_noise_alone_is_one_level():
    rng = random.Random(1)
    xs = _noisy(rng, 10.0, 100)
    assert segments(xs) == [(0, 100)]
    lv = level(_daily(xs), end=END, window_days=100)
    assert lv.value == pytest.approx(sum(xs) / len(xs))
    assert lv.excluded_rise is None


def test_a_lasting_drop_is_followed_even_when_recent():
    # A rollout ten days before the window's end: the fit takes the level after it.
    rng = random.Random(2)
    before, after = _noisy(rng, 30.0, 90), _noisy(rng, 5.0, 10)
    lv = level(_daily(before + after), end=END, window_days=100)
    assert lv.value == pytest.approx(sum(after) / len(after))
    assert lv.excluded_rise is None


def test_a_recent_rise_is_excluded_and_reported():
    rng = random.Random(3)
    base, rise = _noisy(rng, 6.0, 82), _noisy(rng, 18.0, 18)
    lv = level(_daily(base + rise), end=END, window_days=100)
    # The split may land a point off the true step in noise.
    assert lv.value == pytest.approx(sum(base) / len(base), rel=0.03)
    assert lv.excluded_rise == pytest.approx(3.0, rel=0.15)
    assert lv.excluded_days == pytest.approx(18.0, abs=2.0)


def test_a_rise_that_has_lasted_is_the_level():
    # Longer than the window's last quarter: a persistent change, not an excursion.
    rng = random.Random(4)
    base, rise = _noisy(rng, 6.0, 60), _noisy(rng, 18.0, 40)
    lv = level(_daily(base + rise), end=END, window_days=100)
    assert lv.value == pytest.approx(sum(rise) / len(rise))
    assert lv.excluded_rise is None


def test_a_lone_outlier_is_not_a_level():
    rng = random.Random(5)
    xs = _noisy(rng, 5.0, 50) + [500.0] + _noisy(rng, 5.0, SEGMENT_MIN - 1)
    lv = level(_daily(xs), end=END, window_days=100)
    assert lv.excluded_rise is None
    assert lv.value == pytest.approx(sum(xs) / len(xs))


def test_ratio_points_weigh_by_their_denominator():
    # (time, num, den): a rate is sum(num) / sum(den), not a mean of ratios.
    pts = [(END - 3 * DAY_S, 1.0, 1.0), (END - 2 * DAY_S, 3.0, 9.0), (END - DAY_S, 0.0, 0.0)]
    assert level(pts, end=END, window_days=10).value == pytest.approx(0.4)


def test_a_small_recent_rise_is_the_level():
    # Significant but under the drift factor (1.5x): not called a regression.
    rng = random.Random(6)
    base, rise = _noisy(rng, 10.0, 82), _noisy(rng, 12.0, 18)
    lv = level(
        _daily([x * 0.1 + 9.0 for x in base] + [x * 0.1 + 11.0 for x in rise]),
        end=END,
        window_days=100,
    )
    assert lv.excluded_rise is None
    assert lv.value == pytest.approx(sum(x * 0.1 + 11.0 for x in rise) / 18, rel=0.03)
