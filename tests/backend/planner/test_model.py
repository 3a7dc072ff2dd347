"""The planner's model against published numbers: §II-A's restart bound, Eq. 2's optimum (Fig. 3
settings), the first-order expected-ETTR relation, Eq. 3's cascade, and the what-if mechanics."""

from __future__ import annotations

import math

import pytest

from backend.planner.model import (
    Change,
    ModelInputs,
    apply_change,
    optimal_interval_s,
    predict,
    restart_bound_min_per_day,
    training_rate_from_wall_rate,
    what_if,
    wtt_s,
)

MIN = 60.0
HOUR = 3600.0


def job(**kw) -> ModelInputs:
    """A job with nothing lost unless a test says so."""
    base = dict(
        gpus=1,
        effective_s=10 * HOUR,
        failure_rate_per_gpu_h={},
        cold_start_s={},
        recovery_s={},
        csbt_s=0.0,
        interval_s=1e-9,
        final_shutdown_s=0.0,
    )
    base.update(kw)
    return ModelInputs(**base)


def test_section_2a_restart_bound_204_min_and_3400_gpu_hours_a_day():
    # Fig. 1's cold start: scheduling 6 + trainer init 15 + PT2 compile 30 = C = 51 min; a restart
    # repeats it (warm restarts skip phases, so this is the upper bound); F = 3 restarts a day.
    cold = {"scheduling": 6 * MIN, "trainer_init": 15 * MIN, "pt2_compile": 30 * MIN}
    day_min = 1440.0
    lost_min = restart_bound_min_per_day(51.0, 3.0)
    assert lost_min == 204.0
    effective = (day_min - lost_min) * MIN  # one day of wall time per job
    gpus = 1000
    inputs = job(
        gpus=gpus,
        effective_s=effective,
        failure_rate_per_gpu_h={"preemption": 3.0 / (gpus * effective / HOUR)},
        cold_start_s=cold,
        recovery_s=dict(cold),
        jobs_per_day=1.0,
    )
    p = predict(inputs)
    assert p.failures_per_job == pytest.approx(3.0)
    assert (p.e2e_s - p.effective_s) / MIN == pytest.approx(204.0, abs=1e-6)
    assert p.e2e_s == pytest.approx(86400.0, abs=1e-6)
    # 204 min x 1,000 GPUs = 3,400 GPU-hours a day.
    assert p.lost_gpu_h_per_day == pytest.approx(3400.0, abs=1e-3)
    by = p.lost_gpu_h_per_day_by_component()
    assert by["pt2_compile"] == pytest.approx(4 * 30 / 60 * 1000)
    assert by["scheduling"] == pytest.approx(4 * 6 / 60 * 1000)


@pytest.mark.parametrize(("csbt", "tau_min"), [(15.0, 10.0), (30.0, 14.142), (45.0, 17.321)])
def test_eq2_optimum_with_fig3_settings(csbt, tau_min):
    # Fig. 3: CSBT 15, 30, 45 s and three failures per job; a 10-hour job (the paper's jobs
    # run 10-12 h). tau* = sqrt(2 CSBT / lambda) with lambda = 3 / 10 h.
    inputs = job(csbt_s=csbt, interval_s=30 * MIN, failure_rate_per_gpu_h={"infra": 3 / 10.0})
    assert inputs.failures_per_job == pytest.approx(3.0)
    tau = optimal_interval_s(inputs)
    assert tau is not None
    assert tau / MIN == pytest.approx(tau_min, abs=1e-3)
    # The model's own lost time is minimal there: scan intervals from 1 to 120 min.
    grid = [s * 1.0 for s in range(60, 7200, 5)]
    lost = [predict(apply_change(inputs, Change(interval_s=t))).e2e_s for t in grid]
    best = grid[lost.index(min(lost))]
    assert best == pytest.approx(tau, abs=5.0)
    # At tau* the two terms of Eq. 2 are equal and WTT = sqrt(2 CSBT lambda) x T.
    p = predict(apply_change(inputs, Change(interval_s=tau)))
    assert p.lost_s["replay"] == pytest.approx(p.lost_s["checkpoint_blocking"])
    assert wtt_s(inputs, tau) == pytest.approx(math.sqrt(2 * csbt * 3 / (10 * HOUR)) * 10 * HOUR)
    # Convex: WTT falls to the minimum, then rises.
    assert wtt_s(inputs, tau / 2) > wtt_s(inputs, tau) < wtt_s(inputs, tau * 2)


def test_larger_csbt_moves_the_optimum_out_by_sqrt():
    taus = [
        optimal_interval_s(job(csbt_s=c, failure_rate_per_gpu_h={"infra": 0.3}))
        for c in (15, 30, 45)
    ]
    assert taus[1] / taus[0] == pytest.approx(math.sqrt(2))
    assert taus[2] / taus[0] == pytest.approx(math.sqrt(3))


