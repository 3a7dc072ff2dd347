"""OTLP ingest vs the wire protocol: POST /v1/traces against POST /api/v1/events, same events.

The events of bench_ingest (progress windows, phases, checkpoints, heartbeats over 200 jobs) are
sent once as wire batches of 1,000 and once as OTLP exports of 1,000 spans in this project's
convention (protobuf, the OTel SDK's default), to one real `ett serve` on a scratch Postgres, in
interleaved rounds. Both store the same rows; the target is OTLP >= 1/2 of the wire protocol's
events per second. Prints the load average beside the figures.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

import httpx
import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (  # noqa: E402
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue  # noqa: E402

from benchmarks._pg import scratch_postgres  # noqa: E402
from benchmarks.bench_ingest import _truncate, bench_post, make_events, start_server  # noqa: E402


def _kv(key: str, value: object) -> KeyValue:
    if isinstance(value, float):
        return KeyValue(key=key, value=AnyValue(double_value=value))
    if isinstance(value, int):
        return KeyValue(key=key, value=AnyValue(int_value=value))
    return KeyValue(key=key, value=AnyValue(string_value=str(value)))


def to_export(events: list[dict]) -> bytes:
    """The events as one OTLP export in the ett.* convention (docs/OTLP.md)."""
    req = ExportTraceServiceRequest()
    spans = req.resource_spans.add().scope_spans.add().spans
    for i, ev in enumerate(events):
        span = spans.add()
        span.trace_id = ev["event_id"].encode().ljust(16, b"\0")[:16]
        span.span_id = i.to_bytes(8, "big")
        attrs = [_kv("ett.job.id", ev["job_id"])]
        start = ev.get("start", ev.get("ts"))
        end = ev.get("end", ev.get("blocking_end", start))
        if ev["type"] == "progress":
            span.name = "ett.progress"
            attrs += [_kv("ett.cursor_start", ev["cursor_start"]),
                      _kv("ett.cursor_end", ev["cursor_end"]), _kv("ett.steps", ev["steps"])]  # fmt: skip
        elif ev["type"] == "phase":
            span.name = ev["phase"]
        elif ev["type"] == "checkpoint":
            span.name = "ett.checkpoint"
            attrs += [_kv("ett.cursor", ev["cursor"]), _kv("ett.checkpoint.bytes", ev["bytes"]),
                      _kv("ett.checkpoint.committed", ev["committed"])]  # fmt: skip
        else:
            span.name = "ett.heartbeat"
        span.start_time_unix_nano = round(start * 1e9)
        span.end_time_unix_nano = round(end * 1e9)
        span.attributes.extend(attrs)
    return req.SerializeToString()


def bench_otlp(base: str, token: str, events: list[dict], batch: int) -> float:
    """Events (spans) per second through POST /v1/traces; every span must be taken."""
    bodies = [to_export(events[i : i + batch]) for i in range(0, len(events), batch)]
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/x-protobuf"}
    with httpx.Client(base_url=base, headers=headers, timeout=60) as client:
        client.post("/v1/traces", content=b"")
        start = time.perf_counter()
        for body in bodies:
            r = client.post("/v1/traces", content=body)
            r.raise_for_status()
            answer = ExportTraceServiceResponse.FromString(r.content)
            assert not answer.HasField("partial_success"), answer.partial_success.error_message
        elapsed = time.perf_counter() - start
    return len(events) / elapsed


def stored(url: str) -> int:
    with psycopg.connect(url.replace("postgresql+psycopg://", "postgresql://")) as conn:
        return int(conn.execute("SELECT count(*) FROM raw_events").fetchone()[0])


def main() -> None:
    """Interleaved rounds of both paths into one scratch database; print the ratio."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--events", type=int, default=50_000)
    parser.add_argument("--batch", type=int, default=1_000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    wire, otlp = [], []
    with scratch_postgres() as url:
        server, base, token = start_server(url)
        try:
            for r in range(args.rounds):
                events = make_events(args.events, tag=f"w{r}")
                _truncate(url)
                wire.append(bench_post(base, token, events, args.batch))
                _truncate(url)
                otlp.append(
                    bench_otlp(base, token, make_events(args.events, tag=f"o{r}"), args.batch)
                )
                assert stored(url) == args.events, "every span is one stored event"
        finally:
            server.terminate()
            server.wait(10)
    w, o = statistics.median(wire), statistics.median(otlp)
    print(f"events: {args.events} per round, batch: {args.batch}, rounds: {args.rounds}")
    print(f"load average: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print(
        f"POST /api/v1/events: {w:,.0f} events/s (median; {', '.join(f'{x:,.0f}' for x in wire)})"
    )
    print(
        f"POST /v1/traces:     {o:,.0f} events/s (median; {', '.join(f'{x:,.0f}' for x in otlp)})"
    )
    print(f"ratio OTLP/wire:     {o / w:.2f}")
    print("target (OTLP >= 1/2 of the wire protocol):", "met" if o >= w / 2 else "NOT met")


if __name__ == "__main__":
    main()
