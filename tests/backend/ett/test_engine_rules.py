"""SPEC revision 2 of section 4, rule by rule, each case worked by hand from the SPEC text."""

from __future__ import annotations

from typing import Any

import pytest

from backend.ett.catalogue import resolve_phase
from backend.ett.engine import JobETT, compute_job
from tests.backend.ett.builders import JobEvents, assert_consistent

NOW = 1_000_000.0


def run(job: JobEvents, **kw: Any) -> JobETT:
    """compute_job on the builder's events, checked for both identities."""
    result = compute_job(job.events, now=kw.pop("now", NOW), **kw)
    assert_consistent(result)
    return result


def codes(result: JobETT) -> dict[str, list[str]]:
    """warning code -> event ids."""
    return {w["code"]: w["event_ids"] for w in result.warnings}


def component_at(result: JobETT, t: float) -> tuple[str, str | None]:
    """(component, phase) of the interval holding instant t."""
    iv = next(i for i in result.intervals if i.start <= t < i.end)
    return iv.component, iv.phase


# -- item 1: clock skew ------------------------------------------------------------------------


def skewed_restart(failure_ts: float) -> tuple[JobEvents, str]:
    """Rank 0 trains to t=1000; a failure (another rank's clock) at failure_ts; restore; replay."""
    j = JobEvents()
    j.submitted(0)
    j.started(0, 0)
    j.progress(0, 0, 1000, 0, 1000)
    fail = j.failure(0, failure_ts)
    j.started(1, 1010)
    j.phase(1, "checkpoint_restore", 1010, 1020)
    j.progress(1, 1020, 1030, 900, 1000)  # replay of 900..1000
    j.progress(1, 1030, 1040, 1000, 1010)  # new data
    j.job_ended(1040)
    return j, fail


def test_failure_stamped_before_the_last_window_end_is_moved_to_it():
    j, fail = skewed_restart(999.0)
    r = run(j)
    # 1000 s + 10 s effective; TTR from 1000 (moved) to the next effective instant at 1030
    assert r.effective_s == pytest.approx(1010)
    [f] = r.l1.failures
    assert f.ts == 1000 and f.ttr_s == pytest.approx(30)
    assert r.l1.in_loop_waste_s == pytest.approx(0)
    assert codes(r)["failure_before_progress"] == sorted([fail, j.events[2]["event_id"]])
    # the same job stamped at 1000 gives the same accounting (only the warning differs)
    same, _ = skewed_restart(1000.0)
    r2 = run(same)
    assert "failure_before_progress" not in codes(r2)
    assert r.l1.to_dict() | {"failures": None} == r2.l1.to_dict() | {"failures": None}
    assert r.components == r2.components


def test_failure_is_moved_past_a_checkpoint_blocking_part_too():
    j = JobEvents()
    j.submitted(0)
    j.started(0, 0)
    j.progress(0, 0, 100, 0, 100)
    j.checkpoint(0, 100, 110)
    j.ended(0, 105, reason="failure")  # a failure of kind app_error at 105
    j.job_ended(120, status="failed")
    r = run(j)
    [f] = r.l1.failures
    assert (f.ts, f.kind) == (110, "app_error")
    assert "failure_before_progress" in codes(r)
    # 0..100 effective, 100..110 blocking (in-loop waste before the failure), TTR 110..120
    assert r.effective_s == 100 and r.wasted["checkpoint_blocking"] == 10
    assert f.ttr_s == 10 and f.censored


def test_progress_of_a_leftover_process_is_cut_at_the_next_attempt_start():
    j = JobEvents()
    j.submitted(0)
    j.started(0, 0)
    zombie = j.progress(0, 0, 100, 0, 100)  # the old rank 0 keeps reporting until 100
    late_ckpt = j.checkpoint(0, 90, 95)  # entirely after the next start: cut off
    j.started(1, 80)
    j.progress(1, 90, 120, 80, 110)
    j.job_ended(120)
    r = run(j)
    assert codes(r)["progress_after_next_attempt"] == sorted([zombie, late_ckpt])
    # attempt 0 counts 0..80 (cursor 0..80); attempt 1 is effective from cursor 80 on
    assert r.effective_s == pytest.approx(110)
    assert r.wasted["checkpoint_blocking"] == 0
    [f] = r.l1.failures  # inferred: attempt 0 stopped sending, a later attempt started
    assert f.inferred and f.ts == 80 and f.ttr_s == pytest.approx(10)
    assert component_at(r, 85) == ("hardware_setup", "hardware_setup")


# -- item 2: overlapping windows ---------------------------------------------------------------


