"""Ingest throughput: POST /api/v1/events (batches of 1,000) into Postgres vs COPY of the same rows.

Runs a real uvicorn server on 127.0.0.1 (recompute and alert workers off, so ingest alone is
measured), posts N events over HTTP, then COPYs the same normalized rows into the same table.
Interleaves rounds of each and prints the medians and their ratio (the target: >= 20,000 events/s and >= 1/3 of COPY).
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

import httpx
import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from backend.events.store import event_time  # noqa: E402
from benchmarks._pg import scratch_postgres  # noqa: E402
from ingest.schema import validate_event  # noqa: E402

T0 = 1_777_000_000.0


def make_events(n: int, jobs: int = 200, tag: str = "") -> list[dict]:
    """A realistic mix: progress windows, phases, checkpoints, heartbeats over many jobs."""
    out = []
    for i in range(n):
        job = f"bench-job{tag}-{i % jobs}"
        t = T0 + i * 0.5
        kind = i % 10
        base = {"event_id": f"ev{tag}-{i:09d}", "job_id": job, "attempt": 0}
        if kind < 6:
            out.append(
                {
                    **base,
                    "type": "progress",
                    "start": t,
                    "end": t + 30.0,
                    "cursor_start": float(i * 100),
                    "cursor_end": float(i * 100 + 100),
                    "steps": 50,
                }
            )
        elif kind < 8:
            out.append(
                {
                    **base,
                    "type": "phase",
                    "phase": "trainer_init.process_group",
                    "start": t,
                    "end": t + 5.0,
                }
            )
        elif kind == 8:
            out.append(
                {
                    **base,
                    "type": "checkpoint",
                    "start": t,
                    "blocking_end": t + 3.0,
                    "committed": t + 20.0,
                    "cursor": float(i * 100),
                    "bytes": 10**9,
                }
            )
        else:
            out.append({**base, "type": "heartbeat", "ts": t})
    return out


def free_port() -> int:
    """An unused TCP port on 127.0.0.1."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(url: str) -> tuple[subprocess.Popen, str, str]:
    """A real `ett serve` (workers off) on a free port, its base URL and an ingest token."""
    env = {**os.environ, "ETT_DATABASE_URL": url, "ETT_LOG_LEVEL": "warning"}
    ett = str(Path(sys.executable).with_name("ett"))
    token = (
        subprocess.run(
            [ett, "token", "create", "--name", "bench", "--scope", "ingest"],
            env=env,
            check=True,
            capture_output=True,
            text=True,
        )
        .stdout.strip()
        .splitlines()[-1]
    )
    port = free_port()
    server = subprocess.Popen(
        [ett, "serve", "--host", "127.0.0.1", "--port", str(port), "--no-workers"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    base = f"http://127.0.0.1:{port}"
    for _ in range(100):
        try:
            if httpx.get(f"{base}/healthz", timeout=1).status_code == 200:
                break
        except httpx.HTTPError:
            time.sleep(0.2)
    return server, base, token


def bench_post(base: str, token: str, events: list[dict], batch: int) -> float:
    """Events per second through the HTTP API."""
    bodies = [
        json.dumps({"events": events[i : i + batch]}).encode() for i in range(0, len(events), batch)
    ]
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
    with httpx.Client(base_url=base, headers=headers, timeout=60) as client:
        client.post("/api/v1/events", content=json.dumps({"events": []}).encode())
        start = time.perf_counter()
        accepted = 0
        for body in bodies:
            r = client.post("/api/v1/events", content=body)
            r.raise_for_status()
            accepted += r.json()["accepted"]
        elapsed = time.perf_counter() - start
    assert accepted == len(events), (accepted, len(events))
    return len(events) / elapsed


def _truncate(url: str) -> None:
    with psycopg.connect(url.replace("postgresql+psycopg://", "postgresql://")) as conn:
        conn.execute("TRUNCATE raw_events, jobs CASCADE")


def bench_copy(url: str, events: list[dict]) -> float:
    """Events per second with COPY of the same normalized rows (the ceiling)."""
    dsn = url.replace("postgresql+psycopg://", "postgresql://")
    now = time.time()
    with psycopg.connect(dsn) as conn:
        conn.execute("TRUNCATE raw_events")
        conn.commit()
        start = time.perf_counter()
        normalized = [validate_event(e) for e in events]
        with (
            conn.cursor() as cur,
            cur.copy(
                "COPY raw_events (event_id, job_id, type, attempt, ts, received_at, payload) "
                "FROM STDIN"
            ) as copy,
        ):
            for ev in normalized:
                copy.write_row(
                    (
                        ev["event_id"],
                        ev["job_id"],
                        ev["type"],
                        ev["attempt"],
                        event_time(ev),
                        now,
                        json.dumps(ev),
                    )
                )
        conn.commit()
        elapsed = time.perf_counter() - start
    return len(events) / elapsed


def main() -> None:
    """Run both measurements in one scratch database and print the comparison."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--events", type=int, default=100_000)
    parser.add_argument("--batch", type=int, default=1_000)
    parser.add_argument("--rounds", type=int, default=3, help="interleaved POST/COPY rounds")
    args = parser.parse_args()
    posts, copies = [], []
    with scratch_postgres() as url:
        server, base, token = start_server(url)
        try:
            for r in range(args.rounds):
                events = make_events(args.events, tag=f"r{r}")
                _truncate(url)
                posts.append(bench_post(base, token, events, args.batch))
                copies.append(bench_copy(url, events))
        finally:
            server.terminate()
            server.wait(10)
    post_rate, copy_rate = statistics.median(posts), statistics.median(copies)
    print(f"events: {args.events} per round, batch: {args.batch}, rounds: {args.rounds}")
    print(
        f"POST /api/v1/events: {post_rate:,.0f} events/s (median; rounds: "
        f"{', '.join(f'{p:,.0f}' for p in posts)})"
    )
    print(
        f"COPY (ceiling):      {copy_rate:,.0f} events/s (median; rounds: "
        f"{', '.join(f'{c:,.0f}' for c in copies)})"
    )
    print(f"ratio POST/COPY:     {post_rate / copy_rate:.2f}")
    ok = post_rate >= 20_000 and post_rate >= copy_rate / 3
    print("target (>= 20,000/s and >= 1/3 of COPY):", "met" if ok else "NOT met")


if __name__ == "__main__":
    main()
