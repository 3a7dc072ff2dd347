"""A small builder for one job's normalized events (times in seconds, or minutes via M)."""

from __future__ import annotations

from typing import Any

M = 60.0  # one minute, in seconds


class JobEvents:
    """Collects wire-form events for one job with sequential event ids."""

    def __init__(self, job_id: str = "job-1") -> None:
        self.job_id = job_id
        self.events: list[dict[str, Any]] = []

    def add(self, etype: str, attempt: int | None = None, **fields: Any) -> str:
        """Append one event and return its event_id."""
        eid = f"{self.job_id}-{len(self.events):05d}"
        ev: dict[str, Any] = {"event_id": eid, "job_id": self.job_id, "type": etype}
        if attempt is not None:
            ev["attempt"] = attempt
        ev.update(fields)
        self.events.append(ev)
        return eid

    def submitted(self, ts: float, *, model: str = "m", gpus: int = 8, **kw: Any) -> str:
        """job_submitted."""
        return self.add("job_submitted", ts=ts, model=model, gpus=gpus, **kw)

    def started(self, attempt: int, ts: float, **kw: Any) -> str:
        """attempt_started."""
        return self.add("attempt_started", attempt, ts=ts, **kw)

    def phase(self, attempt: int, name: str, start: float, end: float, **kw: Any) -> str:
        """A completed phase span."""
        return self.add("phase", attempt, phase=name, start=start, end=end, **kw)

    def phase_started(self, attempt: int, name: str, start: float, **kw: Any) -> str:
        """An open phase span."""
        return self.add("phase_started", attempt, phase=name, start=start, **kw)

    def progress(
        self, attempt: int, start: float, end: float, c0: float, c1: float, steps: int = 1
    ) -> str:
        """One training-loop window."""
        return self.add(
            "progress",
            attempt,
            start=start,
            end=end,
            cursor_start=c0,
            cursor_end=c1,
            steps=steps,
        )

    def checkpoint(self, attempt: int, start: float, blocking_end: float, **kw: Any) -> str:
        """A checkpoint save; training blocked from start to blocking_end."""
        return self.add("checkpoint", attempt, start=start, blocking_end=blocking_end, **kw)

    def failure(self, attempt: int, ts: float, kind: str = "app_error") -> str:
        """An explicit failure."""
        return self.add("failure", attempt, ts=ts, kind=kind)

    def heartbeat(self, attempt: int, ts: float) -> str:
        """A heartbeat."""
        return self.add("heartbeat", attempt, ts=ts)

    def ended(self, attempt: int, ts: float, reason: str = "completed") -> str:
        """attempt_ended."""
        return self.add("attempt_ended", attempt, ts=ts, reason=reason)

    def job_ended(self, ts: float, status: str = "succeeded") -> str:
        """job_ended."""
        return self.add("job_ended", ts=ts, status=status)


def assert_consistent(result: Any, tol: float = 1e-3) -> None:
    """Both identities of SPEC section 4 to 1 ms, and intervals tiling [submission, end]."""
    l1 = result.l1
    comps = sum(result.components.values())
    assert abs(comps - result.e2e_s) <= tol, (comps, result.e2e_s)
    level1 = (
        result.effective_s
        + l1.tts_s
        + sum(f.ttr_s for f in l1.failures)
        + l1.in_loop_waste_s
        + l1.final_shutdown_s
    )
    assert abs(level1 - result.e2e_s) <= tol, (level1, result.e2e_s, l1)
    ivs = result.intervals
    if result.e2e_s > 0:
        assert ivs[0].start == result.submitted_at
        assert ivs[-1].end == result.ended_at
    for a, b in zip(ivs, ivs[1:], strict=False):
        assert a.end == b.start
        assert (a.attempt, a.component, a.phase) != (b.attempt, b.component, b.phase)
    for iv in ivs:
        assert iv.end > iv.start
    assert all(f.ttr_s >= 0 for f in l1.failures)
    assert l1.tts_s >= 0 and l1.in_loop_waste_s >= -tol and l1.final_shutdown_s >= -tol
    # TTS and TTR windows never overlap and hold no effective instant
    windows = [(result.submitted_at, result.submitted_at + l1.tts_s)]
    windows += [(f.ts, f.recovered_at) for f in l1.failures]
    for (_, e1), (s2, _) in zip(windows, windows[1:], strict=False):
        assert e1 <= s2 + 1e-9
    effective = [(i.start, i.end) for i in ivs if i.component == "effective_training"]
    for ws, we in windows:
        if we <= ws:
            continue
        for es, ee in effective:
            assert ee <= ws or es >= we, ((ws, we), (es, ee))
