"""Hand-computed timelines through the pure engine (no database)."""

from __future__ import annotations

import pytest

from backend.ett.engine import compute_job
from tests.backend.ett.builders import JobEvents, M, assert_consistent

NOW = 1_000_000.0


def run(job: JobEvents, **kw: object):
    """compute_job on the builder's events, checked for the identities."""
    result = compute_job(job.events, now=kw.pop("now", NOW), **kw)  # type: ignore[arg-type]
    assert_consistent(result)
    return result


def spans(result, component: str) -> list[tuple[float, float, str | None]]:
    """The (start, end, phase) of every interval of one component."""
    return [(i.start, i.end, i.phase) for i in result.intervals if i.component == component]


def test_paper_fig1_job_is_90_of_151_5_minutes():
    """Fig. 1: 151.5 min, effective 90.0, PT2 30.0, init 15.0, scheduling 6.0, waste + shutdown 9.1."""
    j = JobEvents()
    j.submitted(0, gpus=128)
    j.started(0, 6.0 * M)
    # hardware setup (implicit) 6.0 -> 7.4
    j.phase(0, "trainer_init", 7.4 * M, 22.4 * M)
    j.phase(0, "pt2_compile", 22.4 * M, 52.4 * M)
    j.progress(0, 52.4 * M, 100.0 * M, 0, 4760)
    j.checkpoint(0, 100.0 * M, 106.0 * M)  # between windows: blocking 6.0 min
    j.progress(0, 106.0 * M, 148.4 * M, 4760, 9000)
    j.progress(0, 148.4 * M, 150.0 * M, 9000, 9000)  # stalled 1.6 min
    j.ended(0, 150.0 * M)
    j.job_ended(151.5 * M)
    r = run(j)
    assert r.e2e_s == pytest.approx(151.5 * M)
    assert r.ett_pct == pytest.approx(90.0 / 151.5 * 100)
    c = r.components
    assert c["effective_training"] == pytest.approx(90.0 * M)
    assert c["pt2_compile"] == pytest.approx(30.0 * M)
    assert c["trainer_init"] == pytest.approx(15.0 * M)
    assert c["scheduling"] == pytest.approx(6.0 * M)
    assert c["hardware_setup"] == pytest.approx(1.4 * M)
    assert c["wasted_training"] + c["shutdown"] == pytest.approx(9.1 * M)
    assert r.wasted == pytest.approx(
        {"replay": 0, "checkpoint_blocking": 6 * M, "stalled": 1.6 * M}
    )
    assert c["unattributed"] == 0
    assert r.gpu_hours_lost == pytest.approx((151.5 - 90.0) / 60 * 128)
    assert r.l1.tts_s == pytest.approx(52.4 * M)
    # Revision 2.1: the closing 1.6 min stall is in-loop waste (a hang is never shutdown);
    # final shutdown is the 1.5 min after the attempt ended.
    assert r.l1.in_loop_waste_s == pytest.approx(7.6 * M)
    assert r.l1.final_shutdown_s == pytest.approx(1.5 * M)
    assert r.l1.nof == 0 and r.warnings == []
    assert not r.provisional and r.status == "succeeded"


def test_paper_restart_arithmetic_section_2a():
    """C = 51 min cold start, F = 3 restarts: (1 + F) C = 204 min; 3,400 GPU-hours on 1,000 GPUs."""
    j = JobEvents()
    j.submitted(0, gpus=1000)
    t = 0.0
    cursor = 0.0
    for attempt in range(4):
        t += 6 * M  # re-queue: scheduling
        j.started(attempt, t)
        j.phase(attempt, "trainer_init", t, t + 15 * M)
        j.phase(attempt, "pt2_compile", t + 15 * M, t + 45 * M)
        t += 45 * M
        j.progress(attempt, t, t + 60 * M, cursor, cursor + 600)
        t += 60 * M
        cursor += 600
        if attempt < 3:
            j.ended(attempt, t, reason="failure")
        else:
            j.ended(attempt, t)
    j.job_ended(t)
    r = run(j)
    lost = r.e2e_s - r.effective_s
    assert lost == pytest.approx((1 + 3) * 51 * M)
    assert r.gpu_hours_lost == pytest.approx(3400.0)
    assert r.l1.nof == 3
    assert r.l1.nof_by_kind()["app_error"] == 3
    assert r.l1.tts_s == pytest.approx(51 * M)
    assert [f.ttr_s for f in r.l1.failures] == pytest.approx([51 * M] * 3)
    # Eq. 1 is the special case without in-loop waste or final shutdown
    assert r.l1.tts_s + r.l1.nof * (r.l1.recovery_s / 3) == pytest.approx(lost)
    assert r.l1.in_loop_waste_s == 0 and r.l1.final_shutdown_s == 0
    assert r.components["scheduling"] == pytest.approx(4 * 6 * M)


