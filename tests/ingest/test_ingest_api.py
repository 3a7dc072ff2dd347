"""POST /api/v1/events against SPEC section 3, on SQLite and Postgres."""

from __future__ import annotations

import json
import threading
from typing import Any

import pytest
from sqlalchemy import func, select

from backend.events.models import RawEvent, RejectedEvent
from backend.jobs.models import Job, Model
from tests.conftest import post_events

T0 = 1_777_000_000.0


def ev(event_id: str, type_: str, job_id: str = "job-1", **fields: Any) -> dict[str, Any]:
    """One wire event."""
    return {"event_id": event_id, "job_id": job_id, "type": type_, **fields}


VALID = {
    "job_submitted": dict(ts=T0, model="m-a", gpus=8, labels={"owner": "ranking"}),
    "attempt_started": dict(attempt=0, ts=T0 + 1, gpus=8, host="h1"),
    "phase": dict(attempt=0, phase="trainer_init.process_group", start=T0 + 2, end=T0 + 3),
    "phase_started": dict(attempt=0, phase="pt2_compile", start=T0 + 3),
    "progress": dict(
        attempt=0, start=T0 + 4, end=T0 + 34, cursor_start=0, cursor_end=100, steps=10
    ),
    "checkpoint": dict(attempt=0, start=T0 + 40, blocking_end=T0 + 42, committed=T0 + 50),
    "failure": dict(attempt=0, ts=T0 + 60, kind="preemption", message="node drained"),
    "heartbeat": dict(attempt=0, ts=T0 + 61),
    "attempt_ended": dict(attempt=0, ts=T0 + 62, reason="preempted"),
    "job_ended": dict(ts=T0 + 70, status="failed"),
}
REQUIRED = {
    "job_submitted": ["ts", "model", "gpus"],
    "attempt_started": ["ts", "attempt"],
    "phase": ["phase", "start", "end", "attempt"],
    "phase_started": ["phase", "start", "attempt"],
    "progress": ["start", "end", "cursor_start", "cursor_end", "steps", "attempt"],
    "checkpoint": ["start", "blocking_end", "attempt"],
    "failure": ["ts", "kind", "attempt"],
    "heartbeat": ["ts", "attempt"],
    "attempt_ended": ["ts", "reason", "attempt"],
    "job_ended": ["ts", "status"],
}


def count(database: Any, model: Any) -> int:
    """Rows in a table."""
    with database.session() as s:
        return s.scalar(select(func.count()).select_from(model))


def test_every_type_accepted_and_normalized(post, database) -> None:
    events = [ev(f"e-{t}", t, **f) for t, f in VALID.items()]
    r = post(events)
    assert r.status_code == 200, r.text
    assert r.json() == {"accepted": len(VALID), "duplicates": 0, "rejected": [], "held": 0}
    with database.session() as s:
        rows = {e.event_id: e for e in s.scalars(select(RawEvent))}
        job = s.get(Job, "job-1")
        model = s.get(Model, "m-a")
    assert set(rows) == {f"e-{t}" for t in VALID}
    assert rows["e-job_submitted"].attempt is None
    assert rows["e-checkpoint"].payload["ok"] is True
    assert rows["e-progress"].ts == T0 + 4
    assert job is not None and job.model == "m-a"
    assert model is not None and model.owner == "ranking"


def test_a_models_tier_comes_from_its_jobs_tier_label(post, database) -> None:
    first = ev("t-1", "job_submitted", ts=T0, model="m-t", gpus=8, labels={"tier": "tier-1"})
    assert post([{**first, "job_id": "job-t1"}]).status_code == 200
    # A later job without the label keeps the tier; one with another tier moves it.
    plain = ev("t-2", "job_submitted", ts=T0, model="m-t", gpus=8, labels={})
    assert post([{**plain, "job_id": "job-t2"}]).status_code == 200
    with database.session() as s:
        assert s.get(Model, "m-t").tier == "tier-1"
    moved = ev("t-3", "job_submitted", ts=T0, model="m-t", gpus=8, labels={"tier": "tier-2"})
    assert post([{**moved, "job_id": "job-t3"}]).status_code == 200
    with database.session() as s:
        assert s.get(Model, "m-t").tier == "tier-2"


