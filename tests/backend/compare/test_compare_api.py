"""GET /api/v1/compare and /compare/pairs over ingested jobs (hand-computed, both databases).

pair_job: baseline c1 (init 1200 / 1200, shutdown 1800) has TTS 1800, recovery 2400,
shutdown 1800, lost 6000 s; optimized o1 (init 600 / 300, shutdown 300) has TTS 1200,
recovery 1500, shutdown 300, lost 3000 s. Both NoF = 1.
"""

from __future__ import annotations

import functools
from typing import Any

import pytest

from tests.backend.fleet.fleet_jobs import D0, DAY, pair_job

# Answers are rounded by unit (docs/API.md): pct 2 decimals, gpu_h and s 3.
_approx = functools.partial(pytest.approx, abs=5e-3)


@pytest.fixture
def pairs(post: Any) -> None:
    """Two models, each with a baseline and an optimized job."""
    jobs = [
        pair_job("c1", D0, init_s=1200, restart_init_s=1200, shutdown_s=1800, variant="baseline"),
        pair_job(
            "o1", D0 + DAY, init_s=600, restart_init_s=300, shutdown_s=300, variant="optimized"
        ),
        pair_job(
            "c2",
            D0,
            init_s=900,
            restart_init_s=900,
            shutdown_s=600,
            variant="baseline",
            model="m-d",
        ),
        pair_job(
            "o2",
            D0 + DAY,
            init_s=600,
            restart_init_s=600,
            shutdown_s=600,
            variant="optimized",
            model="m-d",
        ),
    ]
    for j in jobs:
        assert post(j.events).status_code == 200


def test_pair(client: Any, pairs: None) -> None:
    r = client.get("/api/v1/compare", params={"baseline": "c1", "optimized": "o1"})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["delta"] == _approx(
        {"tts_s": 600, "recovery_s": 900, "checkpoint_s": 0, "shutdown_s": 1500, "lost_s": 3000}
    )
    assert body["attribution"] == _approx(
        {"tts": 0.2, "recovery": 0.3, "checkpoint": 0.0, "shutdown": 0.5}
    )
    assert body["restart_multiplier"] == _approx(1.5)
    assert body["cascade"] == _approx(
        {
            "tts_bound_s": 1200,
            "tts_share": 0.4,
            "recovery_residual_s": 300,
            "recovery_residual_share": 0.1,
        }
    )
    assert body["nof"] == {"baseline": 1, "optimized": 1}
    assert body["warnings"] == []
    assert body["ett_pct"]["delta_pp"] == _approx(6600 / 9600 * 100 - 6600 / 12600 * 100)
    assert body["baseline"]["submitted_at"] == "2026-04-25T00:00:00.000Z"


def test_pair_warnings_and_errors(client: Any, pairs: None) -> None:
    body = client.get("/api/v1/compare", params={"baseline": "c1", "optimized": "o2"}).json()
    assert [w["code"] for w in body["warnings"]] == ["different_models"]
    r = client.get("/api/v1/compare", params={"baseline": "c1", "optimized": "nope"})
    assert r.status_code == 404 and "nope" in r.json()["detail"]
    assert client.get("/api/v1/compare", params={"baseline": "c1"}).status_code == 422


def test_pairs_by_label(client: Any, pairs: None) -> None:
    body = client.get("/api/v1/compare/pairs").json()
    assert [
        (p["model"], p["baseline"]["job_id"], p["optimized"]["job_id"]) for p in body["pairs"]
    ] == [("m-c", "c1", "o1"), ("m-d", "c2", "o2")]
    # m-d: TTS 1500 -> 1200 (300), recovery 2100 -> 1800 (300), no shutdown saving.
    total = body["total"]
    assert total["delta_min"] == _approx(
        {"tts_min": 15, "recovery_min": 20, "checkpoint_min": 0, "shutdown_min": 25, "lost_min": 60}
    )
    assert total["cascade"]["tts_bound_min"] == _approx((2 * 600 + 2 * 300) / 60)
    assert total["cascade"]["recovery_residual_min"] == _approx((300 + 0) / 60)
    assert total["restart_multiplier"] == {"min": _approx(1.0), "max": _approx(1.5)}
    assert body["unpaired"] == [] and body["warnings"] == []

    one = client.get("/api/v1/compare/pairs", params={"model": "m-d"}).json()
    assert one["total"]["pairs"] == 1
    csv_text = client.get("/api/v1/compare/pairs", params={"format": "csv"}).text
    assert csv_text.splitlines()[1].startswith("m-c,c1,o1,600")
    assert client.get("/api/v1/compare/pairs", params={"baseline_label": "x"}).status_code == 422
    assert client.get("/api/v1/compare/pairs", params={"model": "zz"}).status_code == 404
