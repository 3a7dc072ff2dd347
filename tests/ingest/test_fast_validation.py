"""The hot-path validator accepts only what the full (pydantic) path accepts, with the same result."""

from __future__ import annotations

import math
from unittest import mock

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ingest.schema import MAX_INT, EventError, _fast_event, _full_event, validate_event

T = 1_777_000_000.0
WINDOWS = [None, (T - 10.0, T + 10.0)]
BASES = {
    "progress": {
        "start": T,
        "end": T + 5,
        "cursor_start": 0,
        "cursor_end": 10.5,
        "steps": 3,
    },
    "heartbeat": {"ts": T, "host": "node-1"},
    "phase": {"phase": "trainer_init.process_group", "start": T, "end": T + 1, "span_id": "s"},
    "phase_started": {"phase": "custom.warmup", "start": T},
    "checkpoint": {
        "start": T,
        "blocking_end": T + 1,
        "committed": T + 2,
        "cursor": 7,
        "bytes": 10,
        "ok": False,
    },
}
ODD_VALUES = [
    None,
    True,
    False,
    0,
    -1,
    1,
    1_000_000,
    1_000_001,
    MAX_INT,
    MAX_INT + 1,
    2**64,
    -0.0,
    0.5,
    T,
    T + 11,
    float(T // 1),
    math.inf,
    -math.inf,
    math.nan,
    1e308,
    "",
    "x",
    "x" * 64,
    "x" * 65,
    "x" * 128,
    "x" * 129,
    "x" * 257,
    "é",
    "a\x00b",
    "\ud800",
    "2026-05-01T12:00:00Z",
    "2026-05-01T12:00:00",
    "trainer_init",
    "trainer_init.",
    "Trainer_init",
    "custom",
    "custom.x",
    "meteor.x",
    "data_loading.x.y_2",
    "trainer_init.x\n",
    [],
    {},
    ["x"],
]


def _outcome(fn, *args):
    try:
        return ("ok", fn(*args))
    except EventError as err:
        return ("error", str(err))


def _same(fast: dict, full: dict) -> bool:
    """Equal keys in the same order, equal values of the same types."""
    return list(fast) == list(full) and all(
        type(fast[k]) is type(full[k]) and fast[k] == full[k] for k in full
    )


@pytest.mark.parametrize("etype", sorted(BASES))
def test_plain_events_take_the_fast_path_with_the_full_paths_result(etype) -> None:
    raw = {"event_id": "e1", "job_id": "j1", "attempt": 2, "type": etype, **BASES[etype]}
    fast = _fast_event(raw, 946_684_800.0, 4_102_444_800.0)
    assert fast is not None
    assert _same(fast, _full_event(raw, None))


def _check(raw: dict, window: tuple[float, float] | None) -> None:
    lo, hi = window or (946_684_800.0, 4_102_444_800.0)
    full = _outcome(_full_event, raw, window)
    fast = _fast_event(raw, lo, hi)
    if fast is not None:
        assert full[0] == "ok", (raw, full)
        assert _same(fast, full[1]), (fast, full[1])
    # validate_event answers as it does with the fast path off, errors word for word.
    got = _outcome(lambda: validate_event(raw, time_window=window))
    with mock.patch("ingest.schema._fast_event", return_value=None):
        reference = _outcome(lambda: validate_event(raw, time_window=window))
    assert got[0] == reference[0], (raw, got, reference)
    if got[0] == "error":
        assert got == reference
    else:
        assert _same(got[1], reference[1])


@pytest.mark.parametrize("etype", sorted(BASES))
def test_every_field_at_every_odd_value(etype) -> None:
    base = {"event_id": "e1", "job_id": "j1", "attempt": 0, "type": etype, **BASES[etype]}
    for key in [*base, "surprise"]:
        for value in ODD_VALUES:
            for window in WINDOWS:
                _check({**base, key: value}, window)
        if key != "type":
            _check({k: v for k, v in base.items() if k != key}, None)


@st.composite
def _mutated(draw) -> tuple[dict, tuple[float, float] | None]:
    etype = draw(st.sampled_from(sorted(BASES)))
    raw = {"event_id": "e1", "job_id": "j1", "attempt": 0, "type": etype, **BASES[etype]}
    for _ in range(draw(st.integers(0, 3))):
        action = draw(st.sampled_from(["set", "drop", "add"]))
        key = draw(st.sampled_from(sorted(raw)))
        if action == "set":
            raw[key] = draw(st.sampled_from(ODD_VALUES) | st.floats() | st.integers() | st.text())
        elif action == "drop":
            raw.pop(key)
        else:
            raw[draw(st.sampled_from(["surprise", "ok", "host", "span_id", "Type", ""]))] = 1
    return raw, draw(st.sampled_from(WINDOWS))


@settings(max_examples=1_000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_mutated())
def test_the_fast_path_never_accepts_what_the_full_path_refuses(case) -> None:
    _check(*case)
