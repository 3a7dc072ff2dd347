"""The init critical path and Eq. 4 on hand-drawn attempts (times in seconds)."""

from __future__ import annotations

import pytest

from backend.advice.critical_path import (
    attempt_critical_path,
    fast_batch_what_if,
    intersection_length,
    union,
)


def test_sequential_warm_up_then_compile_saves_the_shorter() -> None:
    # Fig. 2a: PT2 waits for the DPP warm-up (240 s), then compiles for 600 s.
    out = fast_batch_what_if([("trainer_init.first_batch", 100, 340), ("pt2_compile", 340, 940)])
    assert out == {
        "dpp_s": 240,
        "pt2_s": 600,
        "overlap_s": 0,
        "saving_s": 240,
        "already_parallel": False,
    }


def test_compile_shorter_than_warm_up_caps_the_saving() -> None:
    out = fast_batch_what_if(
        [("trainer_init.first_batch", 0, 300), ("pt2_compile.autotune", 300, 400)]
    )
    assert out["saving_s"] == 100


def test_partial_and_full_overlap() -> None:
    partial = fast_batch_what_if([("trainer_init.first_batch", 0, 240), ("pt2_compile", 60, 660)])
    assert partial["overlap_s"] == 180 and partial["saving_s"] == 60
    full = fast_batch_what_if([("trainer_init.first_batch", 0, 240), ("pt2_compile", 0, 600)])
    assert full["saving_s"] == 0 and full["already_parallel"] is True


def test_attempt_path_and_hidden_work() -> None:
    intervals = [
        (0, 100, "hardware_setup", "hardware_setup"),
        (100, 340, "trainer_init", "trainer_init.first_batch"),
        (340, 940, "pt2_compile", "pt2_compile"),
        (940, 2000, "effective_training", None),
        (2000, 2010, "wasted_training", "checkpoint_blocking"),
    ]
    spans = [
        ("trainer_init.first_batch", 100, 340),
        ("trainer_init.train_module", 100, 200),  # hidden behind the warm-up
        ("pt2_compile", 340, 940),
        ("shutdown", 3000, 3100),  # after training: not init
    ]
    out = attempt_critical_path(intervals, spans)
    assert out["training_start"] == 940
    assert out["init_s"] == 940
    assert [(p["phase"], p["duration_s"]) for p in out["path"]] == [
        ("hardware_setup", 100),
        ("trainer_init.first_batch", 240),
        ("pt2_compile", 600),
    ]
    phases = {p["phase"]: p for p in out["phases"]}
    assert phases["trainer_init.train_module"] == {
        "phase": "trainer_init.train_module",
        "total_s": 100,
        "exposed_s": 0,
        "hidden_s": 100,
    }
    assert phases["pt2_compile"]["hidden_s"] == 0
    assert "shutdown" not in phases
    assert out["fast_batch"]["saving_s"] == 240


def test_interval_helpers() -> None:
    assert union([(5, 7), (0, 2), (1, 3), (7, 8)]) == [(0, 3), (5, 8)]
    assert intersection_length([(0, 3), (5, 8)], [(2, 6)]) == pytest.approx(2)