def test_replay_crosses_high_water_mark_inside_a_window():
    """Restore to cursor 600 after reaching 1000: the window is replay until its cursor passes 1000."""
    j = JobEvents()
    j.submitted(0)
    j.started(0, 10)
    j.progress(0, 100, 200, 0, 1000)
    j.failure(0, 200, kind="infra")
    j.ended(0, 210, reason="failure")
    j.started(1, 250)
    j.phase(1, "checkpoint_restore", 250, 300)
    j.progress(1, 300, 400, 600, 1100)  # cursor 1000 reached at 300 + 400/500*100 = 380
    j.ended(1, 400)
    j.job_ended(400)
    r = run(j)
    assert spans(r, "wasted_training") == [(300, pytest.approx(380), "replay")]
    assert r.effective_s == pytest.approx(100 + 20)
    assert r.wasted["replay"] == pytest.approx(80)
    assert r.l1.tts_s == 100
    (f,) = r.l1.failures
    assert (f.ts, f.kind, f.inferred, f.interrupted, f.censored) == (
        200,
        "infra",
        False,
        False,
        False,
    )
    assert f.ttr_s == pytest.approx(180)  # teardown + re-queue + restore + replay
    assert r.components["scheduling"] == 10 + 50  # queue, then failure to next attempt_started
    assert r.components["trainer_init"] == 50  # checkpoint_restore lands in trainer_init
    assert r.phases["checkpoint_restore"].exposed_s == 50
    assert r.components["hardware_setup"] == 90


def test_parallel_init_compile_hides_data_warmup():
    """Fast-batch (Eq. 4): first_batch runs beside pt2_compile; the longer compile takes the time."""
    j = JobEvents()
    j.submitted(0)
    j.started(0, 0)
    j.phase(0, "trainer_init.process_group", 0, 10)
    j.phase(0, "trainer_init.first_batch", 10, 30)
    j.phase(0, "pt2_compile", 10, 45)
    j.phase(0, "trainer_init.train_module", 10, 18)
    j.progress(0, 45, 100, 0, 10)
    j.ended(0, 100)
    j.job_ended(100)
    r = run(j)
    ph = r.phases
    assert (ph["trainer_init.first_batch"].total_s, ph["trainer_init.first_batch"].exposed_s) == (
        20,
        0,
    )
    assert (ph["trainer_init.train_module"].total_s, ph["trainer_init.train_module"].exposed_s) == (
        8,
        0,
    )
    assert (ph["pt2_compile"].total_s, ph["pt2_compile"].exposed_s) == (35, 35)
    assert r.components["pt2_compile"] == 35
    assert r.components["trainer_init"] == 10
    assert r.l1.tts_s == 45


def test_ancestor_span_yields_to_its_sub_stage():
    """`trainer_init` ends later but yields while `trainer_init.process_group` is active."""
    j = JobEvents()
    j.submitted(0)
    j.started(0, 0)
    j.phase(0, "trainer_init", 0, 50)
    j.phase(0, "trainer_init.process_group", 5, 20)
    j.progress(0, 50, 60, 0, 1)
    j.ended(0, 60)
    j.job_ended(60)
    r = run(j)
    assert [(i.start, i.end, i.phase) for i in r.intervals if i.component == "trainer_init"] == [
        (0, 5, "trainer_init"),
        (5, 20, "trainer_init.process_group"),
        (20, 50, "trainer_init"),
    ]
    assert r.phases["trainer_init"].total_s == 50
    assert r.phases["trainer_init"].exposed_s == 35


def test_ties_go_to_later_start_then_catalogue_order():
    """Same end: the later start wins; same start and end: the earlier catalogue row wins."""
    j = JobEvents()
    j.submitted(0)
    j.started(0, 0)
    j.phase(0, "pt2_compile", 0, 20)
    j.phase(0, "checkpoint_restore", 5, 20)
    j.phase(0, "publish", 20, 30)
    j.phase(0, "trainer_init.plugins", 20, 30)
    j.ended(0, 30)
    j.job_ended(30)
    r = run(j)
    assert [(i.start, i.end, i.phase) for i in r.intervals] == [
        (0, 5, "pt2_compile"),
        (5, 20, "checkpoint_restore"),
        (20, 30, "trainer_init.plugins"),
    ]


