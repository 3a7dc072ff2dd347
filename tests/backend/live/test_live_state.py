"""Each live state and each detector on hand-worked jobs (backend/live/state.py, pure).

Every job goes through the real engine (compute_job, its stored shape), then `live_state` at a
later `now`: what every replica would answer from the stored result.
"""

from __future__ import annotations

import pytest

from backend.ett.engine import compute_job
from backend.live.bounds import COLD, WARM, BoundSet, Override
from backend.live.state import LiveRules, live_state
from tests.backend.ett.builders import JobEvents

GPUS = 8
BOUNDS = BoundSet(
    "m",
    learned={
        ("m", "trainer_init.process_group", ""): (60.0, 12, 20.0),
        ("m", "pt2_compile", COLD): (600.0, 12, 200.0),
        ("m", "pt2_compile", WARM): (120.0, 12, 40.0),
        ("m", "loop", ""): (90.0, 12, 30.0),
    },
    overrides=[Override(phase="hardware_setup", bound_s=100.0)],
)


def state_at(job: JobEvents, computed: float, now: float | None = None, **rules: float):
    """The engine's stored result at `computed`, judged at `now` (default: the same instant)."""
    result = compute_job(job.events, now=computed).to_dict(with_spans=True)
    return live_state(result, BOUNDS, computed if now is None else now, LiveRules(**rules))


def job() -> JobEvents:
    j = JobEvents()
    j.submitted(0, gpus=GPUS)
    return j


def test_queued_before_the_first_attempt():
    s = state_at(job(), 50)
    assert (s.state, s.since, s.bad, s.detections) == ("queued", 0, False, [])


def test_starting_in_hardware_setup_then_hung_there():
    j = job()
    j.started(0, 10)
    j.heartbeat(0, 60)
    s = state_at(j, 70)
    assert (s.state, s.since, s.attempt) == ("starting:hardware_setup", 10, 0)
    # the override bound is 100 s: crossed at 110; at 130 the overrun is 20 s
    j.heartbeat(0, 125)
    s = state_at(j, 130)
    assert (s.state, s.since, s.component) == ("hung:hardware_setup", 110, "hardware_setup")
    d = s.primary
    assert (d.bound_s, d.bound_source, d.overrun_s) == (100.0, "override", 20.0)


def test_starting_in_a_phase_within_its_bound():
    j = job()
    j.started(0, 10)
    j.phase(0, "trainer_init.device_init", 12, 20)
    j.phase_started(0, "trainer_init.process_group", 20, span_id="pg")
    j.heartbeat(0, 60)
    s = state_at(j, 65)
    assert (s.state, s.since, s.phase) == (
        "starting:trainer_init",
        12,
        "trainer_init.process_group",
    )


def test_hung_inside_process_group_after_its_learned_bound():
    """Open since 20, bound 60 s: crossed at 80. At now 125: overrun 45 s; no effective instant
    yet, so GPU-hours count from submission: 8 x 125 / 3600."""
    j = job()
    j.started(0, 10)
    j.phase_started(0, "trainer_init.process_group", 20, span_id="pg")
    j.heartbeat(0, 120)
    s = state_at(j, 122, now=125)
    assert (s.state, s.since) == ("hung:trainer_init.process_group", 80)
    d = s.primary
    assert (d.kind, d.bound_s, d.bound_source, d.bound_samples) == ("hung", 60.0, "model", 12)
    assert d.overrun_s == 45 and d.started_at == 20 and d.component == "trainer_init"
    assert d.lost_gpu_h == pytest.approx(GPUS * 125 / 3600)
    assert d.lost_gpu_h_per_h == GPUS
    # the span closes: training resumes, the state moves on
    j.add("phase", 0, phase="trainer_init.process_group", start=20, end=126, span_id="pg")
    j.progress(0, 126, 156, 0, 30)
    assert state_at(j, 157).state == "training"


def test_training_and_checkpointing():
    j = job()
    j.started(0, 10)
    j.phase(0, "trainer_init", 10, 30)
    j.progress(0, 30, 60, 0, 30)
    assert (state_at(j, 61).state, state_at(j, 61).since) == ("training", 30)
    j.checkpoint(0, 60, 75)
    s = state_at(j, 75)
    assert (s.state, s.since) == ("checkpointing", 60)


def test_hung_loop_with_live_heartbeats():
    """Trains until 60 (last cursor advance), then idle windows and heartbeats: the loop's bound
    is 90 s, crossed at 150; at 200 the overrun is 50 s and the GPU-hours run from 60."""
    j = job()
    j.started(0, 10)
    j.phase(0, "trainer_init", 10, 30)
    j.progress(0, 30, 60, 0, 30)
    j.progress(0, 60, 90, 30, 30, steps=0)
    j.progress(0, 90, 120, 30, 30, steps=0)
    j.heartbeat(0, 130)
    assert state_at(j, 140).state == "training"
    j.progress(0, 120, 150, 30, 30, steps=0)
    j.heartbeat(0, 190)
    s = state_at(j, 195, now=200)
    assert (s.state, s.since) == ("hung:loop", 150)
    d = s.primary
    assert (d.bound_s, d.overrun_s, d.started_at) == (90.0, 50.0, 60)
    assert d.lost_gpu_h == pytest.approx(GPUS * (200 - 60) / 3600)


