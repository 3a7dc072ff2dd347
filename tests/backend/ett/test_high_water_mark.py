"""The cursor high-water mark only rises: replay after a restore stays replay until it is passed."""

from __future__ import annotations

from backend.ett.engine import compute_job
from tests.backend.ett.builders import JobEvents

T = 1_000.0


def test_replay_spanning_several_windows_after_restore() -> None:
    # Attempt 0 reaches cursor 1000; attempt 1 restores at 500 and replays 500..1000 over three
    # windows, passing the mark 30 s into the third window (cursor 700 -> 1200 over 50 s).
    j = JobEvents("j")
    j.submitted(T, gpus=1)
    j.started(0, T)
    j.progress(0, T, T + 100, 0, 1000, steps=10)
    j.failure(0, T + 100, kind="app_error")
    j.started(1, T + 100)
    j.progress(1, T + 100, T + 150, 500, 600, steps=10)
    j.progress(1, T + 150, T + 200, 600, 700, steps=10)
    j.progress(1, T + 200, T + 250, 700, 1200, steps=10)
    j.job_ended(T + 250)
    r = compute_job(j.events, now=T + 1_000).to_dict()
    assert r["components"]["effective_training"] == 120.0  # 100 (attempt 0) + 20 past the mark
    assert r["wasted"]["replay"] == 130.0  # 50 + 50 + 30
    # TTR runs from the failure to the next effective instant: 100 + 30 s.
    assert r["l1"]["ttr_s"] == [130.0]
