"""POST /v1/traces: OTLP/HTTP bodies, answers, limits, auth, mapping and dedupe (both databases)."""

from __future__ import annotations

import gzip
import json
from typing import Any

import pytest
from fastapi.testclient import TestClient
from google.protobuf import json_format
from google.rpc import status_pb2
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse

from tests.ingest.otlp_builders import request, span

T0 = 1_780_000_000.0
RES = {"ett.job.id": "otlp-1", "ett.model": "ranker", "ett.gpus": 8, "service.name": "trainer"}
PB = "application/x-protobuf"


def job_spans() -> list[Any]:
    """A small job in this project's convention."""
    return [
        span("ett.job_submitted", T0, T0),
        span("ett.attempt", T0 + 60, T0 + 1000, {"host.name": "node-1"}),
        span("trainer_init.process_group", T0 + 70, T0 + 100),
        span("pt2_compile", T0 + 100, T0 + 130),
        span(
            "ett.progress",
            T0 + 130,
            T0 + 500,
            {"ett.cursor_start": 0, "ett.cursor_end": 370, "ett.steps": 370},
        ),  # fmt: skip
        span("ett.checkpoint", T0 + 500, T0 + 510, {"ett.cursor": 370}),
        span(
            "ett.progress",
            T0 + 510,
            T0 + 990,
            {"ett.cursor_start": 370, "ett.cursor_end": 850, "ett.steps": 480},
        ),  # fmt: skip
        span("ett.job_ended", T0 + 1010, T0 + 1010, {"ett.job.status": "succeeded"}),
    ]


def post_pb(client: TestClient, token: str, req: Any, **headers: str) -> Any:
    body = req.SerializeToString()
    if headers.get("Content-Encoding") == "gzip":
        body = gzip.compress(body)
    return client.post(
        "/v1/traces",
        content=body,
        headers={"Authorization": f"Bearer {token}", "Content-Type": PB, **headers},
    )


def to_otlp_json(req: Any) -> dict[str, Any]:
    """OTLP's JSON encoding: protobuf JSON with hex ids (the spec's deviation)."""
    doc = json_format.MessageToDict(req)
    for rs in doc["resourceSpans"]:
        for ss in rs["scopeSpans"]:
            for s in ss["spans"]:
                for key in ("traceId", "spanId", "parentSpanId"):
                    if key in s:
                        import base64

                        s[key] = base64.b64decode(s[key]).hex().upper()
    return doc


def stored(client: TestClient, job: str) -> Any:
    return client.get(f"/api/v1/jobs/{job}/ett").json()


def test_protobuf_export_maps_to_the_job_and_a_resend_dedupes(
    client: TestClient, ingest_token: str
) -> None:
    answer = post_pb(client, ingest_token, request(job_spans(), RES))
    assert answer.status_code == 200, answer.text
    assert answer.headers["content-type"] == PB
    parsed = ExportTraceServiceResponse.FromString(answer.content)
    assert not parsed.HasField("partial_success")
    ett = stored(client, "otlp-1")
    assert ett["e2e_s"] == pytest.approx(1010)
    comps = ett["components"]
    assert comps["scheduling"] == pytest.approx(60)
    assert comps["pt2_compile"] == pytest.approx(30)
    assert comps["effective_training"] == pytest.approx(850)
    assert comps["wasted_training"] == pytest.approx(10)
    assert comps["shutdown"] == pytest.approx(10)
    assert comps["hardware_setup"] == pytest.approx(10)
    again = post_pb(client, ingest_token, request(job_spans(), RES), **{"Content-Encoding": "gzip"})
    assert again.status_code == 200
    assert stored(client, "otlp-1")["e2e_s"] == pytest.approx(1010)
    rows = client.get("/api/v1/events/rejected?job_id=otlp-1").json()
    assert rows == []


def test_json_encoding_with_hex_ids_stores_the_same_events(
    client: TestClient, ingest_token: str
) -> None:
    doc = to_otlp_json(request(job_spans(), RES))
    assert all(len(s["traceId"]) == 32 for s in doc["resourceSpans"][0]["scopeSpans"][0]["spans"])
    answer = client.post(
        "/v1/traces",
        content=gzip.compress(json.dumps(doc).encode()),
        headers={
            "Authorization": f"Bearer {ingest_token}",
            "Content-Type": "application/json",
            "Content-Encoding": "gzip",
        },
    )
    assert answer.status_code == 200, answer.text
    assert answer.headers["content-type"] == "application/json"
    assert answer.json() == {}
    # The same spans as protobuf are the same events: all duplicates, nothing new.
    before = stored(client, "otlp-1")
    pb = post_pb(client, ingest_token, request(job_spans(), RES))
    assert pb.status_code == 200
    assert stored(client, "otlp-1")["components"] == before["components"]


