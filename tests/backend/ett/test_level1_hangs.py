"""SPEC revision 2.1, Level 1: a hang is never final shutdown (hand-worked jobs).

Before the rule, everything after the last effective instant outside a TTR window was final
shutdown: a live hung job showed its stall as shutdown, and so did a job that hung and then
ended failed, so the planner read the hang as shutdown cost.
"""

from __future__ import annotations

import pytest

from backend.ett.engine import compute_job
from backend.ett.level1 import split_final_shutdown
from tests.backend.ett.builders import JobEvents, assert_consistent


def run(job: JobEvents, now: float = 1_000_000.0):
    """compute_job with both identities checked."""
    result = compute_job(job.events, now=now)
    assert_consistent(result)
    return result


def test_a_live_hung_loop_is_in_loop_waste_while_it_lasts():
    """Trains 0-100, then the agent's idle window 100-400 (cursor 100) and a heartbeat at 400.

    At now = 410: effective 100, stalled 300, live tail 400-410 (10 s uncovered). No failure, so
    TTS 0 and no TTR: the 310 s after the last effective instant are in-loop waste, provisional;
    final shutdown 0 (it was 310 before revision 2.1).
    """
    j = JobEvents()
    j.submitted(0)
    j.started(0, 0)
    j.progress(0, 0, 100, 0, 100)
    j.progress(0, 100, 400, 100, 100, steps=0)
    j.heartbeat(0, 400)
    r = run(j, now=410)
    assert r.provisional and r.e2e_s == 410
    assert r.effective_s == 100 and r.wasted["stalled"] == 300
    assert r.l1.tts_s == 0 and r.l1.nof == 0
    assert r.l1.in_loop_waste_s == pytest.approx(310)
    assert r.l1.final_shutdown_s == 0


def test_a_job_that_hangs_then_ends_failed_books_the_hang_as_in_loop_waste():
    """Trains 0-100, stalls 100-300, heartbeats until 480, `job_ended` failed at 487.

    The failure is inferred at the last sign of life, 480: TTR 480-487 (7 s, censored). The
    hang 100-480 (stall 200 s, uncovered 180 s) lies before that failure: in-loop waste 380 s;
    final shutdown 0, although 480-487 is the shutdown component (it is inside the TTR).
    """
    j = JobEvents()
    j.submitted(0)
    j.started(0, 0)
    j.progress(0, 0, 100, 0, 100)
    j.progress(0, 100, 300, 100, 100, steps=0)
    for t in range(310, 481, 10):
        j.heartbeat(0, t)
    j.job_ended(487, status="failed")
    r = run(j)
    assert r.l1.nof == 1 and r.l1.failures[0].ts == 480 and r.l1.failures[0].censored
    assert r.l1.failures[0].ttr_s == 7
    assert r.components["shutdown"] == 7
    assert r.l1.in_loop_waste_s == pytest.approx(380)
    assert r.l1.final_shutdown_s == 0


def test_an_open_phase_after_the_last_effective_instant_is_in_loop_waste():
    """Trains 0-100, opens a mid-run `pt2_compile` (a recompile) at 100 that never ends, beats
    until 400; at now = 405 the open span runs 100-405 (305 s of PT2 compile): in-loop waste."""
    j = JobEvents()
    j.submitted(0)
    j.started(0, 0)
    j.progress(0, 0, 100, 0, 100)
    j.phase_started(0, "pt2_compile", 100, span_id="s1")
    j.heartbeat(0, 400)
    r = run(j, now=405)
    assert r.components["pt2_compile"] == 305
    assert r.l1.in_loop_waste_s == pytest.approx(305)
    assert r.l1.final_shutdown_s == 0


def test_shutdown_and_publish_after_the_last_effective_instant_stay_final_shutdown():
    """Trains 0-100, a 5 s stall, `shutdown` 105-115, `publish` 115-130, the attempt ends at 130
    and the job at 134: in-loop waste 5 (the stall); final shutdown 10 + 15 + 4 = 29 (the last
    4 s are the implicit shutdown after the attempt)."""
    j = JobEvents()
    j.submitted(0)
    j.started(0, 0)
    j.progress(0, 0, 100, 0, 100)
    j.progress(0, 100, 105, 100, 100, steps=0)
    j.phase(0, "shutdown", 105, 115)
    j.phase(0, "publish", 115, 130)
    j.ended(0, 130)
    j.job_ended(134)
    r = run(j)
    assert r.l1.in_loop_waste_s == 5
    assert r.l1.final_shutdown_s == 10 + 15 + 4


def test_the_split_of_one_piece_at_the_last_effective_instant():
    """split_final_shutdown: (waste, shutdown) of a lost piece outside the Level-1 windows."""
    assert split_final_shutdown((100, 130, 0, "shutdown", "shutdown"), 90) == (0, 30)
    assert split_final_shutdown((80, 130, 0, "shutdown", "publish"), 100) == (20, 30)
    assert split_final_shutdown((10, 20, 0, "shutdown", "shutdown"), 100) == (10, 0)
    assert split_final_shutdown((100, 130, 0, "wasted_training", "stalled"), 90) == (30, 0)
    assert split_final_shutdown((100, 130, 0, "unattributed", None), 90) == (30, 0)
    assert split_final_shutdown((100, 130, 0, "trainer_init", "trainer_init"), 90) == (30, 0)