def test_first_order_expected_ettr_relation():
    # A long job (start-up and shutdown negligible): ETT = 1 / (1 + lambda (R + tau/2) + CSBT/tau),
    # the first-order renewal relation (Young 1974) that expected-ETTR models build on.
    lam_per_h, restart, tau, csbt = 0.05, 20 * MIN, 45 * MIN, 40.0
    inputs = job(
        gpus=512,
        effective_s=1e4 * HOUR,
        failure_rate_per_gpu_h={"infra": lam_per_h / 512},
        recovery_s={"scheduling": restart},
        csbt_s=csbt,
        interval_s=tau,
    )
    lam = lam_per_h / HOUR
    expected = 1.0 / (1.0 + lam * (restart + tau / 2) + csbt / tau)
    assert predict(inputs).ett_pct == pytest.approx(expected * 100.0, rel=1e-9)


def test_tts_cut_counts_one_plus_nof_times():
    cold = {"pt2_compile": 30 * MIN, "trainer_init": 15 * MIN}
    inputs = job(
        failure_rate_per_gpu_h={"preemption": 0.2},  # F = 2 on a 10-hour job
        cold_start_s=cold,
        recovery_s=dict(cold),
    )
    r = what_if(inputs, Change(scale={"pt2_compile": 0.2}))
    delta = 0.8 * 30 * MIN
    assert r.tts_saving_s == pytest.approx(delta)
    assert r.cascade_saving_s == pytest.approx((1 + 2) * delta)
    assert r.before.e2e_s - r.after.e2e_s == pytest.approx(3 * delta)
    assert r.gpu_h_per_day_freed == pytest.approx(3 * delta / HOUR)


def test_gpu_count_scales_failures_per_gpu_and_keeps_the_work():
    inputs = job(gpus=64, failure_rate_per_gpu_h={"infra": 0.001}, recovery_s={"scheduling": 600.0})
    doubled = apply_change(inputs, Change(gpus=128))
    assert doubled.gpus * doubled.effective_s == inputs.gpus * inputs.effective_s
    # Same GPU-hours of training, so the same expected failures, each now costing twice the GPUs.
    assert doubled.failures_per_job == pytest.approx(inputs.failures_per_job)
    r = what_if(inputs, Change(gpus=128))
    assert r.gpu_h_per_day_freed < 0


def test_async_checkpointing_and_halved_failures():
    inputs = job(
        failure_rate_per_gpu_h={"preemption": 0.3, "infra": 0.1},
        csbt_s=60.0,
        interval_s=30 * MIN,
        recovery_s={"scheduling": 900.0},
    )
    a = apply_change(inputs, Change(csbt_scale=0.23))
    assert a.csbt_s == pytest.approx(13.8)
    h = apply_change(inputs, Change(failure_scale={"*": 0.5}))
    assert h.failures_per_job == pytest.approx(inputs.failures_per_job / 2)
    one = apply_change(inputs, Change(failure_scale={"preemption": 0.5}))
    assert one.failure_rate_per_gpu_h == {"preemption": 0.15, "infra": 0.1}


def test_a_give_up_costs_its_censored_ttr_instead_of_a_recovery_and_replay():
    # F = 2 on a 10-hour job, a quarter of failures end the job: 1.5 recoveries, 0.5 give-ups.
    inputs = job(
        failure_rate_per_gpu_h={"app_error": 0.2},
        recovery_s={"scheduling": 900.0},
        interval_s=30 * MIN,
        give_up_share=0.25,
        give_up_s={"teardown": 120.0},
    )
    p = predict(inputs)
    assert inputs.recoveries_per_job == pytest.approx(1.5)
    assert p.lost_s["recovery.scheduling"] == pytest.approx(1.5 * 900.0)
    assert p.lost_s["replay"] == pytest.approx(1.5 * 15 * MIN)
    assert p.lost_s["give_up.teardown"] == pytest.approx(0.5 * 120.0)
    assert p.lost_by_component_s["scheduling"] == pytest.approx(1.5 * 900.0 + 60.0)
    # A give-up replays nothing: only the restarting failures move the optimum interval.
    assert wtt_s(inputs) == pytest.approx(1.5 * 15 * MIN)
    # The teardown lever cuts a give-up's teardown too.
    cut = apply_change(inputs, Change(scale={"teardown": 0.5}))
    assert cut.give_up_s == {"teardown": 60.0}
    with pytest.raises(ValueError, match="give_up_share must be at most 1"):
        job(give_up_share=1.5)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (Change(scale={"compile": 0.5}), "unknown lever"),
        (Change(scale={"pt2_compile": -1.0}), "finite number >= 0"),
        (Change(failure_scale={"*": math.nan}), "finite number >= 0"),
        (Change(gpus=0), "at least 1"),
        (Change(interval_s=0.0), "interval_s must be > 0"),
    ],
)
def test_bad_changes_say_what_is_wrong(change, message):
    with pytest.raises(ValueError, match=message):
        apply_change(job(), change)


