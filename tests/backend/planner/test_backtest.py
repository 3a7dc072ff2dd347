"""A small demo fleet through the ETT engine and the planner: the back-test of
benchmarks/bench_planner.py in miniature (fit a window, predict the next; paired what-ifs)."""

from __future__ import annotations

import pytest

from backend.demo.backtest import (
    demo_observations,
    demo_pairs,
    pair_backtest,
    split_backtest,
)
from backend.demo.fleet import DAY, FleetSpec
from backend.planner.fit import fit_inputs
from backend.planner.model import predict

NOW = 1_800_000_000.0
SPEC = FleetSpec(seed=7, models=8, days=182.0, now=NOW)


@pytest.fixture(scope="module")
def jobs():
    return demo_observations(SPEC)


def test_fit_reproduces_the_measured_ett_of_its_own_jobs(jobs):
    fleet = [j for j in jobs if "-baseline" not in j.job_id and "-optimized" not in j.job_id]
    late = [j for j in fleet if j.submitted_at >= SPEC.start + 0.7 * SPEC.days * DAY]
    models = {j.model for j in late}
    assert len(models) == SPEC.models
    for model in models:
        mine = [j for j in late if j.model == model]
        fit = fit_inputs(
            mine,
            end=NOW,
            window_days=0.3 * SPEC.days,
            half_life_days=None,
            replay="measured",
            estimator="mean",
        )
        assert fit.inputs is not None and fit.measured_ett_pct is not None
        # With the measured replay, every lost second is in one term: in sample the model gives
        # back the measured ETT% (the remainder: saves per job taken as W / tau).
        assert predict(fit.inputs).ett_pct == pytest.approx(fit.measured_ett_pct, abs=0.3), model


def test_fit_on_the_past_predicts_the_next_weeks(jobs):
    fleet = [j for j in jobs if j.model and not j.model.startswith("model-")]
    # The split: fit on the first four months (its last 19 days inside the demo's
    # scheduler regression), predict the last two.
    split = SPEC.start + SPEC.days * DAY * 4.0 / 6.0
    report = split_backtest(fleet, start=SPEC.start, split=split, end=NOW, min_test_jobs=2)
    assert len(report.models) >= 6
    assert report.mae_pp < 2.0, [(m.model, m.predicted_pct, m.measured_pct) for m in report.models]
    assert report.worst is not None and report.worst.abs_error_pp < 6.0
    # The former recency-weighted mean follows the regression and misses the target.
    recency = split_backtest(
        fleet, start=SPEC.start, split=split, end=NOW, min_test_jobs=2, estimator="recency"
    )
    assert recency.mae_pp > report.mae_pp + 0.5


def test_paired_what_if_predicts_the_optimized_job(jobs):
    pairs = demo_pairs(jobs)
    assert [p[0] for p in pairs] == [f"model-{c}" for c in "abcdef"]
    results = pair_backtest(pairs)
    for r in results:
        # The what-if recovers most of the baseline-to-optimized gap ...
        assert r.optimized_pct - r.baseline_pct > 10.0
        # ... and lands within 3 points of the optimized job.
        assert r.abs_error_pp < 3.0, r
    # With the replay predicted as UTT = tau / 2 instead (the induced failures are not random).
    utt = pair_backtest(pairs, replay="utt")
    assert max(r.abs_error_pp for r in utt) < 6.0


def test_a_step_inside_the_window_is_flagged(jobs):
    # notifications-ctr-000 gets standalone publishing during the span: its final shutdown
    # drops from tens of minutes to about two; a window across the step says so.
    from backend.demo.fleet import fleet_profile

    profile = fleet_profile(SPEC.seed, 0)
    landed = SPEC.start + profile.rollout["standalone_publish"] * SPEC.days * DAY
    mine = [j for j in jobs if j.model == profile.name]
    end = landed + 10 * DAY
    window = [j for j in mine if end - 40 * DAY <= j.submitted_at < end]
    fit = fit_inputs(window, end=end, window_days=40.0)
    assert any(w.startswith("final shutdown over the last 10 days") for w in fit.warnings), (
        fit.warnings
    )
    steady = [j for j in mine if j.submitted_at >= landed + DAY]
    assert not any(
        "final shutdown over" in w
        for w in fit_inputs(steady, end=NOW, window_days=(NOW - landed) / DAY).warnings
    )
