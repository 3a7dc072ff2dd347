"""Paired-comparison arithmetic with hand-computed numbers (paper sections V-B, V-C)."""

from __future__ import annotations

import pytest

from backend.compare.cascade import (
    cascade,
    compare_pair,
    compare_set,
    lost_parts,
    pair_warnings,
    restart_multiplier,
)


def job(tts: float, rec: float, ckpt: float, shut: float, nof: int = 2, **kw: object) -> dict:
    """A job summary in minutes turned into seconds."""
    parts = {
        "tts_s": tts * 60,
        "recovery_s": rec * 60,
        "checkpoint_s": ckpt * 60,
        "shutdown_s": shut * 60,
        "lost_s": (tts + rec + ckpt + shut) * 60,
    }
    return {"nof": nof, "model": "m", "gpus": 8, "job_id": kw.get("job_id", "j"), **parts, **kw}


def test_single_pair() -> None:
    # B: TTS 30, recovery 120 (2 x 60), checkpoint 20, shutdown 30 min; O: 20, 60, 10, 5.
    out = compare_pair(job(30, 120, 20, 30), job(20, 60, 10, 5))
    assert out["delta"] == {
        "tts_s": 600,
        "recovery_s": 3600,
        "checkpoint_s": 600,
        "shutdown_s": 1500,
        "lost_s": 6300,
    }
    assert out["attribution"] == pytest.approx(
        {"tts": 10 / 105, "recovery": 60 / 105, "checkpoint": 10 / 105, "shutdown": 25 / 105}
    )
    assert sum(out["attribution"].values()) == pytest.approx(1.0)
    assert out["restart_multiplier"] == pytest.approx((60 / 2) / 10)  # 3.0
    assert out["cascade"] == pytest.approx(
        {
            "tts_bound_s": 3 * 600,
            "tts_share": 30 / 105,
            "recovery_residual_s": 3600 - 2 * 600,
            "recovery_residual_share": 40 / 105,
        }
    )
    assert out["nof"] == {"baseline": 2, "optimized": 2}
    assert out["warnings"] == []


def test_set_sums_in_minutes() -> None:
    a = compare_pair(job(30, 120, 20, 30), job(20, 60, 10, 5))
    b = compare_pair(job(10, 40, 0, 0, nof=1), job(5, 10, 0, 0, nof=1))
    total = compare_set([a, b])
    assert total["delta_min"] == pytest.approx(
        {
            "tts_min": 15,
            "recovery_min": 90,
            "checkpoint_min": 10,
            "shutdown_min": 25,
            "lost_min": 140,
        }
    )
    # cascade: (1+2)*10 + (1+1)*5 = 40 min bound; residual (60-20) + (30-5) = 65 min
    assert total["cascade"]["tts_bound_min"] == pytest.approx(40)
    assert total["cascade"]["tts_share"] == pytest.approx(40 / 140)
    assert total["cascade"]["recovery_residual_min"] == pytest.approx(65)
    assert total["cascade"]["recovery_residual_share"] == pytest.approx(65 / 140)
    assert total["attribution"]["recovery"] == pytest.approx(90 / 140)
    assert total["restart_multiplier"] == {"min": pytest.approx(3.0), "max": pytest.approx(6.0)}
    assert total["nof"] == {"baseline": 3, "optimized": 3}


def test_degenerate_cases() -> None:
    assert restart_multiplier(600, 1200, 0) is None
    assert restart_multiplier(0, 1200, 2) is None
    assert cascade(0, 0, 2, 0) == {
        "tts_bound_s": 0,
        "tts_share": None,
        "recovery_residual_s": 0,
        "recovery_residual_share": None,
    }
    assert lost_parts(
        {
            "e2e_s": 100,
            "effective_s": 60,
            "l1": {"tts_s": 10, "recovery_s": 20, "in_loop_waste_s": 5, "final_shutdown_s": 5},
        }
    ) == {"tts_s": 10, "recovery_s": 20, "checkpoint_s": 5, "shutdown_s": 5, "lost_s": 40}


def test_warnings() -> None:
    codes = [
        w["code"]
        for w in pair_warnings(
            {"nof": 2, "model": "a", "gpus": 8, "checkpoint_interval_s": 1800},
            {
                "nof": 3,
                "model": "b",
                "gpus": 16,
                "checkpoint_interval_s": 3600,
                "provisional": True,
                "job_id": "o",
            },
        )
    ]
    assert codes == [
        "nof_mismatch",
        "different_models",
        "gpus_mismatch",
        "checkpoint_interval_mismatch",
        "open_job",
    ]
    # With unequal NoF only the restarts both paid (the smaller NoF) carry the TTS saving.
    out = compare_pair(job(30, 120, 0, 0, nof=2), job(20, 90, 0, 0, nof=3))
    assert out["cascade"]["tts_bound_s"] == 3 * 600
