"""Property tests: identities to 1 ms, order and duplicate independence, nothing raises."""

from __future__ import annotations

import copy
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from backend.ett.engine import compute_job
from tests.backend.ett.builders import assert_consistent

NOW = 2_000.0
PHASES = [
    "hardware_setup",
    "trainer_init",
    "trainer_init.process_group",
    "trainer_init.first_batch",
    "checkpoint_restore",
    "pt2_compile",
    "pt2_compile.autotune",
    "shutdown",
    "publish",
    "custom.mapped",
    "custom.unmapped",
    "mystery",
]
CUSTOM = {"custom.mapped": "trainer_init"}

# Few distinct instants, so ties between boundaries are common.
times = st.one_of(
    st.integers(0, 60).map(lambda x: float(x * 10)),
    st.floats(0, 600, allow_nan=False, allow_infinity=False),
)
attempts = st.integers(0, 3)


@st.composite
def event(draw: st.DrawFn, eid: str) -> dict[str, Any]:
    """One event of any type, sometimes malformed (end before start, cursor backwards)."""
    etype = draw(
        st.sampled_from(
            [
                "attempt_started",
                "phase",
                "phase",
                "phase_started",
                "progress",
                "progress",
                "progress",
                "checkpoint",
                "heartbeat",
                "failure",
                "attempt_ended",
                "job_ended",
                "job_submitted",
            ]
        )
    )
    ev: dict[str, Any] = {"event_id": eid, "job_id": "j", "type": etype}
    if etype in ("job_submitted", "job_ended"):
        ev["ts"] = draw(times)
        if etype == "job_submitted":
            ev.update(model="m", gpus=draw(st.integers(1, 16)))
        else:
            ev["status"] = draw(st.sampled_from(["succeeded", "failed", "cancelled"]))
        return ev
    ev["attempt"] = draw(attempts)
    if etype in ("attempt_started", "heartbeat"):
        ev["ts"] = draw(times)
    elif etype == "phase":
        ev.update(phase=draw(st.sampled_from(PHASES)), start=draw(times), end=draw(times))
    elif etype == "phase_started":
        ev.update(phase=draw(st.sampled_from(PHASES)), start=draw(times))
    elif etype == "progress":
        start = draw(times)
        ev.update(
            start=start,
            end=start + draw(st.sampled_from([0.0, 5.0, 10.0, 37.5, -1.0])),
            cursor_start=float(draw(st.integers(0, 50))),
            cursor_end=float(draw(st.integers(0, 50))),
            steps=1,
        )
    elif etype == "checkpoint":
        start = draw(times)
        ev.update(start=start, blocking_end=start + draw(st.sampled_from([0.0, 3.0, 20.0])))
    elif etype == "failure":
        ev.update(
            ts=draw(times),
            kind=draw(st.sampled_from(["preemption", "app_error", "infra", "induced", "x"])),
        )
    elif etype == "attempt_ended":
        ev.update(
            ts=draw(times),
            reason=draw(st.sampled_from(["completed", "failure", "preempted", "cancelled"])),
        )
    return ev


@st.composite
def job(draw: st.DrawFn) -> list[dict[str, Any]]:
    """A job: usually submitted, a few attempts, random spans and windows."""
    n = draw(st.integers(0, 30))
    events = [draw(event(f"e{i}")) for i in range(n)]
    if draw(st.integers(0, 9)) > 0:
        events.append({"event_id": "sub", "job_id": "j", "type": "job_submitted", "ts": 0.0})
    return events


COMMON = settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@COMMON
@given(job(), st.sampled_from([30.0, 300.0]))
def test_identities_hold_and_nothing_raises(events: list[dict[str, Any]], timeout: float):
    r = compute_job(events, now=NOW, heartbeat_timeout_s=timeout, custom_phases=CUSTOM)
    assert_consistent(r)
    for name, pt in r.phases.items():
        assert pt.exposed_s <= pt.total_s + 1e-6, name
    assert 0.0 <= r.ett_pct <= 100.0 + 1e-9
    r.to_dict()


@COMMON
@given(job(), st.data())
def test_permutation_and_duplication_change_nothing(events: list[dict[str, Any]], data: Any):
    base = compute_job(events, now=NOW, custom_phases=CUSTOM).to_dict()
    shuffled = data.draw(st.permutations(events))
    dups = data.draw(st.lists(st.sampled_from(events), max_size=10)) if events else []
    again = compute_job(
        list(shuffled) + [copy.deepcopy(d) for d in dups], now=NOW, custom_phases=CUSTOM
    ).to_dict()
    assert again == base