def test_window_inside_another_classifies_its_instants_and_raises_the_mark():
    j = JobEvents()
    j.submitted(0)
    j.started(0, 0)
    j.progress(0, 0, 100, 0, 100)
    j.progress(0, 20, 30, 500, 510)  # a second process as rank 0, far ahead
    j.job_ended(100)
    r = run(j)
    # 0..20 effective (outer window), 20..30 the inner one (later start) is effective,
    # 30..100 the outer window's cursor 30..100 is below the mark 510 the inner one reached
    assert r.effective_s == pytest.approx(30)
    assert r.wasted["replay"] == pytest.approx(70)
    assert "overlapping_progress" in codes(r)


def test_same_start_smaller_event_id_classifies_and_the_other_raises_the_mark():
    j = JobEvents()
    j.submitted(0)
    j.started(0, 0)
    j.progress(0, 0, 10, 0, 10)  # smaller event_id: classifies 0..10
    j.progress(0, 0, 10, 100, 110)  # raises the mark at every instant it covers
    j.progress(0, 10, 20, 110, 120)
    j.job_ended(20)
    r = run(j)
    assert r.wasted["replay"] == pytest.approx(10)
    assert r.effective_s == pytest.approx(10)


def test_a_resent_window_changes_nothing():
    j = JobEvents()
    j.submitted(0)
    j.started(0, 0)
    j.progress(0, 0, 50, 0, 50)
    j.progress(0, 10, 20, 10, 20)  # the same data resent as a shorter window
    j.job_ended(50)
    r = run(j)
    assert r.effective_s == pytest.approx(50)


# -- item 3: a hung job ends failed ------------------------------------------------------------


def test_job_ended_failed_infers_a_failure_at_the_last_heartbeat():
    j = JobEvents()
    j.submitted(0)
    j.started(0, 0)
    j.progress(0, 0, 100, 0, 100)
    j.failure(0, 100)
    j.started(1, 110)
    pg = j.phase_started(1, "trainer_init.process_group", 120)  # hangs in init_process_group
    for t in range(130, 481, 10):
        j.heartbeat(1, float(t))
    j.job_ended(487, status="failed")
    r = run(j)
    assert r.l1.nof == 2
    second = r.l1.failures[1]
    assert second.inferred and second.kind == "unknown" and second.ts == 480
    assert "inferred_failure_job_failed" in codes(r)
    # the hung phase keeps its time up to the last sign of life; then 7 s to job_ended
    assert r.phases["trainer_init.process_group"].exposed_s == pytest.approx(360)
    assert pg in codes(r)["phase_never_ended"]
    assert component_at(r, 483) == ("shutdown", "shutdown")
    assert r.l1.failures[0].ttr_s == pytest.approx(380) and r.l1.failures[0].interrupted
    assert second.ttr_s == pytest.approx(7) and second.censored


def test_job_ended_failed_with_a_failure_in_the_last_attempt_infers_nothing():
    j = JobEvents()
    j.submitted(0)
    j.started(0, 0)
    j.failure(0, 50)
    j.heartbeat(0, 60)
    j.job_ended(70, status="failed")
    r = run(j)
    assert r.l1.nof == 1 and not r.l1.failures[0].inferred


# -- item 4: abandoned jobs --------------------------------------------------------------------


def open_job() -> JobEvents:
    """An open job whose trainer died at t=1000 after 500 s of training."""
    j = JobEvents()
    j.submitted(0)
    j.started(0, 100)
    j.progress(0, 500, 1000, 0, 500)
    return j


def test_open_job_alive_is_provisional_and_ends_now():
    r = run(open_job(), now=1500)
    assert r.provisional and not r.abandoned and r.status == "running"
    assert r.ended_at == 1500 and r.live_tail_start == 1000
    assert r.to_dict()["live_tail_start"] == 1000


def test_open_job_silent_past_the_abandon_timeout_ends_at_its_last_event():
    r = run(open_job(), now=1000 + 3601)
    assert r.abandoned and not r.provisional and r.status == "abandoned"
    assert r.ended_at == 1000 and r.e2e_s == 1000 and r.ett_pct == pytest.approx(50)
    assert "abandoned" in codes(r) and r.live_tail_start is None
    # no decay: an hour later the answer is the same
    later = run(open_job(), now=1000 + 7200)
    assert later.to_dict() == r.to_dict()
    # the dead attempt was silent past the heartbeat timeout: an inferred failure, censored
    [f] = r.l1.failures
    assert f.inferred and f.ts == 1000 and f.ttr_s == 0