def test_unmappable_spans_are_partial_success_and_kept_with_their_reason(
    client: TestClient, ingest_token: str
) -> None:
    spans = [
        *job_spans()[:3],
        span("GET /healthz", T0 + 80, T0 + 81),
        span("ett.progress", T0 + 130, T0 + 140, {"ett.cursor_start": 5, "ett.cursor_end": 1}),
    ]
    answer = post_pb(client, ingest_token, request(spans, RES))
    assert answer.status_code == 200
    parsed = ExportTraceServiceResponse.FromString(answer.content)
    assert parsed.partial_success.rejected_spans == 2
    assert "GET /healthz" in parsed.partial_success.error_message
    assert "steps" in parsed.partial_success.error_message
    rows = client.get("/api/v1/events/rejected?job_id=otlp-1").json()
    errors = sorted(r["error"] for r in rows)
    assert len(errors) == 2
    assert any(e.startswith("otlp: span 'GET /healthz' is neither") for e in errors)
    assert any("GET /healthz" in r["raw"] for r in rows)
    nojob = post_pb(client, ingest_token, request([span("pt2_compile", T0, T0 + 1)], {}))
    message = ExportTraceServiceResponse.FromString(nojob.content).partial_success.error_message
    assert "ett.job.id" in message


def test_errors_are_status_messages_in_the_request_encoding(
    client: TestClient, ingest_token: str, make_token: Any
) -> None:
    req = request(job_spans(), RES)
    anonymous = client.post("/v1/traces", content=req.SerializeToString(),
                            headers={"Content-Type": PB})  # fmt: skip
    assert anonymous.status_code == 401
    assert "bearer" in status_pb2.Status.FromString(anonymous.content).message
    headers = {"Authorization": f"Bearer {ingest_token}"}
    bad = client.post(
        "/v1/traces", content=b"\xff\x00garbage", headers={**headers, "Content-Type": PB}
    )
    assert bad.status_code == 400
    assert "protobuf" in status_pb2.Status.FromString(bad.content).message
    bad_json = client.post("/v1/traces", content=b'{"resourceSpans": [{"scopeSpans": [{"spans": [{"traceId": "zz"}]}]}]}',
                           headers={**headers, "Content-Type": "application/json"})  # fmt: skip
    assert bad_json.status_code == 400 and "hex" in bad_json.json()["message"]
    text = client.post(
        "/v1/traces", content=b"x", headers={**headers, "Content-Type": "text/plain"}
    )
    assert text.status_code == 415
    bomb = gzip.compress(b"\x00" * (6 * 1024 * 1024))
    big = client.post("/v1/traces", content=bomb,
                      headers={**headers, "Content-Type": PB, "Content-Encoding": "gzip"})  # fmt: skip
    assert (
        big.status_code == 413
        and "decompressed" in status_pb2.Status.FromString(big.content).message
    )
    scoped = make_token("ingest", models=["other"])
    refused = post_pb(client, scoped, req)
    assert refused.status_code == 403
    assert "other" in status_pb2.Status.FromString(refused.content).message
    reader = make_token("read")
    assert post_pb(client, reader, req).status_code == 403
    empty = post_pb(client, ingest_token, request([], RES))
    assert empty.status_code == 200
    assert not ExportTraceServiceResponse.FromString(empty.content).HasField("partial_success")


def onelogger_updates(job_res: dict[str, Any], iterations: list[int]) -> list[Any]:
    """OneLogger's training_metrics_update fake spans, every 10 iterations of 1 s from T0+100."""
    out = []
    for it in iterations:
        t = T0 + 100 + (it + 1)
        out.append(
            span(
                "training_metrics_update_event_for_training_loop",
                t,
                t,
                {
                    "train_iterations_start": 0,
                    "current_iteration": it,
                    "interval": 10,
                    "first_logged_train_iterations_finish_timestamp_sec": T0 + 101,
                    "last_logged_train_iterations_finish_timestamp_sec": t,
                },
                parent="loop",
                sid=f"u{it}",
            )  # fmt: skip
        )
    return out


@pytest.mark.parametrize("order", ["in order", "reversed"])
def test_onelogger_metric_updates_are_stitched_across_exports_in_any_order(
    client: TestClient, ingest_token: str, order: str
) -> None:
    res = {**RES, "ett.job.id": f"ol-{order[:2]}", "ett.job.owner": "scheduler"}
    app = span("application", T0 + 10, T0 + 200, sid="app")
    exports = [
        [app, *onelogger_updates(res, [9, 19])],
        onelogger_updates(res, [29, 39]),
        onelogger_updates(res, [49]),
    ]
    if order == "reversed":
        exports.reverse()
    for spans in exports:
        answer = post_pb(client, ingest_token, request(spans, res))
        assert answer.status_code == 200, answer.text
        assert not ExportTraceServiceResponse.FromString(answer.content).HasField("partial_success")
    ett = stored(client, res["ett.job.id"])
    comps = ett["components"]
    # Windows from the first iteration's end (T0+101) to the last update (T0+150), end to end.
    assert comps["effective_training"] == pytest.approx(49)


def test_an_attributes_integer_is_ascii_digits_only() -> None:
    """A string attribute read as an integer is ASCII digits: "¹" (a ValueError before) and "٣" are none."""
    from ingest.otlp import _as_int

    assert _as_int(" -12 ") == -12
    assert _as_int("12") == 12
    assert _as_int("¹") is None
    assert _as_int("٣") is None
    assert _as_int(3.0) == 3
