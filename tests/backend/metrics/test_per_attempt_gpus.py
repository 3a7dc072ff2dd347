"""Partial capacity: each second is charged at its attempt's GPUs (the job's outside attempts).

One hand-worked job of 64 GPUs whose second attempt ran on 48 (seconds from submission T):

    0-100      scheduling, queued        at the job's 64   6,400 GPU-s
    100-1100   A0 effective (64 GPUs)    at 64            64,000
    1100-1300  scheduling, requeued      at the job's 64  12,800
    1300-1400  A1 trainer_init (48 GPUs) at 48             4,800
    1400-2400  A1 effective              at 48            48,000

E2E 2,400 s, effective 2,000 s (ETT% 83.33, by time). GPU-time: wall 136,000 GPU-s (37.78 GPU-h),
effective 112,000 (31.11), lost 24,000 (6.667 GPU-h: 5.333 scheduling, 1.333 trainer init).
Fleet ETT% 112,000 / 136,000 = 82.35%. Charged at 64 throughout, as before, it would be
153,600 GPU-s wall, 25,600 lost (7.111 GPU-h), 83.33%.
"""

from __future__ import annotations

from typing import Any

import pytest

from backend.fleet.days import DAY_S, day_start
from tests.backend.exporter.test_metrics_endpoint import scrape, total
from tests.conftest import post_events

T = day_start(1_777_000_000.0) + 3600.0  # 01:00 UTC: the job stays inside one day
H = 3600.0


def near(x: float, abs: float = 0.001) -> Any:
    """REST rounds its numbers (GPU-hours to 0.001, percentages to 0.01)."""
    return pytest.approx(x, abs=abs)


def pct(x: float) -> Any:
    """A percentage as REST rounds it."""
    return pytest.approx(x, abs=0.006)


def job(job_id: str, second_gpus: int, model: str = "partial") -> list[dict[str, Any]]:
    def ev(i: int, etype: str, **fields: Any) -> dict[str, Any]:
        return {"event_id": f"{job_id}-{i}", "job_id": job_id, "type": etype, **fields}

    return [
        ev(0, "job_submitted", ts=T, model=model, gpus=64, labels={"owner": "ranking"}),
        ev(1, "attempt_started", attempt=0, ts=T + 100, gpus=64),
        ev(
            2,
            "progress",
            attempt=0,
            start=T + 100,
            end=T + 1100,
            cursor_start=0.0,
            cursor_end=1000.0,
            steps=1000,
        ),
        ev(3, "failure", attempt=0, ts=T + 1100, kind="infra"),
        ev(4, "attempt_started", attempt=1, ts=T + 1300, gpus=second_gpus),
        ev(5, "phase", attempt=1, phase="trainer_init", start=T + 1300, end=T + 1400),
        ev(
            6,
            "progress",
            attempt=1,
            start=T + 1400,
            end=T + 2400,
            cursor_start=1000.0,
            cursor_end=2000.0,
            steps=1000,
        ),
        ev(7, "attempt_ended", attempt=1, ts=T + 2400, reason="completed"),
        ev(8, "job_ended", ts=T + 2400, status="succeeded"),
    ]


def test_an_attempt_on_48_of_64_gpus_is_charged_48_everywhere(
    client: Any, ingest_token: str
) -> None:
    answer = post_events(client, ingest_token, job("p-48", 48)).json()
    assert answer["accepted"] == 9 and answer["rejected"] == []
    window = {"start": T - H, "end": T - H + DAY_S}  # that UTC day

    got = client.get("/api/v1/jobs/p-48/ett").json()
    assert got["ett_pct"] == pct(2000 / 24)  # ETT% of one job is by time
    assert got["e2e_gpu_s"] == near(136_000.0)
    assert got["effective_gpu_s"] == near(112_000.0)
    assert got["gpu_hours_lost"] == near(24_000 / H)  # 6.667, not 7.111
    assert [(i["component"], i["gpus"]) for i in got["intervals"]] == [
        ("scheduling", 64),
        ("effective_training", 64),
        ("scheduling", 64),  # queued between attempts: the job's requested count
        ("trainer_init", 48),
        ("effective_training", 48),
    ]
    listed = client.get("/api/v1/jobs", params={"q": "p-48"}).json()["jobs"]
    assert listed[0]["gpu_hours_lost"] == near(24_000 / H)

    fleet = client.get("/api/v1/fleet/ett", params=window).json()["total"]
    assert fleet["wall_gpu_h"] == near(136_000 / H)
    assert fleet["effective_gpu_h"] == near(112_000 / H)
    assert fleet["ett_pct"] == pct(100 * 112 / 136)  # 82.35, not 83.33
    lost = client.get("/api/v1/fleet/lost", params={**window, "by": "component"}).json()
    by = {r["component"]: r["gpu_h"] for r in lost["rows"]}
    assert by == {
        "scheduling": near(19_200 / H),
        "trainer_init": near(4_800 / H),
    }

    model = client.get("/api/v1/models/partial", params=window).json()
    assert model["ett_pct"] == pct(100 * 112 / 136)
    assert model["lost_gpu_h"] == near(24_000 / H)
    assert model["components_gpu_h"]["effective_training"] == near(112_000 / H)

    found = scrape(client)
    assert total(found, "ett_gpu_seconds_total", model="partial") == near(136_000.0)
    assert total(found, "ett_gpu_seconds_total", model="partial", component="trainer_init") == near(
        4_800.0
    )

    plan = client.get(
        "/api/v1/plan/models/partial",
        params={"submitted_after": T - H, "submitted_before": T + H},
    ).json()
    # The fit: effective training ran on 56 GPUs on average (1,000 s at 64, 1,000 at 48), one
    # failure per 31.11 effective GPU-hours, and the GPU-weighted measured ETT% above.
    assert plan["inputs"]["gpus"] == 56
    assert plan["inputs"]["failure_rate_per_gpu_h"]["infra"] == pytest.approx(
        H / 112_000, rel=1e-3
    )  # not 1 / 35.56 GPU-h at 64
    assert plan["prediction"]["measured_ett_pct"] == pct(100 * 112 / 136)


def test_the_comparison_charges_each_attempt_its_gpus(client: Any, ingest_token: str) -> None:
    post_events(client, ingest_token, job("cmp-48", 48))
    post_events(client, ingest_token, job("cmp-64", 64))
    got = client.get("/api/v1/compare", params={"baseline": "cmp-64", "optimized": "cmp-48"}).json()
    assert got["baseline"]["lost_gpu_h"] == near(25_600 / H)
    assert got["optimized"]["lost_gpu_h"] == near(24_000 / H)
    assert got["lost_gpu_h"] == {
        "baseline": near(25_600 / H),
        "optimized": near(24_000 / H),
        "delta": near(1_600 / H),
    }
    assert got["baseline"]["attempt_gpus"] == [64] and got["optimized"]["attempt_gpus"] == [48, 64]
    assert got["delta"]["lost_s"] == 0.0  # the same seconds: only the GPU-hours differ
    assert [w["code"] for w in got["warnings"]] == ["capacity_mismatch"]


def test_the_job_page_says_what_its_attempts_ran_on(client: Any, ingest_token: str) -> None:
    from dashboard.pages import job as job_page

    post_events(client, ingest_token, job("page-48", 48))
    post_events(client, ingest_token, job("page-64", 64))
    partial = client.get("/api/v1/jobs/page-48/ett").json()
    assert job_page.gpus_text(partial) == "64 GPUs requested, attempts on 48, 64"
    assert job_page.gpus_text(client.get("/api/v1/jobs/page-64/ett").json()) == "64 GPUs"
