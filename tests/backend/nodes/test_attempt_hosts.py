"""An attempt's hosts: sent in attempt_started (host, hosts) and heartbeat (host), stored per
attempt (attempt_hosts) with the attempt's failures and TTR GPU-seconds, and served in REST.
On SQLite and Postgres."""

from __future__ import annotations

import pytest
from sqlalchemy import select

from backend.jobs.models import Attempt, AttemptHost
from backend.results import recompute
from tests.backend.ett.builders import JobEvents

T0 = 1_780_000_000.0


def two_attempt_job() -> JobEvents:
    """Attempt 0 on n1, n2 (+ n3 by heartbeat) fails after 100 s; attempt 1000 on n4 finishes."""
    j = JobEvents("hosts-1")
    j.submitted(T0, model="ranker", gpus=16)
    j.started(0, T0 + 100, host="n1", hosts=["n1", "n2"], hosts_total=2)
    j.add("heartbeat", 0, ts=T0 + 101, host="n3")
    j.add("heartbeat", 0, ts=T0 + 102, host="n3")  # a host named twice counts once
    j.progress(0, T0 + 200, T0 + 300, 0, 10)
    j.failure(0, T0 + 300, kind="infra")
    j.started(1000, T0 + 400, hosts=["n4"])
    j.progress(1000, T0 + 500, T0 + 600, 10, 20)
    j.ended(1000, T0 + 700)
    j.job_ended(T0 + 700)
    return j


def test_hosts_are_stored_per_attempt_and_served(client, post, database) -> None:
    r = post(two_attempt_job().events)
    assert r.status_code == 200 and r.json().get("rejected", []) == [], r.text
    with database.session() as s:
        recompute.recompute_all(db_session=s, progress=False)
        rows = s.execute(
            select(
                AttemptHost.attempt,
                AttemptHost.host,
                AttemptHost.failures,
                AttemptHost.failure_kind,
                AttemptHost.ttr_gpu_s,
                AttemptHost.started_at,
                AttemptHost.ended_at,
            ).order_by(AttemptHost.attempt, AttemptHost.host)
        ).all()
        totals = dict(s.execute(select(Attempt.attempt, Attempt.hosts_total)).all())
    # The failure at +300 recovers when attempt 1000 trains at +500: 200 s x 16 GPUs.
    assert [tuple(x) for x in rows] == [
        (0, "n1", 1, "infra", pytest.approx(3200.0), T0 + 100, T0 + 300),
        (0, "n2", 1, "infra", pytest.approx(3200.0), T0 + 100, T0 + 300),
        (0, "n3", 1, "infra", pytest.approx(3200.0), T0 + 100, T0 + 300),
        (1000, "n4", 0, None, 0.0, T0 + 400, T0 + 700),
    ]
    assert totals == {0: 3, 1000: 1}
    doc = client.get("/api/v1/jobs/hosts-1/ett").json()
    assert [(a["attempt"], a["hosts"], a["hosts_total"]) for a in doc["attempts"]] == [
        (0, ["n1", "n2", "n3"], 3),
        (1000, ["n4"], 1),
    ]


def test_a_list_past_the_bound_is_refused_and_kept_as_rejected(client, post) -> None:
    j = JobEvents("hosts-2")
    j.submitted(T0, model="ranker", gpus=16)
    j.started(0, T0 + 1, hosts=[f"n{i}" for i in range(1025)])
    body = post(j.events).json()
    (rejected,) = body["rejected"]
    assert "hosts" in str(rejected) and "1024" in str(rejected), rejected


def test_the_engine_keeps_at_most_max_hosts_and_counts_them_all() -> None:
    from backend.ett.catalogue import MAX_HOSTS
    from backend.ett.engine import compute_job

    j = JobEvents("hosts-3")
    j.submitted(T0, model="ranker", gpus=16)
    j.started(0, T0 + 1, hosts=[f"a{i:04d}" for i in range(MAX_HOSTS)], hosts_total=MAX_HOSTS + 10)
    for i in range(5):  # more hosts name themselves than the bound holds
        j.add("heartbeat", 0, ts=T0 + 2 + i, host=f"z{i}")
    j.ended(0, T0 + 100)
    j.job_ended(T0 + 100)
    (attempt,) = compute_job(j.events, now=T0 + 200).attempts
    assert len(attempt.hosts) == MAX_HOSTS and attempt.hosts[-1] == f"a{MAX_HOSTS - 1:04d}"
    assert attempt.hosts_total == MAX_HOSTS + 10  # the sender's count, above the distinct seen
