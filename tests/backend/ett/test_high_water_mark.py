"""The cursor high-water mark only rises: replay after a restore stays replay until it is passed."""

from __future__ import annotations

from backend.ett.engine import compute_job

T = 1_000.0


def test_replay_spanning_several_windows_after_restore() -> None:
    # Attempt 0 reaches cursor 1000; attempt 1 restores at 500 and replays 500..1000 over three
    # windows, passing the mark 30 s into the third window (cursor 700 -> 1200 over 50 s).
    events = [
        dict(event_id="s", job_id="j", type="job_submitted", attempt=None, ts=T, model="m", gpus=1),
        dict(event_id="a0", job_id="j", type="attempt_started", attempt=0, ts=T),
        dict(
            event_id="p0",
            job_id="j",
            type="progress",
            attempt=0,
            start=T,
            end=T + 100,
            cursor_start=0,
            cursor_end=1000,
            steps=10,
        ),
        dict(event_id="f", job_id="j", type="failure", attempt=0, ts=T + 100, kind="app_error"),
        dict(event_id="a1", job_id="j", type="attempt_started", attempt=1, ts=T + 100),
        dict(
            event_id="p1",
            job_id="j",
            type="progress",
            attempt=1,
            start=T + 100,
            end=T + 150,
            cursor_start=500,
            cursor_end=600,
            steps=10,
        ),
        dict(
            event_id="p2",
            job_id="j",
            type="progress",
            attempt=1,
            start=T + 150,
            end=T + 200,
            cursor_start=600,
            cursor_end=700,
            steps=10,
        ),
        dict(
            event_id="p3",
            job_id="j",
            type="progress",
            attempt=1,
            start=T + 200,
            end=T + 250,
            cursor_start=700,
            cursor_end=1200,
            steps=10,
        ),
        dict(
            event_id="e", job_id="j", type="job_ended", attempt=None, ts=T + 250, status="succeeded"
        ),
    ]
    r = compute_job(events, now=T + 1_000).to_dict()
    assert r["components"]["effective_training"] == 120.0  # 100 (attempt 0) + 20 past the mark
    assert r["wasted"]["replay"] == 130.0  # 50 + 50 + 30
    # TTR runs from the failure to the next effective instant: 100 + 30 s.
    assert r["l1"]["ttr_s"] == [130.0]