@st.composite
def progress_only_job(draw: st.DrawFn) -> tuple[list[dict[str, Any]], float, float]:
    """Back-to-back or gapped windows whose cursor never starts above the mark reached so far."""
    events: list[dict[str, Any]] = [
        {"event_id": "sub", "job_id": "j", "type": "job_submitted", "ts": 0.0},
        {"event_id": "a0", "job_id": "j", "type": "attempt_started", "attempt": 0, "ts": 0.0},
    ]
    t = 0.0
    mark: float | None = None
    first = 0.0
    for i in range(draw(st.integers(1, 12))):
        t += draw(st.sampled_from([0.0, 0.0, 5.0]))
        dur = draw(st.sampled_from([1.0, 4.0, 10.0]))
        top = mark if mark is not None else float(draw(st.integers(0, 20)))
        cs = float(draw(st.integers(0, int(top))))
        ce = cs + float(draw(st.integers(0, 30)))
        if mark is None:
            first = cs
        events.append(
            {
                "event_id": f"p{i}",
                "job_id": "j",
                "type": "progress",
                "attempt": 0,
                "start": t,
                "end": t + dur,
                "cursor_start": cs,
                "cursor_end": ce,
                "steps": 1,
            }
        )
        mark = ce if mark is None else max(mark, ce)
        t += dur
    events.append({"event_id": "end", "job_id": "j", "type": "job_ended", "ts": t})
    assert mark is not None
    return events, first, mark


@COMMON
@given(progress_only_job())
def test_effective_time_consumes_each_cursor_value_once(case: tuple[list[dict], float, float]):
    """The cursor advance over effective instants is exactly the new data: mark - first cursor."""
    events, first, mark = case
    r = compute_job(events, now=NOW)
    windows = [e for e in events if e["type"] == "progress"]
    advance = 0.0
    for iv in r.intervals:
        if iv.component != "effective_training":
            continue
        for w in windows:
            lo, hi = max(iv.start, w["start"]), min(iv.end, w["end"])
            if hi > lo:
                rate = (w["cursor_end"] - w["cursor_start"]) / (w["end"] - w["start"])
                advance += rate * (hi - lo)
    assert abs(advance - (mark - first)) <= 1e-6
    in_loop = sum(w["end"] - w["start"] for w in windows)
    spent = r.effective_s + r.wasted["replay"] + r.wasted["stalled"]
    assert abs(spent - in_loop) <= 1e-6


json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(10**400), max_value=10**400)
    | st.floats()
    | st.text(max_size=5),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner, max_size=3)
    ),
    max_leaves=5,
)
FIELDS = [
    "ts", "start", "end", "blocking_end", "attempt", "phase", "cursor_start", "cursor_end",
    "kind", "reason", "status", "gpus", "labels", "config", "model", "host", "job_id", "type",
]  # fmt: skip


@st.composite
def fuzzed_event(draw: st.DrawFn, eid: str) -> dict[str, Any]:
    """A well-formed event with some fields replaced by arbitrary JSON values."""
    ev = draw(event(eid))
    for name in draw(st.lists(st.sampled_from(FIELDS), max_size=3)):
        ev[name] = draw(json_values)
    return ev


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(0, 15).flatmap(lambda n: st.tuples(*[fuzzed_event(f"e{i}") for i in range(n)])))
def test_arbitrary_field_values_never_raise(events: tuple[dict[str, Any], ...]):
    r = compute_job(list(events), now=NOW, custom_phases=CUSTOM)
    assert_consistent(r)
    r.to_dict()


# -- revision 2: jobs as real trainers send them -----------------------------------------------