@pytest.mark.parametrize(
    ("type_", "missing"), [(t, f) for t, fields in REQUIRED.items() for f in fields]
)
def test_each_required_field(post, database, type_: str, missing: str) -> None:
    event = ev("x1", type_, **VALID[type_])
    event.pop(missing, None)
    r = post([event])
    assert r.status_code == 200
    body = r.json()
    assert body["accepted"] == 0
    assert body["rejected"][0]["index"] == 0
    assert body["rejected"][0]["error"].startswith(f"{missing}:"), body


def test_partial_acceptance_keeps_rejects_with_reason(post, database) -> None:
    good = ev("g1", "heartbeat", attempt=0, ts=T0)
    bad = ev("b1", "heartbeat", attempt=0, ts="2026-05-01T12:00:00")  # no offset
    r = post([good, bad, "not an object"])
    body = r.json()
    assert body["accepted"] == 1
    assert [x["index"] for x in body["rejected"]] == [1, 2]
    assert "offset" in body["rejected"][0]["error"]
    assert body["rejected"][1]["error"].startswith("event:")
    with database.session() as s:
        kept = s.scalars(select(RejectedEvent).order_by(RejectedEvent.batch_index)).all()
    assert [k.event_id for k in kept] == ["b1", None]
    assert json.loads(kept[0].raw)["ts"] == "2026-05-01T12:00:00"
    assert "offset" in kept[0].error


def test_rejected_events_readable_by_operator(client, post) -> None:
    post(
        [
            ev(
                "b1",
                "progress",
                attempt=0,
                start=T0,
                end=T0 - 5,
                cursor_start=0,
                cursor_end=1,
                steps=1,
            )
        ]
    )
    r = client.get("/api/v1/events/rejected")
    assert r.status_code == 200
    [row] = r.json()
    assert row["event_id"] == "b1" and row["error"] == "end: is before start"


@pytest.mark.parametrize(
    ("fields", "error_start"),
    [
        (dict(event_id="e" * 65), "event_id:"),
        (dict(ts="2026-05-01T12:00:00"), "ts:"),
        (dict(ts=-5.0), "ts:"),
        (dict(ts=True), "ts:"),
        (dict(ts=1_777_000_000_000.0), "ts:"),  # milliseconds
        (dict(attempt=-1), "attempt:"),
        (dict(attempt="0"), "attempt:"),
        (dict(job_id=""), "job_id:"),
        (dict(job_id="j" * 129), "job_id:"),
        (dict(surprise=1), "surprise:"),
    ],
)
def test_field_errors_name_the_field(post, fields: dict[str, Any], error_start: str) -> None:
    event = {**ev("e1", "heartbeat", attempt=0, ts=T0), **fields}
    body = post([event]).json()
    assert body["accepted"] == 0
    assert body["rejected"][0]["error"].startswith(error_start), body


def test_nan_and_negative_numbers_rejected_per_event(client, ingest_token) -> None:
    nan_event = (
        '{"event_id":"n1","job_id":"j","type":"progress","attempt":0,"start":1777000000,'
        '"end":1777000010,"cursor_start":NaN,"cursor_end":5,"steps":1}'
    )
    neg = json.dumps(
        ev(
            "n2",
            "progress",
            job_id="j",
            attempt=0,
            start=T0,
            end=T0 + 1,
            cursor_start=0,
            cursor_end=-3,
            steps=1,
        )
    )
    gpus = json.dumps(ev("n3", "job_submitted", job_id="j", ts=T0, model="m", gpus=0))
    steps = json.dumps(
        ev(
            "n4",
            "progress",
            job_id="j",
            attempt=0,
            start=T0,
            end=T0 + 1,
            cursor_start=0,
            cursor_end=3,
            steps=-1,
        )
    )
    body = f'{{"events": [{nan_event}, {neg}, {gpus}, {steps}]}}'
    r = client.post(
        "/api/v1/events",
        content=body,
        headers={"Authorization": f"Bearer {ingest_token}", "Content-Type": "application/json"},
    )
    assert r.status_code == 200
    errors = [x["error"] for x in r.json()["rejected"]]
    assert errors[0].startswith("cursor_start:") and "finite" in errors[0]
    assert errors[1].startswith("cursor_end:")
    assert errors[2].startswith("gpus:")
    assert errors[3].startswith("steps:")


