"""The bound arithmetic with hand-worked numbers (backend/live/bounds.py, pure)."""

from __future__ import annotations

import pytest

from backend.ett.engine import compute_job
from backend.live.bounds import (
    COLD,
    WARM,
    BoundRules,
    BoundSet,
    Override,
    compile_variant,
    default_bound,
    learn,
    learn_all,
    percentile,
    samples_of,
)
from tests.backend.ett.builders import JobEvents

RULES = BoundRules(percentile=95, factor=3, floor_s=60, min_samples=4, max_samples=5)


def test_percentile_is_linear_between_closest_ranks():
    # rank (n - 1) q / 100 = 3 x 0.95 = 2.85: 30 + 0.85 x (40 - 30) = 38.5
    assert percentile([40, 10, 30, 20], 95) == pytest.approx(38.5)
    assert percentile([40, 10, 30, 20], 50) == pytest.approx(25.0)
    assert percentile([7], 99) == 7
    with pytest.raises(ValueError):
        percentile([], 50)


def test_bound_is_factor_times_the_percentile_with_a_floor():
    # 3 x 38.5 = 115.5 s, above the 60 s floor
    assert learn([10, 20, 30, 40], RULES) == pytest.approx((115.5, 38.5))
    # p95 of [5, 5, 5, 6] = 5 + 0.85 = 5.85; 3 x 5.85 = 17.55 is under the floor: 60 s
    assert learn([5, 5, 5, 6], RULES) == pytest.approx((60.0, 5.85))


def test_too_few_samples_learn_nothing_and_only_the_most_recent_count():
    assert learn([10, 20, 30], RULES) is None  # 3 < min_samples 4
    # max_samples 5: the oldest (1000) no longer counts; p95 of [10, 20, 30, 40, 50] = 48
    assert learn([1000, 10, 20, 30, 40, 50], RULES) == pytest.approx((144.0, 48.0))


def test_learn_all_gives_each_model_and_the_fleet_their_own_bound():
    rows = [("m1", "pt2_compile", COLD, v, t) for t, v in enumerate((100, 110, 120, 130))]
    rows += [("m2", "pt2_compile", COLD, v, 10 + t) for t, v in enumerate((1000, 1100))]
    learned = learn_all(rows, RULES)
    # m1: p95 of [100, 110, 120, 130] = 128.5 -> 385.5
    assert learned[("m1", "pt2_compile", COLD)] == pytest.approx((385.5, 4, 128.5))
    assert ("m2", "pt2_compile", COLD) not in learned  # 2 samples
    # the fleet: the 5 most recent of all six, in time order: 110, 120, 130, 1000, 1100
    # p95 rank 3.8 -> 1000 + 0.8 x 100 = 1080 -> 3240
    assert learned[("", "pt2_compile", COLD)] == pytest.approx((3240.0, 5, 1080.0))


def test_cold_and_warm_compiles():
    assert compile_variant("pt2_compile", 0, 100, 0, None) == COLD
    assert compile_variant("pt2_compile.autotune", 0, 100, 0, None) == COLD
    assert compile_variant("pt2_compile", 1, 100, 0, None) == WARM  # a recovery's compile
    assert compile_variant("pt2_compile", 0, 100, 0, 50) == WARM  # after a checkpoint restore
    assert compile_variant("pt2_compile", 0, 100, 0, 150) == COLD  # the restore came later
    assert compile_variant("trainer_init", 1, 100, 0, None) == ""


def test_samples_of_a_finished_job():
    """A0: hardware setup 0-5, trainer_init 5-25, cold compile 25-85, windows ending at 115, 145
    and 205 (a checkpoint stall between), fails at 205; A1: restore 230-250, warm compile
    250-280, windows to 310 and 340; a `process_group` A1 opened at 221 and never closed is
    ended by the attempt: no sample."""
    j = JobEvents()
    j.submitted(0)
    j.started(0, 0)
    j.phase(0, "trainer_init", 5, 25)
    j.phase(0, "pt2_compile", 25, 85)
    j.progress(0, 85, 115, 0, 30)
    j.progress(0, 115, 145, 30, 60)
    j.progress(0, 145, 175, 60, 60, steps=0)
    j.progress(0, 175, 205, 60, 90)
    j.failure(0, 205)
    j.started(1, 220)
    j.phase_started(1, "trainer_init.process_group", 221, span_id="never")
    j.phase(1, "checkpoint_restore", 230, 250)
    j.phase(1, "pt2_compile", 250, 280)
    j.progress(1, 280, 310, 60, 90)
    j.progress(1, 310, 340, 90, 120)
    j.ended(1, 340)
    j.job_ended(345)
    result = compute_job(j.events, now=1e6).to_dict(with_spans=True)
    got = {(s.phase, s.variant, s.attempt): s.value_s for s in samples_of(result)}
    assert got == {
        ("trainer_init", "", 0): 20,
        ("pt2_compile", COLD, 0): 60,
        ("pt2_compile", WARM, 1): 30,
        ("checkpoint_restore", "", 1): 20,
        ("hardware_setup", "", 0): 5,
        ("hardware_setup", "", 1): 1,
        # ends 115, 145, 205: the longest gap is 60 s (the stalled window between)
        ("loop", "", 0): 60,
        ("loop", "", 1): 30,
    }


def test_lookup_order_override_model_fleet_ancestor_default():
    learned = {
        ("m1", "pt2_compile", COLD): (400.0, 12, 130.0),
        ("", "pt2_compile", COLD): (900.0, 50, 300.0),
        ("", "trainer_init.process_group", ""): (90.0, 40, 20.0),
    }
    overrides = [
        Override(phase="loop", bound_s=300),
        Override(phase="loop", bound_s=120, model="m1"),
        Override(phase="trainer_init.*", bound_s=600, model="m*"),
    ]
    m1 = BoundSet("m1", learned, overrides)
    m2 = BoundSet("m2", learned, overrides)
    other = BoundSet("x", learned, overrides)
    assert (m1("pt2_compile", COLD).bound_s, m1("pt2_compile", COLD).source) == (400.0, "model")
    assert (m2("pt2_compile", COLD).bound_s, m2("pt2_compile", COLD).source) == (900.0, "fleet")
    # a sub-stage with no history of its own reads its family's bound
    assert m1("pt2_compile.autotune", COLD).bound_s == 400.0
    # a warm compile with no history of its own is judged by the cold one (model, then fleet)
    assert (m1("pt2_compile", WARM).bound_s, m1("pt2_compile", WARM).source) == (400.0, "model")
    assert (m2("pt2_compile", WARM).bound_s, m2("pt2_compile", WARM).source) == (900.0, "fleet")
    # with no history at all: the shipped default
    assert BoundSet("m3")("pt2_compile", WARM).bound_s == 3600.0
    # the more specific override wins: m1's own loop bound over the fleet-wide one
    assert m1("loop").bound_s == 120 and m2("loop").bound_s == 300
    assert m2("trainer_init.process_group").bound_s == 600  # "m*" matches m2
    assert other("trainer_init.process_group").source == "fleet"
    assert default_bound("trainer_init.first_batch", "") == 1800.0
    assert default_bound("custom.warmup", "") == 3600.0
    assert default_bound("loop", "") == 1800.0