@st.composite
def field_job(draw: st.DrawFn) -> tuple[list[dict[str, Any]], float]:
    """A realistic job with the field's trouble: skewed failures, zombie windows after the next
    attempt's start, resent and overlapping windows, conflicting duplicates, hung or abandoned
    ends. Returns (events, now)."""
    n = 0

    def ev(etype: str, **fields: Any) -> dict[str, Any]:
        nonlocal n
        n += 1
        return {"event_id": f"e{n:03d}", "job_id": "j", "type": etype, **fields}

    events = [ev("job_submitted", ts=0.0, model="m", gpus=8)]
    t = 0.0
    cursor = 0.0
    n_attempts = draw(st.integers(1, 4))
    for attempt in range(n_attempts):
        t += draw(st.sampled_from([0.0, 5.0, 30.0]))
        events.append(ev("attempt_started", attempt=attempt, ts=t))
        t += draw(st.sampled_from([0.0, 3.0]))
        if draw(st.booleans()):
            events.append(ev("phase_started", attempt=attempt, phase="trainer_init", start=t))
        if draw(st.booleans()):
            d = float(draw(st.integers(1, 20)))
            events.append(ev("phase", attempt=attempt, phase="trainer_init", start=t, end=t + d))
            t += d
        if attempt:
            cursor = max(0.0, cursor - draw(st.integers(0, 50)))
        for _ in range(draw(st.integers(0, 5))):
            dur = float(draw(st.integers(1, 30)))
            adv = float(draw(st.sampled_from([0, 10, 30])))
            events.append(
                ev("progress", attempt=attempt, start=t, end=t + dur,
                   cursor_start=cursor, cursor_end=cursor + adv, steps=1)
            )  # fmt: skip
            if draw(st.integers(0, 5)) == 0:  # resent or a second rank 0, overlapping
                off = float(draw(st.integers(0, int(dur))))
                events.append(
                    ev("progress", attempt=attempt, start=t + off, end=t + dur + off,
                       cursor_start=cursor + draw(st.sampled_from([0.0, 5.0, 100.0])),
                       cursor_end=cursor + adv + 5.0, steps=1)
                )  # fmt: skip
            if draw(st.integers(0, 4)) == 0:
                events.append(
                    ev("checkpoint", attempt=attempt, start=t + dur, blocking_end=t + dur + 3)
                )
                dur += 3
            t += dur
            cursor += adv
        last = attempt == n_attempts - 1
        ending = draw(st.sampled_from(["failure", "skewed", "ended", "silent", "hang"]))
        if ending in ("failure", "skewed"):
            skew = float(draw(st.integers(1, 5))) if ending == "skewed" else 0.0
            events.append(ev("failure", attempt=attempt, ts=t - skew, kind="app_error"))
        elif ending == "ended":
            reason = draw(st.sampled_from(["completed", "failure", "preempted"]))
            events.append(ev("attempt_ended", attempt=attempt, ts=t, reason=reason))
        elif ending == "hang":
            for k in range(draw(st.integers(1, 4))):
                events.append(ev("heartbeat", attempt=attempt, ts=t + 10.0 * (k + 1)))
        if not last and draw(st.integers(0, 3)) == 0:  # a leftover process keeps reporting
            events.append(
                ev("progress", attempt=attempt, start=t + 10, end=t + 60,
                   cursor_start=cursor, cursor_end=cursor + 20, steps=1)
            )  # fmt: skip
    close = draw(st.sampled_from(["succeeded", "failed", "open", "abandoned"]))
    t += draw(st.sampled_from([0.0, 7.0]))
    now = t + 100.0
    if close in ("succeeded", "failed"):
        events.append(ev("job_ended", ts=t + 50, status=close))
    elif close == "abandoned":
        now = t + 10_000.0
    # a few conflicting copies of existing ids (other content)
    for _ in range(draw(st.integers(0, 2))):
        victim = draw(st.sampled_from(events))
        copy_ = dict(victim)
        copy_["attempt"] = 7 if victim.get("attempt") is not None else None
        events.append(copy_)
    return events, now


@COMMON
@given(field_job(), st.data())
def test_field_jobs_keep_the_identities_in_any_order(case: tuple[list[dict], float], data: Any):
    events, now = case
    base = compute_job(events, now=now)
    assert_consistent(base)
    if any(e["type"] == "job_submitted" for e in events) and now > 9_000:
        assert base.abandoned or not base.provisional
    # Level-1 windows never overlap, and no instant after an attempt's failure is effective
    for f in base.l1.failures:
        for iv in base.intervals:
            if iv.component == "effective_training" and iv.attempt == f.attempt:
                assert iv.end <= f.ts + 1e-9, (f, iv)
    shuffled = data.draw(st.permutations(events))
    dups = data.draw(st.lists(st.sampled_from(events), max_size=5))
    again = compute_job(list(shuffled) + [copy.deepcopy(d) for d in dups], now=now)
    assert again.to_dict() == base.to_dict()


@COMMON
@given(progress_only_job())
def test_overlap_sweep_agrees_with_the_fast_path_on_disjoint_windows(case: tuple):
    from backend.ett.partition import overlapping_progress_layer, progress_layer
    from backend.ett.timeline import WarningLog, build_timeline

    events, _first, _mark = case
    tl = build_timeline(events, now=NOW)
    fast = progress_layer(tl.windows, WarningLog())
    slow = overlapping_progress_layer(tl.windows, WarningLog())
    assert len(fast) == len(slow)
    for p, q in zip(fast, slow, strict=True):
        assert p[2:] == q[2:] and abs(p[0] - q[0]) < 1e-6 and abs(p[1] - q[1]) < 1e-6