def test_checkpoint_inside_progress_window_is_blocking_waste():
    """Rule 1 beats rule 2; the cursor still moves linearly under the save."""
    j = JobEvents()
    j.submitted(0)
    j.started(0, 0)
    j.progress(0, 0, 100, 0, 100)
    j.checkpoint(0, 40, 50, committed=80, cursor=40)
    j.progress(0, 100, 110, 100, 110)
    j.ended(0, 110)
    j.job_ended(110)
    r = run(j)
    assert spans(r, "wasted_training") == [(40, 50, "checkpoint_blocking")]
    assert r.effective_s == 100
    assert r.l1.in_loop_waste_s == 10
    assert r.l1.tts_s == 0 and r.l1.final_shutdown_s == 0


def test_crash_without_attempt_ended_infers_a_failure_at_the_last_event():
    """Attempt 0 goes silent at 510; attempt 1 starts: inferred failure (unknown) at 510."""
    j = JobEvents()
    j.submitted(0)
    j.started(0, 0)
    j.progress(0, 100, 500, 0, 400)
    j.heartbeat(0, 510)
    j.started(1, 700)
    j.progress(1, 800, 900, 400, 500)
    j.ended(1, 900)
    j.job_ended(950)
    r = run(j)
    (f,) = r.l1.failures
    assert (f.ts, f.kind, f.inferred, f.attempt) == (510, "unknown", True, 0)
    assert f.ttr_s == 800 - 510
    assert r.components["unattributed"] == 10  # 500..510, inside attempt 0 after its first span
    assert r.components["scheduling"] == 190  # 510..700
    assert r.components["hardware_setup"] == 100 + 100
    assert r.components["shutdown"] == 50
    assert r.l1.final_shutdown_s == 50
    assert r.l1.tts_s == 100
    assert r.attempts[0].ended_at == 510


def test_silent_attempt_on_open_job_fails_only_after_the_heartbeat_timeout():
    """An open job whose attempt went quiet: no failure within the timeout, inferred after it."""
    j = JobEvents()
    j.submitted(0)
    j.started(0, 0)
    j.progress(0, 10, 100, 0, 90)
    j.heartbeat(0, 120)
    live = run(j, now=300)
    assert live.provisional and live.status == "running"
    assert live.l1.nof == 0 and live.e2e_s == 300
    assert live.components["unattributed"] == 200  # 100..300, the attempt is still running
    dead = run(j, now=1000)
    (f,) = dead.l1.failures
    assert f.inferred and f.ts == 120 and f.censored
    assert f.ttr_s == 880
    # after the failure an open job waits for its next attempt: scheduling, not shutdown
    assert dead.components["scheduling"] == 880
    assert run(j, now=1000, heartbeat_timeout_s=2000).l1.nof == 0


def test_interrupted_and_censored_recoveries():
    """A failure during recovery interrupts the TTR; a job that never recovers is censored."""
    j = JobEvents()
    j.submitted(0)
    j.started(0, 0)
    j.progress(0, 10, 20, 0, 10)
    j.failure(0, 20, kind="preemption")
    j.ended(0, 20, reason="preempted")  # same attempt: still one failure
    j.started(1, 30)
    j.failure(1, 40, kind="infra")
    j.started(2, 50)
    j.ended(2, 60, reason="failure")
    j.job_ended(70, status="failed")
    r = run(j)
    assert r.l1.nof == 3
    assert r.l1.nof_by_kind() == {
        "preemption": 1,
        "app_error": 1,
        "infra": 1,
        "induced": 0,
        "unknown": 0,
    }
    f0, f1, f2 = r.l1.failures
    assert (f0.ts, f0.ttr_s, f0.interrupted, f0.censored) == (20, 20, True, False)
    assert (f1.ts, f1.ttr_s, f1.interrupted, f1.censored) == (40, 20, True, False)
    assert (f2.ts, f2.ttr_s, f2.interrupted, f2.censored) == (60, 10, False, True)
    assert r.l1.tts_s == 10 and r.l1.final_shutdown_s == 0
    assert r.components["shutdown"] == 10 and r.status == "failed"


def test_failure_before_first_effective_instant_interrupts_tts():
    """TTS stops at the first failure when that comes before any effective training."""
    j = JobEvents()
    j.submitted(0)
    j.started(0, 10)
    j.phase(0, "pt2_compile", 10, 40)
    j.failure(0, 40)
    j.started(1, 60)
    j.progress(1, 70, 100, 0, 30)
    j.ended(1, 100)
    j.job_ended(100)
    r = run(j)
    assert r.l1.tts_s == 40 and r.l1.tts_interrupted
    assert r.l1.failures[0].ttr_s == 30
    assert r.effective_s == 30


