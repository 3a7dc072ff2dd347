"""Wire events of finished history and of live jobs with faults, for the live-state tests.

Times are real epoch seconds (the recompute runs at the wall clock), so each builder takes the
instant its job starts.
"""

from __future__ import annotations

from typing import Any

from tests.backend.ett.builders import JobEvents

WINDOW_S = 30.0


def finished(
    job_id: str,
    model: str,
    t: float,
    *,
    process_group_s: float = 20.0,
    compile_s: float = 100.0,
    windows: int = 6,
    window_s: float = WINDOW_S,
    gpus: int = 8,
    owner: str = "ranking",
) -> list[dict[str, Any]]:
    """A healthy finished job: set-up 5 s, trainer_init with a process group, a cold compile,
    `windows` advancing windows (30 s unless given), a 10 s shutdown."""
    j = JobEvents(job_id)
    j.submitted(t, model=model, gpus=gpus, labels={"owner": owner})
    j.started(0, t + 1)
    s = t + 6
    pg_end = s + 2 + process_group_s
    j.phase(0, "trainer_init", s, pg_end + 3)
    j.phase(0, "trainer_init.process_group", s + 2, pg_end)
    c0 = pg_end + 3
    j.phase(0, "pt2_compile", c0, c0 + compile_s)
    w = c0 + compile_s
    for i in range(windows):
        j.progress(0, w, w + window_s, i * 30, (i + 1) * 30, steps=30)
        w += window_s
    j.phase(0, "shutdown", w, w + 10)
    j.ended(0, w + 10)
    j.job_ended(w + 12)
    return j.events


def history(
    model: str, t: float, n: int = 10, *, prefix: str | None = None, **kw: Any
) -> list[dict[str, Any]]:
    """`n` finished jobs of a model, one per 10 minutes from `t`; job i's process group takes
    20 + i s and its compile 100 + 10 i s (unless given)."""
    events: list[dict[str, Any]] = []
    for i in range(n):
        args = {"process_group_s": 20.0 + i, "compile_s": 100.0 + 10.0 * i, **kw}
        events += finished(f"{prefix or model}-h{i:02d}", model, t + 600 * i, **args)
    return events


def hung_in_phase(
    job_id: str, model: str, t: float, phase: str, now: float, *, gpus: int = 8
) -> JobEvents:
    """Started at t, opens `phase` at t + 10 that never ends, heartbeats every 10 s until now."""
    j = JobEvents(job_id)
    j.submitted(t, model=model, gpus=gpus, labels={"owner": "ranking"})
    j.started(0, t + 1)
    j.phase_started(0, phase, t + 10, span_id=f"{job_id}-open")
    beat = t + 20
    while beat <= now:
        j.heartbeat(0, beat)
        beat += 10
    return j


def hung_loop(job_id: str, model: str, t: float, trained: int, now: float) -> JobEvents:
    """Trains `trained` 30 s windows from t + 10, then only idle windows (cursor unchanged) and
    heartbeats until now, as the agent sends for a loop that stopped stepping."""
    j = JobEvents(job_id)
    j.submitted(t, model=model, gpus=8, labels={"owner": "ranking"})
    j.started(0, t + 1)
    w = t + 10
    for i in range(trained):
        j.progress(0, w, w + WINDOW_S, i * 30, (i + 1) * 30, steps=30)
        w += WINDOW_S
    cursor = trained * 30
    while w + WINDOW_S <= now:
        j.progress(0, w, w + WINDOW_S, cursor, cursor, steps=0)
        j.heartbeat(0, w + WINDOW_S)
        w += WINDOW_S
    return j


def crash_loop(job_id: str, model: str, t: float, attempts: int) -> JobEvents:
    """A0 trains to cursor 300 and fails; each later attempt restores to 240, replays to 270 and
    fails before passing 300; one attempt every 60 s."""
    j = JobEvents(job_id)
    j.submitted(t, model=model, gpus=8, labels={"owner": "ranking"})
    j.started(0, t)
    j.progress(0, t + 5, t + 35, 0, 300)
    j.failure(0, t + 35)
    for a in range(1, attempts):
        s = t + 60 * a
        j.started(a, s)
        j.phase(a, "checkpoint_restore", s + 1, s + 5)
        j.progress(a, s + 5, s + 35, 240, 270)
        j.failure(a, s + 35)
    return j
