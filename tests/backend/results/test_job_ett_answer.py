"""GET /jobs/{job_id}/ett: its response model names every key of the answer, and only its errors are 422."""

from __future__ import annotations

import time
from typing import Any

import pytest
from fastapi.testclient import TestClient

from backend.jobs import quarantine
from backend.results import read
from backend.results.schemas import JobEtt
from tests.backend.ett.builders import JobEvents, M

# Recent, so that the open job is still open (not abandoned): its last event 10 minutes ago.
T0 = float(int(time.time()) - 50 * 60)


def rich_job(job_id: str, *, closed: bool) -> JobEvents:
    """Every list of the answer non-empty: attempts (one with a host), a failure, warnings."""
    j = JobEvents(job_id)
    j.submitted(T0, model="ranker", gpus=16, labels={"owner": "ads"})
    j.submitted(T0 + 1, model="ranker", gpus=16)  # multiple_job_submitted: a warning
    j.started(0, T0 + 60, host="h1")
    j.phase(0, "trainer_init", T0 + 60, T0 + 5 * M)
    j.progress(0, T0 + 5 * M, T0 + 20 * M, 0, 900)
    j.failure(0, T0 + 20 * M, kind="infra")
    j.started(1, T0 + 22 * M, host="h2", gpus=16)
    j.phase(1, "checkpoint_restore", T0 + 22 * M, T0 + 24 * M)
    j.progress(1, T0 + 24 * M, T0 + 40 * M, 600, 1600)
    if closed:
        j.ended(1, T0 + 41 * M)
        j.job_ended(T0 + 42 * M)
    return j


def _resolve(schema: dict[str, Any], defs: dict[str, Any]) -> dict[str, Any]:
    while "$ref" in schema:
        schema = defs[schema["$ref"].rsplit("/", 1)[-1]]
    return schema


def undescribed(value: Any, schema: dict[str, Any], defs: dict[str, Any], where: str) -> list[str]:
    """Where `value` and the JSON schema disagree on keys (extra, missing required), recursively."""
    schema = _resolve(schema, defs)
    if "anyOf" in schema:
        if value is None:
            return []
        typed = [s for s in schema["anyOf"] if s.get("type") != "null"]
        return undescribed(value, typed[0], defs, where)
    out: list[str] = []
    if isinstance(value, dict) and "properties" in schema:
        props = schema["properties"]
        out += [f"{where}.{k}: not in the model" for k in value if k not in props]
        out += [f"{where}.{k}: missing" for k in schema.get("required", []) if k not in value]
        for k, v in value.items():
            if k in props:
                out += undescribed(v, props[k], defs, f"{where}.{k}")
    elif isinstance(value, dict) and isinstance(schema.get("additionalProperties"), dict):
        for k, v in value.items():
            out += undescribed(v, schema["additionalProperties"], defs, f"{where}[{k}]")
    elif isinstance(value, list) and "items" in schema:
        for i, v in enumerate(value):
            out += undescribed(v, schema["items"], defs, f"{where}[{i}]")
    return out


def _every_list_filled(doc: dict[str, Any]) -> None:
    assert doc["attempts"] and doc["warnings"] and doc["intervals"] and doc["phases"]
    assert doc["l1"]["failures"] and doc["quarantine"] is not None


@pytest.mark.parametrize("closed", [True, False], ids=["stored", "open"])
def test_the_model_names_every_key_of_the_answer(client, post, database, closed) -> None:
    """A key the engine adds to its answer without the model would be dropped from REST."""
    job = rich_job("rich", closed=closed)
    assert post(job.events).status_code == 200
    with database.session() as s:  # a quarantine record, so that its shape is checked too
        quarantine.record_failure(db_session=s, job_id="rich", error="E: x", now=T0)
        s.commit()
    spec = client.get("/openapi.json").json()
    op = spec["paths"]["/api/v1/jobs/{job_id}/ett"]["get"]
    schema = op["responses"]["200"]["content"]["application/json"]["schema"]
    assert schema == {"$ref": "#/components/schemas/JobEtt"}
    r = client.get("/api/v1/jobs/rich/ett")
    assert r.status_code == 200, r.text
    doc = r.json()
    _every_list_filled(doc)
    assert doc["provisional"] is not closed
    assert undescribed(doc, schema, spec["components"]["schemas"], "answer") == []
    # and the model is the answer, not a filter of it: REST says what the read model says
    with database.session() as s:
        inner = read.job_ett(db_session=s, job_id="rich", fmt=lambda t: t)
    assert inner is not None
    assert set(doc) == set(inner) | {"quarantine"}
    assert set(doc["l1"]) == set(inner["l1"])
    assert [set(a) for a in doc["attempts"]] == [set(a) for a in inner["attempts"]]


def test_the_model_s_fields_are_the_engine_s_keys() -> None:
    """JobETT.to_dict's keys are JobEtt's fields (plus quarantine), in the pure engine."""
    from backend.ett.engine import compute_job

    result = compute_job(rich_job("pure", closed=True).events, now=T0 + 3600)
    doc = result.to_dict()
    assert set(JobEtt.model_fields) == set(doc) | {"quarantine"}


def test_an_uncomputable_job_is_a_422_with_the_documented_body(client, monkeypatch) -> None:
    def uncomputable(**_: Any) -> None:
        raise read.Uncomputable("JSONDecodeError: Expecting value")

    monkeypatch.setattr(read, "job_ett", uncomputable)
    r = client.get("/api/v1/jobs/j1/ett")
    assert r.status_code == 422
    assert r.json() == {
        "detail": "job 'j1' cannot be computed: JSONDecodeError: Expecting value",
        "quarantine": None,
    }
    spec = client.get("/openapi.json").json()
    op = spec["paths"]["/api/v1/jobs/{job_id}/ett"]["get"]
    assert op["responses"]["422"]["content"]["application/json"]["schema"] == {
        "$ref": "#/components/schemas/JobUncomputable"
    }


def test_a_bug_is_a_500_not_a_422(app, monkeypatch) -> None:
    """Only the read model's Uncomputable is the job's fault; any other error is ours."""

    def bug(**_: Any) -> None:
        raise KeyError("components")

    monkeypatch.setattr(read, "job_ett", bug)
    with TestClient(app, raise_server_exceptions=False) as c:
        r = c.get("/api/v1/jobs/j1/ett")
    assert r.status_code == 500
