"""GET /api/v1/fleet/nodes and /fleet/mttf over a small fleet through ingest and recompute,
with one lemon node (h03: every attempt on it fails), on SQLite and Postgres."""

from __future__ import annotations

import pytest

from backend.results import recompute
from tests.backend.ett.builders import JobEvents

DAY = 86400.0
H = 3600.0
T0 = 1_780_012_800.0  # 2026-05-29T00:00:00Z, a whole UTC day
HOSTS = [f"h{i:02d}" for i in range(12)]


def fleet() -> tuple[list[dict], dict[str, float]]:
    """36 one-day jobs, three per host; h03's all fail (infra), h05's first is preempted and
    h07's first fails (app_error). Returns the events and the effective hours per bucket."""
    events: list[dict] = []
    effective = {"1-8": 0.0, "33-128": 0.0}
    for n in range(36):
        host = HOSTS[n % 12]
        gpus = 8 if n % 12 < 6 else 64
        start = T0 + (n // 12) * DAY
        j = JobEvents(f"node-job-{n:02d}")
        j.submitted(start, model="ranker", gpus=gpus)
        j.started(0, start, hosts=[host])
        kind = {"h03": "infra", "h05": "preemption", "h07": "app_error"}.get(host)
        fails = kind is not None and (host == "h03" or n // 12 == 0)
        train_end = start + 20 * H if fails else start + 23 * H
        j.progress(0, start + H, train_end, 0, 100)
        effective["1-8" if gpus == 8 else "33-128"] += (train_end - start - H) / H
        if fails:
            cause = {"infra": "gpu_hardware", "preemption": "preemption"}.get(kind, "exception")
            j.add("failure", 0, ts=start + 20 * H, kind=kind, cause=cause)
            j.job_ended(start + 21 * H, status="failed")
        else:
            j.ended(0, start + DAY)
            j.job_ended(start + DAY)
        events += j.events
    return events, effective


def test_nodes_rank_the_lemon_and_mttf_by_size(client, post, database) -> None:
    events, effective = fleet()
    r = post(events)
    assert r.status_code == 200 and r.json().get("rejected", []) == [], r.text
    with database.session() as s:
        recompute.recompute_all(db_session=s, progress=False)
    q = {"start": "2026-05-29T00:00:00Z", "end": "2026-06-03T00:00:00Z"}
    r = client.get("/api/v1/fleet/nodes", params=q)
    assert r.status_code == 200, r.text
    doc = r.json()
    rows = {n["host"]: n for n in doc["nodes"]}
    assert set(rows) == set(HOSTS)
    lemon = doc["nodes"][0]
    assert lemon["host"] == "h03" and lemon["lemon"] is True
    assert [n["host"] for n in doc["nodes"] if n["lemon"]] == ["h03"]
    assert lemon["attempts"] == 3 and lemon["failures"] == 3 and lemon["unplanned_failures"] == 3
    assert lemon["failures_by_cause"] == {"gpu_hardware": 3}
    assert lemon["exposure_node_days"] == pytest.approx(3 * 20 / 24)
    assert lemon["failures_per_node_day"] == pytest.approx(3 / (3 * 20 / 24))
    # Each failure's TTR runs to the job's end an hour later: 1 h x 8 GPUs, three times.
    assert lemon["ttr_lost_gpu_h"] == pytest.approx(24.0)
    # The rest of the fleet: 1 unplanned failure (h07) in 35 x 20-24 h of exposure.
    rest_days = sum(n["exposure_node_days"] for h, n in rows.items() if h != "h03")
    assert lemon["expected_failures"] == pytest.approx(1 / rest_days * lemon["exposure_node_days"])
    assert rows["h05"]["failures"] == 1 and rows["h05"]["unplanned_failures"] == 0
    assert rows["h05"]["failures_by_cause"] == {"preemption": 1}
    assert rows["h07"]["failures_by_cause"] == {"exception": 1} and not rows["h07"]["lemon"]
    assert rows["h00"]["failures"] == 0 and rows["h00"]["exposure_node_days"] == pytest.approx(3)
    assert doc["fleet"]["lemons"] == 1 and doc["fleet"]["unplanned_failures"] == 4

    r = client.get("/api/v1/fleet/mttf", params=q)
    assert r.status_code == 200, r.text
    buckets = {b["gpus"]: b for b in r.json()["buckets"]}
    assert set(buckets) == {"1-8", "33-128"}
    # 8-GPU jobs: h03's three infra failures (h05's preemption is planned); 64: h07's one.
    assert buckets["1-8"]["unplanned_failures"] == 3 and buckets["1-8"]["jobs"] == 18
    assert buckets["1-8"]["mttf_h"] == pytest.approx(effective["1-8"] / 3)
    assert buckets["33-128"]["mttf_h"] == pytest.approx(effective["33-128"] / 1)


def test_a_range_that_is_not_whole_days_is_refused(client) -> None:
    r = client.get("/api/v1/fleet/nodes", params={"start": "2026-05-29T01:00:00Z"})
    assert r.status_code == 422 and "day" in r.text
