"""The OpenTelemetry Python SDK against a live `ett serve`: the job equals the agent's, to 1 s.

One scripted timeline (two attempts, a crash, a checkpoint, a restore with replay) is sent twice:
through this project's agent (POST /api/v1/events) and through the OTel SDK's real exporter
(POST /v1/traces), once in protobuf and once in OTLP's JSON encoding. ETT%, every Level 2
component and Level 1 of the three jobs agree to 1 s, on both databases.
"""

from __future__ import annotations

import base64
import json
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from google.protobuf import json_format
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult
from opentelemetry.trace import Status, StatusCode

from tests.ingest.twins import differences, settled
from tests.trainer_agent.conftest import FakeClock
from tests.trainer_agent.live_server import LiveServer
from trainer_agent import Agent

pytestmark = pytest.mark.slow
T0 = float(int(time.time()) - 86_400)


@pytest.fixture
def live(database: Any, tmp_path: Path) -> Iterator[LiveServer]:
    """`ett serve` on this test's database (SQLite or Postgres)."""
    server = LiveServer(tmp_path, database_url=database.url)
    server.start()
    yield server
    server.close()


def timeline(h: Any) -> None:
    """The job, in seconds after T0: submitted, crash at 300 s, restore, replay, done at 610 s."""
    h.submitted(0)
    h.attempt_start(0, 30)
    h.phase("trainer_init.process_group", 32, 40)
    h.phase("pt2_compile", 40, 60)
    for cursor in range(1, 481):  # a step every 0.5 s from 60 s, the data cursor counting steps
        t = 60 + 0.5 * cursor
        if t == 200:
            h.checkpoint(200, 205, cursor - 1)
        h.step(t + (5 if t > 200 else 0), cursor)
        if t + 5 >= 300:
            break
    h.failure(300.2, "app_error")
    h.attempt_end(300.2, "failure")
    h.attempt_start(1, 330)
    h.phase("checkpoint_restore", 335, 345)
    cursor = 280  # the checkpoint's cursor: what follows up to the crash's cursor is replay
    for i in range(1, 501):
        cursor += 1
        h.step(345 + 0.5 * i, cursor)
    h.attempt_end(596, "completed")
    h.job_ended(610)


class AgentHooks:
    """The timeline through this project's agent, on a fake clock."""

    def __init__(self, live: LiveServer, job: str, spool: Path) -> None:
        self.live, self.job, self.spool, self.clock = live, job, spool, FakeClock(T0)
        self.agent: Agent | None = None
        self.scheduler = Agent(job, endpoint=live.url, token=live.token, spool_dir=spool,
                               report_attempt=False, report_progress=False, heartbeat_s=0,
                               install_handlers=False, job_owner="scheduler", clock=self.clock)  # fmt: skip

    def _at(self, t: float) -> None:
        self.clock.now = T0 + t

    def submitted(self, t: float) -> None:
        self.scheduler.job_submitted("ranker", 8, ts=T0 + t)

    def attempt_start(self, a: int, t: float) -> None:
        self._at(t)
        self.agent = Agent(self.job, a, self.live.url, self.live.token, spool_dir=self.spool,
                           rank=0, heartbeat_s=0, install_handlers=False, job_owner="scheduler",
                           clock=self.clock, gpus=8)  # fmt: skip

    def phase(self, name: str, s: float, e: float) -> None:
        assert self.agent is not None
        self._at(s)
        span = self.agent.phase(name)
        span.__enter__()
        self._at(e)
        span.__exit__(None, None, None)

    def step(self, t: float, cursor: int) -> None:
        assert self.agent is not None
        self._at(t)
        self.agent.step(cursor)

    def checkpoint(self, s: float, e: float, cursor: int) -> None:
        assert self.agent is not None
        self._at(s)
        ck = self.agent.checkpoint_begin(cursor)
        self._at(e)
        ck.blocking_done()
        ck.committed()

    def failure(self, t: float, kind: str) -> None:
        assert self.agent is not None
        self.agent.failure(kind, ts=T0 + t)

    def attempt_end(self, t: float, reason: str) -> None:
        assert self.agent is not None
        self._at(t)
        assert self.agent.close(timeout=20, reason=reason)

    def job_ended(self, t: float) -> None:
        self.scheduler.job_ended("succeeded", ts=T0 + t)
        assert self.scheduler.close(timeout=20)


def _ns(t: float) -> int:
    return round((T0 + t) * 1e9)