def test_unknown_phase_and_type(post) -> None:
    body = post(
        [
            ev("p1", "phase", attempt=0, phase="warmup", start=T0, end=T0 + 1),
            ev("p2", "phase", attempt=0, phase="custom.feature_sync", start=T0, end=T0 + 1),
            ev("p3", "teleport", attempt=0),
        ]
    ).json()
    assert body["accepted"] == 1
    assert body["rejected"][0]["error"].startswith("phase: unknown phase 'warmup'")
    assert body["rejected"][1]["error"].startswith("type: 'teleport' is not one of")


def test_duplicates_counted_and_stored_once(post, database) -> None:
    e = ev("d1", "heartbeat", attempt=0, ts=T0)
    first = post([e, e]).json()
    again = post([e]).json()
    assert first == {"accepted": 1, "duplicates": 1, "rejected": [], "held": 0}
    assert again == {"accepted": 0, "duplicates": 1, "rejected": [], "held": 0}
    assert count(database, RawEvent) == 1


def test_a_batch_mixing_stored_and_new_keys_stores_each_new_one_once(post, database) -> None:
    # On Postgres the batch goes in first as a plain insert, which a stored key fails; the
    # savepoint takes all of it back and the batch goes in again, skipping the known keys.
    stored = [ev(f"m{i}", "heartbeat", attempt=0, ts=T0 + i) for i in (1, 3)]
    assert post(stored).json()["accepted"] == 2
    batch = [ev(f"m{i}", "heartbeat", attempt=0, ts=T0 + i) for i in range(5)]
    assert post(batch).json() == {"accepted": 3, "duplicates": 2, "rejected": [], "held": 0}
    assert count(database, RawEvent) == 5
    assert post(batch).json() == {"accepted": 0, "duplicates": 5, "rejected": [], "held": 0}
    assert count(database, RawEvent) == 5


