"""UTC days, ISO weeks and the split of intervals at midnight (hand-computed)."""

from __future__ import annotations

import pytest

from backend.fleet.days import bucket_starts, day_start, split_by_day, week_start
from tests.backend.fleet.fleet_jobs import D0, DAY


def test_day_and_week_starts() -> None:
    assert day_start(D0 + 5) == D0
    assert day_start(D0 - 0.001) == D0 - DAY
    # D0 is Saturday 2026-04-25; its ISO week began on Monday 2026-04-20.
    assert week_start(D0) == D0 - 5 * DAY
    assert week_start(D0 + 2 * DAY) == D0 + 2 * DAY  # Monday 2026-04-27
    assert week_start(0.0) == -3 * DAY  # 1970-01-01 was a Thursday


def test_bucket_starts_cover_range() -> None:
    assert bucket_starts(D0 + 100, D0 + 2 * DAY, "day") == [D0, D0 + DAY]
    assert bucket_starts(D0, D0 + 3 * DAY, "week") == [D0 - 5 * DAY, D0 + 2 * DAY]
    # Calendar months: April 2026 has 30 days, so May begins 6 days after Saturday 25 April.
    april, may = D0 - 24 * DAY, D0 + 6 * DAY
    assert bucket_starts(D0, D0 + 10 * DAY, "month") == [april, may]
    dec, jan = 1_796_083_200.0, 1_798_761_600.0  # 2026-12-01, 2027-01-01: across a year end
    assert bucket_starts(dec, jan, "month") == [dec]
    assert bucket_starts(dec + 5, jan + 1, "month") == [dec, jan]
    with pytest.raises(ValueError):
        bucket_starts(D0, D0 + DAY, "year")


def test_split_by_day_cuts_at_midnight() -> None:
    got = split_by_day(
        [
            (D0 - 100, D0 + 50, "effective_training", None),
            (D0 + 50, D0 + 2 * DAY + 10, "scheduling", "scheduling"),
            (D0 + 60, D0 + 70, "effective_training", None),
        ]
    )
    assert got == {
        (D0 - DAY, "effective_training", None): 100,
        (D0, "effective_training", None): 60,
        (D0, "scheduling", "scheduling"): DAY - 50,
        (D0 + DAY, "scheduling", "scheduling"): DAY,
        (D0 + 2 * DAY, "scheduling", "scheduling"): 10,
    }