class OtelHooks:
    """The same timeline through the OpenTelemetry SDK, one TracerProvider per attempt.

    Steps are summed into `ett.progress` spans of 30 s, cut by checkpoints, as the agent does.
    """

    def __init__(self, job: str, exporter_for: Callable[[], SpanExporter]) -> None:
        self.job, self.exporter_for = job, exporter_for
        self.provider: TracerProvider | None = None
        self.window: tuple[float, int] | None = None
        self.last: tuple[float, int] | None = None
        self.attempt_span: Any = None
        self.tracer: Any = None
        self.errored = False

    def _provider(self, attempt: int | None) -> Any:
        attrs: dict[str, Any] = {"ett.job.id": self.job, "ett.model": "ranker", "ett.gpus": 8}
        if attempt is not None:
            attrs["ett.attempt"] = attempt
        provider = TracerProvider(resource=Resource.create(attrs))
        provider.add_span_processor(BatchSpanProcessor(self.exporter_for()))
        return provider

    def _span(self, name: str, s: float, e: float, **attrs: Any) -> None:
        span = self.tracer.start_span(name, start_time=_ns(s), attributes=attrs or None)
        span.end(end_time=_ns(e))

    def submitted(self, t: float) -> None:
        provider = self._provider(None)
        provider.get_tracer("scheduler").start_span("ett.job_submitted", start_time=_ns(t)).end(
            end_time=_ns(t)
        )
        provider.shutdown()

    def attempt_start(self, a: int, t: float) -> None:
        self.provider = self._provider(a)
        self.tracer = self.provider.get_tracer("trainer")
        self.attempt_span = self.tracer.start_span("ett.attempt", start_time=_ns(t))
        self.window = self.last = None

    def phase(self, name: str, s: float, e: float) -> None:
        self._span(name, s, e)

    def _close_window(self, at: float | None) -> None:
        if self.window is not None and self.last is not None and self.last[1] > self.window[1]:
            end = self.last[0] if at is None else max(at, self.last[0])
            self._span("ett.progress", self.window[0], end, **{
                "ett.cursor_start": self.window[1], "ett.cursor_end": self.last[1],
                "ett.steps": self.last[1] - self.window[1]})  # fmt: skip
        self.window = None

    def step(self, t: float, cursor: int) -> None:
        if self.window is None:
            self.window = (t, cursor)
        elif t - self.window[0] >= 30:
            self.last = (t, cursor)
            self._close_window(None)
            self.window = (t, cursor)
        self.last = (t, cursor)

    def checkpoint(self, s: float, e: float, cursor: int) -> None:
        self._close_window(s)
        self._span("ett.checkpoint", s, e, **{"ett.cursor": cursor})
        if self.last is not None:
            self.window = (e, self.last[1])

    def failure(self, t: float, kind: str) -> None:
        self.errored = True

    def attempt_end(self, t: float, reason: str) -> None:
        assert self.provider is not None
        self._close_window(None)
        if self.errored:
            self.attempt_span.set_status(Status(StatusCode.ERROR, "RuntimeError: boom"))
        self.attempt_span.end(end_time=_ns(t))
        self.errored = False
        assert self.provider.force_flush(20_000)
        self.provider.shutdown()

    def job_ended(self, t: float) -> None:
        provider = self._provider(None)
        span = provider.get_tracer("scheduler").start_span(
            "ett.job_ended", start_time=_ns(t), attributes={"ett.job.status": "succeeded"}
        )
        span.end(end_time=_ns(t))
        provider.shutdown()


class OtlpJsonExporter(SpanExporter):
    """The SDK's spans in OTLP's JSON encoding (the SDK's HTTP exporter speaks protobuf only).

    The SDK's own encoder builds the ExportTraceServiceRequest; the JSON is protobuf's JSON
    mapping with the OTLP deviation (hex trace and span ids), gzip-compressed.
    """

    def __init__(self, endpoint: str, token: str) -> None:
        self.endpoint, self.token = endpoint, token
        self.answers: list[dict[str, Any]] = []

    def export(self, spans: Any) -> SpanExportResult:
        doc = json_format.MessageToDict(encode_spans(spans))
        for rs in doc.get("resourceSpans", []):
            for ss in rs.get("scopeSpans", []):
                for s in ss.get("spans", []):
                    for key in ("traceId", "spanId", "parentSpanId"):
                        if key in s:
                            s[key] = base64.b64decode(s[key]).hex()
        import gzip

        request = urllib.request.Request(
            self.endpoint,
            data=gzip.compress(json.dumps(doc).encode()),
            headers={"Content-Type": "application/json", "Content-Encoding": "gzip",
                     "Authorization": f"Bearer {self.token}"},
            method="POST",
        )  # fmt: skip
        with urllib.request.urlopen(request, timeout=30) as answer:
            self.answers.append(json.loads(answer.read()))
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        """Nothing to release."""


def test_otel_sdk_jobs_equal_the_agents_to_one_second(
    live: LiveServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # On a fake clock the agent's real process start means nothing: no process_start span.
    monkeypatch.setattr("trainer_agent.agent.process_start_time", lambda: None)
    timeline(AgentHooks(live, "twin-agent", tmp_path / "spool"))
    endpoint = f"{live.url}/v1/traces"
    timeline(OtelHooks("twin-otlp-pb", lambda: OTLPSpanExporter(
        endpoint=endpoint, headers={"Authorization": f"Bearer {live.token}"})))  # fmt: skip
    json_exporters: list[OtlpJsonExporter] = []

    def json_exporter() -> SpanExporter:
        json_exporters.append(OtlpJsonExporter(endpoint, live.token))
        return json_exporters[-1]

    timeline(OtelHooks("twin-otlp-json", json_exporter))
    assert all(a == {} for e in json_exporters for a in e.answers), "nothing may be rejected"
    agent = settled(live, "twin-agent", want_status="succeeded")
    assert agent["l1"]["nof"] == 1 and agent["wasted"]["replay"] > 0
    for job in ("twin-otlp-pb", "twin-otlp-json"):
        other = settled(live, job, want_status="succeeded")
        assert differences(agent, other) == [], (job, agent["components"], other["components"])
    assert live.get("/api/v1/events/rejected?job_id=twin-otlp-pb") == []