def test_concurrent_duplicate_posts_store_once(app, ingest_token, database) -> None:
    from fastapi.testclient import TestClient

    events = [
        ev(f"c{i}", "heartbeat", job_id=f"job-{i % 7}", attempt=0, ts=T0 + i) for i in range(300)
    ]
    results: list[dict[str, Any]] = []
    errors: list[BaseException] = []

    def send() -> None:
        try:
            with TestClient(app) as c:
                r = post_events(c, ingest_token, events)
                assert r.status_code == 200, r.text
                results.append(r.json())
        except BaseException as err:  # noqa: BLE001 - surfaced below
            errors.append(err)

    threads = [threading.Thread(target=send) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors, errors
    assert sum(r["accepted"] for r in results) == 300
    assert sum(r["duplicates"] for r in results) == 300 * 5
    assert count(database, RawEvent) == 300


def test_no_token_bad_token_wrong_scope(client, make_token) -> None:
    batch = {"events": [ev("a1", "heartbeat", attempt=0, ts=T0)]}
    r = client.post("/api/v1/events", json=batch)
    assert r.status_code == 401 and "bearer token" in r.json()["detail"]
    r = client.post("/api/v1/events", json=batch, headers={"Authorization": "Bearer nope"})
    assert r.status_code == 401 and "unknown" in r.json()["detail"]
    read = make_token("read")
    r = client.post("/api/v1/events", json=batch, headers={"Authorization": f"Bearer {read}"})
    assert r.status_code == 403 and "scope" in r.json()["detail"]


def test_a_bad_token_is_told_before_a_bad_body_and_stores_nothing(client, database) -> None:
    """The token is checked in the thread that stores a batch; a refused one stores nothing, and
    a body that is wrong too still hears about the token first (401, not 400/413/415)."""
    bad = {"Authorization": "Bearer nope"}
    batch = {"events": [ev("b1", "heartbeat", attempt=0, ts=T0)]}
    r = client.post("/api/v1/events", json=batch, headers=bad)
    assert r.status_code == 401 and "unknown" in r.json()["detail"]
    assert count(database, RawEvent) == 0 and count(database, Job) == 0
    for body, ctype in [
        (b"{not json", "application/json"),
        (b'{"events": 3}', "application/json"),
        (json.dumps(batch).encode(), "text/plain"),
        (json.dumps({"events": [batch["events"][0]] * 10_001}).encode(), "application/json"),
    ]:
        r = client.post("/api/v1/events", content=body, headers={**bad, "Content-Type": ctype})
        assert r.status_code == 401, (ctype, body[:20], r.status_code, r.text)


def test_a_bad_token_into_a_busy_job_is_answered_at_once(app) -> None:
    """While another batch of this process holds a job's turn, a batch with a bad token for the
    same job is refused at once, not after the wait; a free job's turn is taken at once."""
    import asyncio
    from types import SimpleNamespace

    from fastapi import HTTPException

    from ingest.views import TURN_WAIT_S, JobTurns, _store_waiting_for_locks

    request = SimpleNamespace(app=app, headers={"authorization": "Bearer nope"})
    events = [ev("c1", "heartbeat", job_id="job-1", attempt=0, ts=T0)]

    async def run() -> tuple[bool, bool, int]:
        turns = JobTurns()
        app.state.job_turns = {id(asyncio.get_running_loop()): turns}
        async with turns.turn(["job-1"], 5):
            busy = not turns.free(["job-2", "job-1"]) and turns.free(["job-2"])
            try:
                await asyncio.wait_for(
                    _store_waiting_for_locks(request, events, app.state.settings),
                    TURN_WAIT_S / 3,
                )
            except HTTPException as err:
                status = err.status_code
        return busy, turns.free(["job-1"]), status

    busy, free_after, status = asyncio.run(run())
    assert busy and status == 401
    assert free_after  # the refused batch left no turn behind


def test_token_for_model_a_refused_on_model_b(client, make_token, database) -> None:
    token_a = make_token("ingest", models=["A"])
    admin = make_token("admin")
    sub_b = ev("s-b", "job_submitted", job_id="job-b", ts=T0, model="B", gpus=8)
    assert post_events(client, admin, [sub_b]).json()["accepted"] == 1
    r = post_events(client, token_a, [ev("h-b", "heartbeat", job_id="job-b", attempt=0, ts=T0)])
    assert r.status_code == 403
    assert "'job-b'" in r.json()["detail"] and "'B'" in r.json()["detail"]
    r = post_events(
        client, token_a, [ev("s-b2", "job_submitted", job_id="job-c", ts=T0, model="B", gpus=1)]
    )
    assert r.status_code == 403
    ok = post_events(
        client,
        token_a,
        [
            ev("s-a", "job_submitted", job_id="job-a", ts=T0, model="A", gpus=1),
            ev("h-a", "heartbeat", job_id="job-a", attempt=0, ts=T0),
        ],
    )
    assert ok.status_code == 200 and ok.json()["accepted"] == 2
    with database.session() as s:
        # Nothing of the refused batches was stored.
        assert s.scalar(select(func.count()).select_from(RawEvent)) == 3


def test_resubmission_under_another_model_rejected(post) -> None:
    post([ev("s1", "job_submitted", ts=T0, model="m-a", gpus=8)])
    body = post([ev("s2", "job_submitted", ts=T0, model="m-b", gpus=8)]).json()
    assert body["accepted"] == 0
    assert "belongs to model 'm-a'" in body["rejected"][0]["error"]


def test_ten_thousand_accepted_ten_thousand_and_one_refused(post, database) -> None:
    events = [
        ev(f"big{i}", "heartbeat", job_id=f"job-{i % 50}", attempt=0, ts=T0 + i)
        for i in range(10_001)
    ]
    r = post(events)
    assert r.status_code == 413 and "10001" in r.json()["detail"]
    assert count(database, RawEvent) == 0
    r = post(events[:10_000])
    assert r.status_code == 200 and r.json()["accepted"] == 10_000
    assert count(database, RawEvent) == 10_000


def test_body_over_five_mib_refused(client, ingest_token) -> None:
    pad = "x" * 4000
    events = [
        ev(f"p{i}", "failure", attempt=0, ts=T0, kind="unknown", message=pad) for i in range(1400)
    ]
    r = client.post(
        "/api/v1/events",
        content=json.dumps({"events": events}),
        headers={"Authorization": f"Bearer {ingest_token}", "Content-Type": "application/json"},
    )
    assert r.status_code == 413 and "byte limit" in r.json()["detail"]


def test_not_json_and_wrong_shape_and_content_type(client, ingest_token) -> None:
    auth = {"Authorization": f"Bearer {ingest_token}"}
    r = client.post(
        "/api/v1/events", content=b"{nope", headers={**auth, "Content-Type": "application/json"}
    )
    assert r.status_code == 400 and "not valid JSON" in r.json()["detail"]
    r = client.post("/api/v1/events", json=[1, 2], headers=auth)
    assert r.status_code == 400 and '"events"' in r.json()["detail"]
    r = client.post(
        "/api/v1/events", content=b'{"events": []}', headers={**auth, "Content-Type": "text/plain"}
    )
    assert r.status_code == 415 and "text/plain" in r.json()["detail"]


def test_healthz_reports_database_and_schema(client, database) -> None:
    from backend.migrate import head_revisions

    body = client.get("/healthz").json()
    assert body["status"] == "ok" and body["database"] == database.dialect
    assert body["schema"] == sorted(head_revisions())


def test_read_token_required(settings, database, make_token) -> None:
    from fastapi.testclient import TestClient

    from backend.app import create_app

    locked = settings.model_copy(update={"read_token_required": True})
    app = create_app(locked, database=database, start_workers=False, with_dashboard=False)
    with TestClient(app) as c:
        assert c.get("/api/v1/events/rejected").status_code == 401
        reader = make_token("read")
        ingester = make_token("ingest")
        r = c.get("/api/v1/events/rejected", headers={"Authorization": f"Bearer {reader}"})
        assert r.status_code == 200 and r.json() == []
        r = c.get("/api/v1/events/rejected", headers={"Authorization": f"Bearer {ingester}"})
        assert r.status_code == 403


def test_scoped_token_cannot_squat_a_job_it_has_not_submitted(client, make_token, database):
    """A modelA token's heartbeat for another team's predictable job id gives that job no model:
    it is held, the real owner's job_submitted then names the job's model, and the held
    heartbeat is refused with its reason (the token may not write modelB), never stored."""
    token_a = make_token("ingest", models=["modelA"], name="team-a")
    owner = make_token("ingest", models=["modelB"], name="team-b")
    victim = "slurm-gpu1-123456"
    squat = post_events(client, token_a, [ev("sq-1", "heartbeat", job_id=victim, attempt=0, ts=T0)])
    assert squat.status_code == 200
    assert squat.json() == {"accepted": 0, "duplicates": 0, "rejected": [], "held": 1}
    with database.session() as s:
        assert s.get(Job, victim) is None  # no job, no model from a heartbeat
    held = client.get("/api/v1/events/held", params={"job_id": victim}).json()
    assert held["total"] == 1 and held["events"][0]["token_name"] == "team-a"
    assert held["events"][0]["event"]["type"] == "heartbeat"

    sub = ev("sub", "job_submitted", job_id=victim, ts=T0 - 60, model="modelB", gpus=64)
    got = post_events(client, owner, [sub])
    assert got.status_code == 200 and got.json()["accepted"] == 1
    assert got.json()["rejected"] == []
    with database.session() as s:
        assert s.get(Job, victim).model == "modelB"
        stored = list(s.scalars(select(RawEvent.event_id).where(RawEvent.job_id == victim)))
        assert stored == ["sub"]
        refused = list(s.scalars(select(RejectedEvent).where(RejectedEvent.job_id == victim)))
    assert [(r.event_id, r.token_name, r.batch_index) for r in refused] == [("sq-1", "team-a", -1)]
    assert refused[0].error.startswith("model_not_allowed:")
    assert "'modelB'" in refused[0].error and "'team-a'" in refused[0].error
    assert client.get("/api/v1/events/held", params={"job_id": victim}).json()["total"] == 0
    result = client.get(f"/api/v1/jobs/{victim}/ett").json()
    assert result["model"] == "modelB" and result["gpus"] == 64


def test_held_events_join_their_job_when_its_job_submitted_arrives(client, make_token, database):
    """The trainer's events (a scoped token) may come before the scheduler's job_submitted (an
    unscoped token): they wait, resent copies are duplicates, and they join the job when the
    job_submitted names the token's model. The result does not depend on the order."""
    trainer = make_token("ingest", models=["ranker"], name="trainer")
    hooks = make_token("ingest", name="slurm-hooks")
    job = "slurm-c-7"
    early = [
        ev("a0", "attempt_started", job_id=job, attempt=0, ts=T0 + 10, gpus=8),
        ev(
            "p0",
            "progress",
            job_id=job,
            attempt=0,
            start=T0 + 20,
            end=T0 + 80,
            cursor_start=0,
            cursor_end=60,
            steps=60,
        ),
    ]
    first = post_events(client, trainer, early).json()
    assert first["held"] == 2 and first["accepted"] == 0
    again = post_events(client, trainer, early).json()  # the agent resends after a timeout
    assert again["held"] == 0 and again["duplicates"] == 2
    late = [
        ev("sub", "job_submitted", job_id=job, ts=T0, model="ranker", gpus=8),
        ev("end", "job_ended", job_id=job, ts=T0 + 100, status="succeeded"),
    ]
    done = post_events(client, hooks, late).json()
    assert done["accepted"] == 2 and done["rejected"] == [] and done["held"] == 0
    with database.session() as s:
        stored = sorted(s.scalars(select(RawEvent.event_id).where(RawEvent.job_id == job)))
    assert stored == ["a0", "end", "p0", "sub"]
    got = client.get(f"/api/v1/jobs/{job}/ett").json()
    assert got["model"] == "ranker" and got["status"] == "succeeded"
    assert got["effective_s"] == 60.0 and got["e2e_s"] == 100.0
    # Once the job has its model, the trainer writes into it directly.
    more = post_events(client, trainer, [ev("hb", "heartbeat", job_id=job, attempt=0, ts=T0 + 90)])
    assert more.json()["accepted"] == 1 and more.json()["held"] == 0


def test_held_events_are_bounded_per_job(database, make_token) -> None:
    from backend.auth.models import ApiToken
    from ingest.service import ingest_batch

    make_token("ingest", models=["m"], name="scoped")
    beats = [ev(f"h{i}", "heartbeat", job_id="full", attempt=0, ts=T0 + i) for i in range(3)]
    with database.session() as s:
        token = s.scalar(select(ApiToken).where(ApiToken.name == "scoped"))
        got = ingest_batch(db_session=s, events=beats, token=token, max_held_per_job=2)
        s.commit()
    assert got.held == 2 and got.accepted == 0
    (refused,) = got.rejected
    assert refused["event_id"] == "h2" and refused["error"].startswith("held_limit:")
    with database.session() as s:
        kept = s.scalar(select(RejectedEvent).where(RejectedEvent.event_id == "h2"))
        assert kept is not None and kept.token_name == "scoped"


def test_a_running_jobs_batch_writes_no_models_row(database) -> None:
    """The model a stored job names has its row already: later batches of the job write to
    models only when a job_submitted brings an owner or tier."""
    from sqlalchemy import event

    from ingest.service import ingest_batch

    def ingest(events: list[dict[str, Any]]) -> list[str]:
        statements: list[str] = []

        def seen(_conn: Any, _cursor: Any, statement: str, *_args: Any) -> None:
            statements.append(" ".join(statement.split()))

        event.listen(database.engine, "before_cursor_execute", seen)
        try:
            with database.session() as s:
                assert ingest_batch(db_session=s, events=events, token=None).accepted == 1
                s.commit()
        finally:
            event.remove(database.engine, "before_cursor_execute", seen)
        return [x for x in statements if x.startswith(("INSERT INTO models", "UPDATE models"))]

    sub = ev("s1", "job_submitted", ts=T0, model="m-run", gpus=8, labels={"owner": "ranking"})
    assert ingest([sub])  # a new job: its model's row is written
    assert ingest([ev("h1", "heartbeat", attempt=0, ts=T0 + 60)]) == []
    with database.session() as s:
        assert s.get(Model, "m-run").owner == "ranking"
        assert s.get(Job, "job-1").dirty
