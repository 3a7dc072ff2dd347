"""The metrics core's rules: NULL GPUs as 1, GPU-weighted ETT%, partial buckets."""

from __future__ import annotations

import math

import pytest

from backend.fleet.days import DAY_S, week_start
from backend.metrics import core
from tests.backend.fleet.fleet_jobs import D0


@pytest.mark.parametrize(
    ("gpus", "weight"), [(None, 1), (8, 8), (0, 1), (-2, 1), (math.nan, 1), (True, 1), (4.0, 4)]
)
def test_a_missing_or_senseless_gpu_count_weighs_one_gpu(gpus: object, weight: int) -> None:
    assert core.gpus_of(gpus) == weight


def test_fleet_ett_weights_jobs_by_gpu_time_not_by_job() -> None:
    # ACCOUNTING.md's example: 10 GPUs at 50% and 1 GPU at 100% is 54.5%, not 75%.
    x = core.job_gpu_s({"effective_s": 50.0, "e2e_s": 100.0, "gpus": 10})
    y = core.job_gpu_s({"effective_s": 100.0, "e2e_s": 100.0, "gpus": 1})
    assert core.weighted_ett_pct([x, y]) == pytest.approx(600 / 11)
    null = core.job_gpu_s({"effective_s": 50.0, "e2e_s": 100.0, "gpus": None})
    assert core.weighted_ett_pct([null, y]) == pytest.approx(75.0)
    assert core.weighted_ett_pct([]) is None


def test_per_attempt_gpus_weigh_each_second_at_its_attempts_count() -> None:
    """A job of 64 GPUs whose second attempt ran on 48: its result's GPU-seconds win over its
    count; an interval stored without a count takes the job's."""
    result = {"effective_s": 2000.0, "e2e_s": 2400.0, "gpus": 64}
    assert core.job_gpu_s(result) == (128_000.0, 153_600.0)  # stored before: all at 64
    result.update(effective_gpu_s=112_000.0, e2e_gpu_s=136_000.0)
    assert core.job_gpu_s(result) == (112_000.0, 136_000.0)
    assert core.weighted_ett_pct([core.job_gpu_s(result)]) == pytest.approx(82.3529, abs=1e-4)
    assert core.interval_gpus(48, 64) == 48 and core.interval_gpus(None, 64) == 64
    assert core.interval_gpus(None, None) == 1 and core.interval_gpu_s(10.0, 48, 64) == 480.0
    assert core.job_weight(64, 2400.0, 136_000.0) == pytest.approx(56.6667, abs=1e-4)
    assert core.job_weight(64, 2400.0, None) == 64.0


def test_partial_buckets_are_the_cut_ones_and_the_one_in_progress() -> None:
    rows = [(D0 + i * DAY_S, "effective_training", 3600.0) for i in range(3)]
    # [D0, D0 + 3 days) with now inside the last day: only the last one is partial.
    answer = core.series_from_rows(
        rows, start=D0, end=D0 + 3 * DAY_S, bucket="day", now=D0 + 2.5 * DAY_S
    )
    assert [p["partial"] for p in answer["series"]] == [False, False, True]
    # Everything in the past: nothing partial.
    done = core.series_from_rows(rows, start=D0, end=D0 + 3 * DAY_S, bucket="day", now=1e12)
    assert not any(p["partial"] for p in done["series"])
    # D0 is a Saturday: its ISO week began on Monday, before the range, so it is cut.
    weeks = core.series_from_rows(rows, start=D0, end=D0 + 3 * DAY_S, bucket="week", now=1e12)
    assert [p["bucket"] for p in weeks["series"]] == [week_start(D0), week_start(D0) + 7 * DAY_S]
    assert [p["partial"] for p in weeks["series"]] == [True, True]
    # A range starting at noon cuts its first day.
    noon = core.series_from_rows(
        rows, start=D0 + DAY_S / 2, end=D0 + 3 * DAY_S, bucket="day", now=1e12
    )
    assert [p["partial"] for p in noon["series"]] == [True, False, False]


def test_point_and_lost_use_one_hour_and_one_effective_rule() -> None:
    p = core.point({"effective_training": 7200.0, "scheduling": 3600.0})
    assert p == {
        "ett_pct": pytest.approx(200 / 3),
        "wall_gpu_h": 3.0,
        "effective_gpu_h": 2.0,
        "lost_gpu_h": 1.0,
        "components_gpu_h": {"effective_training": 2.0, "scheduling": 1.0},
    }
    assert core.point({})["ett_pct"] is None


def test_trend_reason_needs_three_jobs_and_a_tenth_of_the_gpu_hours() -> None:
    from backend.metrics.core import headline, trend_reason

    assert trend_reason(500.0, 1000.0, 1) == "the range before holds 1 job (a trend needs 3)"
    assert trend_reason(500.0, 1000.0, 2) == "the range before holds 2 jobs (a trend needs 3)"
    assert trend_reason(99.0, 1000.0, 3) == (
        "the range before ran 99.0 GPU-hours (a trend needs 100.0)"
    )
    assert trend_reason(0.5, 2.0, 5) is not None  # under 1 GPU-hour
    assert trend_reason(100.0, 1000.0, 3) is None
    assert trend_reason(100.0, 1000.0, None) is None  # count unknown: GPU-hours alone
    now = {"effective_training": 7200.0, "shutdown": 3600.0}
    before = {"effective_training": 3600.0 * 3, "shutdown": 3600.0 * 3}
    assert headline(now, before, 3)["trend_pp"] == pytest.approx(7200 / 10800 * 100 - 50.0)
    one = headline(now, before, 1)
    assert one["trend_pp"] is None and "1 job" in one["trend_reason"]
    assert one["previous_ett_pct"] == 50.0 and one["previous_jobs"] == 1