def test_a_cold_compile_has_its_own_bound_and_a_recovery_compile_the_warm_one():
    j = job()
    j.started(0, 10)
    j.phase_started(0, "pt2_compile", 20, span_id="c0")
    j.heartbeat(0, 500)
    # cold: 600 s bound, open 480 s: within it (a warm bound would have paged)
    s = state_at(j, 500)
    assert s.state == "starting:pt2_compile"
    j.heartbeat(0, 640)
    assert state_at(j, 640).state == "hung:pt2_compile"
    assert state_at(j, 640).since == 620
    k = job()
    k.started(0, 10)
    k.progress(0, 20, 50, 0, 30)
    k.failure(0, 50)
    k.started(1, 60)
    k.phase_started(1, "pt2_compile", 70, span_id="c1")
    k.heartbeat(1, 200)
    s = state_at(k, 200)
    # warm: 120 s from 70, crossed at 190
    assert (s.state, s.since, s.primary.bound_s) == ("hung:pt2_compile", 190, 120.0)


def test_a_recompile_inside_the_loop_is_judged_as_the_phase():
    j = job()
    j.started(0, 10)
    j.progress(0, 10, 40, 0, 30)
    j.phase_started(0, "pt2_compile", 40, span_id="r")
    j.heartbeat(0, 200)
    s = state_at(j, 200)  # 160 s without advance > the loop's 90, but the compile's 600 holds
    assert s.state == "training"


def test_crash_loop_attempts_that_never_pass_the_high_water():
    """A0 reaches cursor 100 and fails; A1, A2, A3 restore to 80 and fail before passing 100:
    with k = 3 the job is crash looping from A3's failure (at 190) on."""
    j = job()
    j.started(0, 0)
    j.progress(0, 0, 100, 0, 100)
    j.failure(0, 100)
    t = 100
    for a in (1, 2, 3):
        j.started(a, t + 10)
        j.progress(a, t + 15, t + 30, 80, 95)
        j.failure(a, t + 30)
        t += 30
    s = state_at(j, 200)
    assert (s.state, s.since) == ("crash_looping", 190)
    d = s.primary
    assert d.detail == {"attempts_without_progress": 3, "high_water_cursor": 100}
    # GPU-hours from the last effective instant, 100
    assert d.lost_gpu_h == pytest.approx(GPUS * 100 / 3600)
    assert state_at(j, 200, crash_loop_attempts=4).state == "queued"
    # A4 passes the mark: progress, the loop is over (five starts in 210 s: a restart storm)
    j.started(4, 210)
    j.progress(4, 215, 245, 80, 110)
    after = state_at(j, 246)
    assert [d.kind for d in after.detections] == ["restart_storm"]
    assert state_at(j, 246, restart_storm_attempts=6).state == "training"


def test_restart_storm_priced_from_the_failure_that_began_it():
    """Attempts start at 0, 600, 1200, 1800, 2400 (each trains 100 s of new data, then fails
    400 s in): 5 in an hour, a storm from the 5th start (2400) on, priced from 0."""
    j = job()
    cursor = 0
    for a in range(5):
        t = 600 * a
        j.started(a, t)
        j.progress(a, t + 10, t + 110, cursor, cursor + 100)
        cursor += 100
        if a < 4:
            j.failure(a, t + 400)
    j.heartbeat(4, 2500)
    s = state_at(j, 2500)
    assert (s.state, s.since) == ("restart_storm", 2400)
    d = s.primary
    assert d.detail["attempts"] == 5 and d.started_at == 0
    # 2500 s since it began, 5 x 100 s of it effective: 2000 s lost x 8 GPUs
    assert d.lost_gpu_h == pytest.approx(2000 * GPUS / 3600)
    assert d.lost_gpu_h_per_h == pytest.approx(d.lost_gpu_h / (2500 / 3600))
    # one more hour on: the first starts leave the window, the storm is over
    assert not any(x.kind == "restart_storm" for x in state_at(j, 2500, now=4000).detections)


def test_silent_after_the_heartbeat_timeout_and_never_while_queued():
    j = job()
    j.started(0, 0)
    j.phase(0, "trainer_init", 0, 50)
    s = state_at(j, 60, now=450)  # last event 50, timeout 300: silent from 350
    assert (s.state, s.since, s.primary.bound_s) == ("silent", 350, 300)
    # the engine's refresh infers the failure; still silent (it stopped sending)
    assert state_at(j, 450).state == "silent"
    # a loop that stopped with its process: hung first (its bound is shorter), silent as well
    k = job()
    k.started(0, 0)
    k.progress(0, 0, 100, 0, 100)
    s = state_at(k, 150, now=450)
    assert [(d.state, d.since) for d in s.detections] == [("hung:loop", 190), ("silent", 400)]
    q = job()
    assert state_at(q, 10, now=2000).state == "queued"  # waiting in the queue is not silence


def test_finished_and_abandoned_jobs_have_no_live_state():
    j = job()
    j.started(0, 0)
    j.progress(0, 0, 100, 0, 100)
    assert state_at(j, 200, now=200 + 3600) is None  # silent past the abandon timeout
    j.ended(0, 100)
    j.job_ended(110)
    assert state_at(j, 200) is None


def test_every_replica_answers_the_same():
    """The state is a function of the stored result and now: no clock of its own."""
    j = job()
    j.started(0, 10)
    j.phase_started(0, "trainer_init.process_group", 20, span_id="pg")
    j.heartbeat(0, 120)
    result = compute_job(j.events, now=122).to_dict(with_spans=True)
    answers = {str(live_state(result, BOUNDS, 125.0).to_dict()) for _ in range(3)}
    assert len(answers) == 1