def test_no_effective_training_at_all_is_all_tts():
    """A job that never trains: TTS is the whole wall time, ETT% is 0."""
    j = JobEvents()
    j.submitted(0)
    j.started(0, 5)
    j.phase(0, "trainer_init", 5, 50)
    j.ended(0, 50, reason="cancelled")
    j.job_ended(60, status="cancelled")
    r = run(j)
    assert r.ett_pct == 0 and r.l1.tts_s == 60 and r.l1.tts_censored
    assert r.components["shutdown"] == 10


def test_stalled_window_and_final_shutdown():
    """A window whose cursor does not advance is stalled; after the last effective instant it is
    in-loop waste (revision 2.1: a hang is never shutdown), and only publish and the implicit
    shutdown after the attempt are final shutdown."""
    j = JobEvents()
    j.submitted(0)
    j.started(0, 0)
    j.progress(0, 0, 10, 0, 10)
    j.progress(0, 10, 15, 10, 10)
    j.progress(0, 15, 25, 10, 20)
    j.progress(0, 25, 30, 20, 20)
    j.phase(0, "publish", 30, 40)
    j.ended(0, 40)
    j.job_ended(42)
    r = run(j)
    assert r.wasted["stalled"] == 10
    assert r.l1.in_loop_waste_s == 5 + 5
    assert r.l1.final_shutdown_s == 10 + 2
    assert r.components["shutdown"] == 12
    assert r.phases["publish"].exposed_s == 10


def test_custom_phases_follow_configuration():
    """custom.<name>: mapped by configuration, else unattributed under its own name."""
    j = JobEvents()
    j.submitted(0)
    j.started(0, 0)
    j.phase(0, "custom.warmup", 0, 10)
    j.phase(0, "custom.mystery", 10, 15)
    j.progress(0, 15, 20, 0, 5)
    j.ended(0, 20)
    j.job_ended(20)
    r = run(j, custom_phases={"custom.warmup": "trainer_init"})
    assert r.components["trainer_init"] == 10
    assert r.components["unattributed"] == 5
    assert spans(r, "unattributed") == [(10, 15, "custom.mystery")]
    assert [w["code"] for w in r.warnings] == ["unknown_phase"]
    assert r.phases["custom.mystery"].exposed_s == 5


def test_open_phase_is_closed_by_attempt_end_or_matching_phase():
    """phase_started is closed by the matching phase; else by its attempt's end (a warning)."""
    j = JobEvents()
    j.submitted(0)
    j.started(0, 0)
    j.phase_started(0, "trainer_init", 0)
    j.phase(0, "trainer_init", 0, 10)
    lost = j.phase_started(0, "pt2_compile", 10)
    j.ended(0, 30, reason="failure")
    j.job_ended(35, status="failed")
    r = run(j)
    assert r.components["trainer_init"] == 10
    assert r.components["pt2_compile"] == 20
    assert r.warnings == [
        {
            "code": "phase_never_ended",
            "message": r.warnings[0]["message"],
            "count": 1,
            "event_ids": [lost],
        }
    ]


def test_open_job_live_phase_runs_to_now_without_warning():
    """A live attempt's open span reaches 'now'; the job is provisional."""
    j = JobEvents()
    j.submitted(0)
    j.started(0, 10)
    j.phase_started(0, "pt2_compile", 20)
    j.heartbeat(0, 90)
    r = run(j, now=100)
    assert r.provisional and r.ended_at == 100
    assert r.components["pt2_compile"] == 80
    assert r.warnings == []


def test_submitted_never_started_is_scheduling():
    """A queued job: all its time is scheduling; ETT% 0."""
    j = JobEvents()
    j.submitted(0)
    r = run(j, now=50)
    assert r.components["scheduling"] == 50 and r.status == "pending"
    assert r.to_dict()["intervals"] == [
        {
            "start": 0,
            "end": 50,
            "attempt": None,
            "component": "scheduling",
            "phase": "scheduling",
            "gpus": 8,
        }
    ]


def test_attempt_summaries():
    """Attempts list start, end and reason; a failure without attempt_ended ends it at the failure."""
    j = JobEvents()
    j.submitted(0)
    j.started(0, 5, host="a", gpus=8)
    j.failure(0, 20, kind="infra")
    j.started(1, 30, host="b")
    j.progress(1, 30, 40, 0, 10)
    j.job_ended(45)  # attempt 1 never sent attempt_ended, but the job closed within the timeout
    r = run(j)
    a0, a1 = r.attempts
    assert (a0.started_at, a0.ended_at, a0.reason, a0.host, a0.gpus) == (5, 20, "failure", "a", 8)
    assert (a1.started_at, a1.ended_at, a1.reason, a1.host) == (30, 45, None, "b")
    assert r.status == "succeeded" and r.l1.nof == 1