def kokolis_expected_ettr(
    n_nodes: float, rf_per_node_day: float, u0_s: float, dt_cp_s: float, w_cp_s: float
) -> float:
    """Kokolis et al. (HPCA 2025): E[ETTR] ~= (1 - N r_f (u0 + dt_cp/2)) / (1 + w_cp/dt_cp).

    As quoted from the paper (arXiv 2410.21680 v2) by dimaggi-ai/network-vs-more-gpus
    (SOURCES.md S2, src/netcap/reliability.py); the paper itself was not retrievable here.
    """
    rf = rf_per_node_day / 86400.0
    return (1.0 - n_nodes * rf * (u0_s + dt_cp_s / 2.0)) / (1.0 + w_cp_s / dt_cp_s)


@pytest.mark.parametrize(
    ("gpus", "rf", "u0_min", "dt_min", "w_s"),
    [
        (16_384, 6.50e-3, 5.0, 5.0, 0.0),  # RSC-1 rate, 5-minute interval, non-blocking saves
        (4_096, 6.50e-3, 10.0, 60.0, 0.0),  # 2-4k GPU runs at a one-hour interval
        (100_000, 2.34e-3, 2.0, 2.0, 0.0),  # RSC-2-like rate at 100k GPUs, 2-minute costs
        (2_048, 2.34e-3, 20.0, 30.0, 45.0),  # blocking saves
    ],
)
def test_kokolis_expected_ettr_relation(gpus, rf, u0_min, dt_min, w_s):
    # Their rate is per wall-clock node-day, ours per GPU-hour of training: converted exactly,
    # the planner's long-job prediction is their closed form.
    nodes = gpus / 8
    wall_rate = nodes * rf / 86400.0
    u0, dt = u0_min * MIN, dt_min * MIN
    lam_t = training_rate_from_wall_rate(wall_rate, u0, dt, w_s)
    inputs = job(
        gpus=gpus,
        effective_s=1e5 * HOUR,
        failure_rate_per_gpu_h={"infra": lam_t * HOUR / gpus},
        recovery_s={"scheduling": u0},
        csbt_s=w_s,
        interval_s=dt,
    )
    expected = kokolis_expected_ettr(nodes, rf, u0, dt, w_s)
    assert predict(inputs).ett_pct / 100.0 == pytest.approx(expected, abs=1e-6)


def test_kokolis_published_numbers():
    # Job MTTF = 1 / (N r_f), the failure rate scaled per GPU: their projections of 1.8 h at
    # 16,384 GPUs and 0.23 h at 131,072 (RSC-1: 6.50 failures per 1,000 node-days, 8 GPUs a node).
    per_gpu_h = 6.50e-3 / 8 / 24.0
    for gpus, mttf_h in ((16_384, 1.8), (131_072, 0.23)):
        rate = job(gpus=gpus, failure_rate_per_gpu_h={"infra": per_gpu_h})
        assert 1.0 / (rate.failure_rate_per_training_s * HOUR) == pytest.approx(mttf_h, abs=0.01)
    # "Moving to a 5 minute checkpoint interval would increase expected ETTR to 0.93":
    # at 16,384 GPUs with u0 = 5 min (their u0 range is 5-20 min) and non-blocking saves.
    assert kokolis_expected_ettr(16_384 / 8, 6.50e-3, 5 * MIN, 5 * MIN, 0.0) == pytest.approx(
        0.93, abs=0.005
    )


def test_the_planner_s_parts_are_the_catalogue_s_components():
    """A component added to the catalogue is a cold-start part and a lever without a planner edit."""
    from backend.ett import catalogue
    from backend.owners.mapping import DEFAULT_FILE, Resolver, load_file
    from backend.planner import model, whatif

    assert model.COLD_PARTS == catalogue.STARTUP_COMPONENTS == catalogue.COMPONENTS[:4]
    assert model.LOST_COMPONENTS == catalogue.LOST_COMPONENTS
    assert "effective_training" not in model.LOST_COMPONENTS
    assert set(model.LEVERS) >= set(catalogue.STARTUP_COMPONENTS)
    for part, component in model.PART_COMPONENT.items():
        assert component in catalogue.LOST_COMPONENTS, part
    owners = Resolver(load_file(DEFAULT_FILE))
    for lever in model.LEVERS:  # every lever has a team to hand the opportunity to
        component, phase = whatif.LEVER_OWNER_KEY[lever]
        assert owners.owner(component, phase) != "unowned", lever