def test_abandon_timeout_is_a_parameter_and_a_later_event_reopens_the_job():
    j = open_job()
    assert run(j, now=1000 + 200, abandon_timeout_s=100).abandoned
    j.heartbeat(0, 1150)
    r = run(j, now=1200, abandon_timeout_s=100)
    assert r.provisional and not r.abandoned and r.ended_at == 1200


# -- item 9: the readings the SPEC fixes -------------------------------------------------------


def test_phase_started_matches_by_span_id():
    j = JobEvents()
    j.submitted(0)
    j.started(0, 0)
    j.phase_started(0, "trainer_init", 10, span_id="s1")
    j.phase(0, "trainer_init", 15, 20, span_id="s1")  # start 5 s off: span_id decides
    j.job_ended(20)
    r = run(j)
    assert "phase_never_ended" not in codes(r)
    assert r.phases["trainer_init"].total_s == 5


def test_phase_started_matches_the_nearest_start_within_one_second():
    j = JobEvents()
    j.submitted(0)
    j.started(0, 0)
    j.phase_started(0, "pt2_compile", 10.0)
    j.phase(0, "pt2_compile", 10.8, 20)
    late = j.phase_started(0, "pt2_compile", 30.0)
    j.phase(0, "pt2_compile", 31.5, 35)  # 1.5 s away: no match
    j.ended(0, 40)
    j.job_ended(40)
    r = run(j)
    assert codes(r)["phase_never_ended"] == [late]


def test_different_span_ids_never_match():
    j = JobEvents()
    j.submitted(0)
    j.started(0, 0)
    hung = j.phase_started(0, "trainer_init.process_group", 10, span_id="rank1")
    j.phase(0, "trainer_init.process_group", 10, 20, span_id="rank0")
    j.ended(0, 50)
    j.job_ended(50)
    r = run(j)
    assert codes(r)["phase_never_ended"] == [hung]
    assert r.phases["trainer_init.process_group"].total_s == 40


def test_open_span_closes_at_the_earlier_of_failure_and_attempt_ended():
    j = JobEvents()
    j.submitted(0)
    j.started(0, 0)
    j.phase_started(0, "trainer_init", 10)
    j.failure(0, 50)
    j.ended(0, 60, reason="failure")
    j.job_ended(70, status="failed")
    r = run(j)
    assert r.phases["trainer_init"].total_s == 40


def test_first_span_is_any_event_with_a_start():
    j = JobEvents()
    j.submitted(0)
    j.started(0, 0)
    j.phase_started(0, "trainer_init", 5)
    j.ended(0, 20)
    j.job_ended(20)
    r = run(j)
    assert component_at(r, 2) == ("hardware_setup", "hardware_setup")
    assert component_at(r, 10) == ("trainer_init", "trainer_init")


def test_earliest_of_several_attempt_ended_counts():
    j = JobEvents()
    j.submitted(0)
    j.started(0, 0)
    j.ended(0, 40, reason="preempted")
    j.ended(0, 30, reason="failure")
    j.job_ended(50, status="failed")
    r = run(j)
    [f] = r.l1.failures
    assert (f.ts, f.kind) == (30, "app_error")
    assert "multiple_attempt_ended" in codes(r)


@pytest.mark.parametrize("reason", ["failure", "completed"])
def test_after_the_last_attempt_stops_shutdown_if_ended_scheduling_while_open(reason: str):
    j = JobEvents()
    j.submitted(0)
    j.started(0, 0)
    j.progress(0, 0, 50, 0, 50)
    j.ended(0, 50, reason=reason)
    r_open = run(j, now=80)
    assert r_open.provisional and component_at(r_open, 60) == ("scheduling", "scheduling")
    j.job_ended(80, status="failed" if reason == "failure" else "succeeded")
    r = run(j)
    assert component_at(r, 60) == ("shutdown", "shutdown")


def test_process_start_is_a_trainer_init_stage_owned_by_the_trainer_team():
    from backend.ett.catalogue import CATALOGUE

    row = next(e for e in CATALOGUE if e.phase == "trainer_init.process_start")
    assert (row.component, row.owner) == ("trainer_init", "trainer")
    assert resolve_phase("trainer_init.process_start").known
    j = JobEvents()
    j.submitted(0)
    j.started(0, 0)
    j.phase(0, "trainer_init.process_start", 2, 12)  # interpreter start, import torch
    j.phase(0, "trainer_init", 12, 20)
    j.ended(0, 20)
    j.job_ended(20)
    r = run(j)
    assert r.components["trainer_init"] == 18 and r.components["hardware_setup"] == 2
