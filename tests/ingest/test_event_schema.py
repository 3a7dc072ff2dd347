"""GET /api/v1/schema/events and the typed OpenAPI body of POST /api/v1/events."""

from __future__ import annotations

import copy

import jsonschema
import pytest

from ingest.schema import EVENT_TYPES
from tests.ingest.test_ingest_api import VALID, ev


@pytest.fixture
def schema(client) -> dict:
    """The served JSON Schema."""
    r = client.get("/api/v1/schema/events")
    assert r.status_code == 200
    return r.json()


def test_every_valid_event_validates_against_the_served_schema(schema) -> None:
    jsonschema.Draft202012Validator.check_schema(schema)
    validator = jsonschema.Draft202012Validator(schema)
    for etype, fields in VALID.items():
        validator.validate(ev(f"e-{etype}", etype, **fields))
    # RFC 3339 strings are times too
    validator.validate(ev("t", "heartbeat", attempt=0, ts="2026-05-01T12:00:00.250Z"))
    validator.validate(
        ev("s", "phase", attempt=0, phase="trainer_init", start=1.0, end=2.0, span_id="x")
    )


@pytest.mark.parametrize(
    ("etype", "change"),
    [
        ("heartbeat", {"surprise": 1}),  # unknown field
        ("progress", {"steps": -1}),
        ("failure", {"kind": "meteor"}),
        ("job_submitted", {"gpus": 0}),
        ("phase", {"span_id": ""}),
        ("teleport", {}),
    ],
)
def test_invalid_events_fail_the_schema_as_they_fail_ingest(schema, post, etype, change) -> None:
    fields = copy.deepcopy(VALID.get(etype, {"ts": 1.0}))
    event = {**ev("bad", etype, **fields), **change}
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.Draft202012Validator(schema).validate(event)
    body = post([event]).json()
    assert body["accepted"] == 0 and len(body["rejected"]) == 1


def test_openapi_body_is_typed_by_event_type(client) -> None:
    spec = client.get("/openapi.json").json()
    body = spec["paths"]["/api/v1/events"]["post"]["requestBody"]["content"]["application/json"]
    items = body["schema"]["properties"]["events"]["items"]
    assert items["discriminator"]["propertyName"] == "type"
    consts = sorted(v["properties"]["type"]["const"] for v in items["oneOf"])
    assert consts == sorted(EVENT_TYPES)
    progress = next(v for v in items["oneOf"] if v["properties"]["type"]["const"] == "progress")
    assert set(progress["required"]) >= {"start", "end", "cursor_start", "cursor_end", "steps"}
    assert "$ref" not in str(body)
    assert "/api/v1/schema/events" in spec["paths"]


def test_the_engine_orders_and_times_every_wire_type() -> None:
    """A type ingest accepts and the engine does not know would be set aside as unknown."""
    from backend.ett.timeline import _TIME_FIELD, TYPE_RANK

    assert set(TYPE_RANK) == set(EVENT_TYPES) == set(_TIME_FIELD)
    assert len(set(TYPE_RANK.values())) == len(TYPE_RANK)


@pytest.mark.parametrize(
    ("extra", "ok"),
    [
        ({}, True),  # an old event: no cause
        ({"cause": "nccl_timeout", "domain": "infrastructure", "planned": False, "rank": 7}, True),
        ({"cause": "oom"}, False),
        ({"domain": "network"}, False),
        ({"planned": "yes"}, False),
        ({"rank": -1}, False),
    ],
)
def test_failure_cause_fields_are_optional_and_checked(extra: dict, ok: bool) -> None:
    from ingest.schema import validate_event

    event = {"event_id": "e1", "job_id": "j", "type": "failure", "attempt": 0,
             "ts": "2026-11-30T12:00:00Z", "kind": "infra", **extra}  # fmt: skip
    if ok:
        assert validate_event(event)["kind"] == "infra"
    else:
        with pytest.raises(ValueError, match=next(iter(extra))):
            validate_event(event)
