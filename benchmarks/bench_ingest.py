"""Ingest throughput: POST /api/v1/events (batches of 1,000) into Postgres vs COPY of the same rows.

Runs a real uvicorn server on 127.0.0.1 (recompute and alert workers off, so ingest alone is
measured), posts N events over HTTP, then COPYs the same normalized rows into the same table.
Interleaves rounds of each and prints the medians and their ratio (the target: >= 20,000
events/s and >= 1/2 of COPY). `--baseline REV` runs the same rounds, interleaved, against the
code and schema of git revision REV too (default 56ffcb2, the last commit before migration 0011
partitioned raw_events), in its own scratch database.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from backend.events.retention import month_of  # noqa: E402
from backend.events.store import event_time  # noqa: E402
from benchmarks._pg import PG_ADMIN_URL, _admin, scratch_postgres  # noqa: E402
from ingest.schema import validate_event  # noqa: E402

T0 = 1_777_000_000.0
REPO = Path(__file__).resolve().parents[1]
# The last commit before migration 0011 (raw_events partitioned by job_month).
BEFORE_PARTITIONS = "56ffcb2"


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


def _ett(tree: Path | None) -> tuple[list[str], dict[str, str], Path | None]:
    """The `ett` command of this tree, or of an exported tree (run from it, on this venv)."""
    if tree is None:
        return [str(Path(sys.executable).with_name("ett"))], {}, None
    return [sys.executable, "-m", "backend.cli"], {"PYTHONPATH": str(tree)}, tree


def start_server(url: str, tree: Path | None = None) -> tuple[subprocess.Popen, str, str]:
    """A real `ett serve` (workers off) on a free port, its base URL and an ingest token."""
    ett, extra, cwd = _ett(tree)
    env = {**os.environ, "ETT_DATABASE_URL": url, "ETT_LOG_LEVEL": "warning", **extra}
    token = (
        subprocess.run(
            [*ett, "token", "create", "--name", "bench", "--scope", "ingest"],
            env=env,
            cwd=cwd,
            check=True,
            capture_output=True,
            text=True,
        )
        .stdout.strip()
        .splitlines()[-1]
    )
    port = free_port()
    server = subprocess.Popen(
        [*ett, "serve", "--host", "127.0.0.1", "--port", str(port), "--no-workers"],
        env=env,
        cwd=cwd,
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
    else:
        server.terminate()
        raise SystemExit(f"ett serve on port {port} did not answer /healthz within 20 s")
    return server, base, token


@contextmanager
def exported_tree(rev: str) -> Iterator[Path]:
    """The repository's files at git revision `rev`, in a temporary directory."""
    with tempfile.TemporaryDirectory(prefix="ett_bench_rev_") as tmp:
        archive = subprocess.run(
            ["git", "archive", rev], cwd=REPO, check=True, capture_output=True
        ).stdout
        subprocess.run(["tar", "-x", "-C", tmp], input=archive, check=True)
        yield Path(tmp)


@contextmanager
def scratch_postgres_at(tree: Path) -> Iterator[str]:
    """A new Postgres database migrated by the exported tree's own migrations; dropped after."""
    name = f"ett_bench_rev_{os.getpid()}_{int(time.time())}"
    _admin(f'CREATE DATABASE "{name}"')
    url = PG_ADMIN_URL.rsplit("/", 1)[0] + "/" + name
    try:
        subprocess.run(
            [sys.executable, "-c", f"from backend import migrate; migrate.upgrade({url!r})"],
            cwd=tree,
            env={**os.environ, "PYTHONPATH": str(tree)},
            check=True,
        )
        yield url
    finally:
        _admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


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
    month = month_of(now)  # every job is new: its partition is the month it was first seen
    with psycopg.connect(dsn) as conn:
        conn.execute("TRUNCATE raw_events")
        # A schema from before migration 0011 has no job_month column.
        partitioned = conn.execute(
            "SELECT 1 FROM information_schema.columns "
            "WHERE table_name = 'raw_events' AND column_name = 'job_month'"
        ).fetchone()
        conn.commit()
        columns = "event_id, job_id, type, attempt, ts, received_at, payload"
        if partitioned:
            columns += ", job_month"
        start = time.perf_counter()
        normalized = [validate_event(e) for e in events]
        with (
            conn.cursor() as cur,
            cur.copy(f"COPY raw_events ({columns}) FROM STDIN") as copy,
        ):
            for ev in normalized:
                row = (
                    ev["event_id"],
                    ev["job_id"],
                    ev["type"],
                    ev["attempt"],
                    event_time(ev),
                    now,
                    json.dumps(ev),
                )
                copy.write_row((*row, month) if partitioned else row)
        conn.commit()
        elapsed = time.perf_counter() - start
    return len(events) / elapsed


def _rates(label: str, posts: list[float], copies: list[float]) -> tuple[float, float]:
    post_rate, copy_rate = statistics.median(posts), statistics.median(copies)
    print(
        f"{label} POST /api/v1/events: {post_rate:,.0f} events/s (median; rounds: "
        f"{', '.join(f'{p:,.0f}' for p in posts)})"
    )
    print(
        f"{label} COPY (ceiling):      {copy_rate:,.0f} events/s (median; rounds: "
        f"{', '.join(f'{c:,.0f}' for c in copies)})"
    )
    print(f"{label} ratio POST/COPY:     {post_rate / copy_rate:.2f}")
    # Each round's POST and COPY run back to back: their ratio cancels the machine's drift
    # between rounds, which moves both by up to a third on a shared machine.
    paired = [p / c for p, c in zip(posts, copies, strict=True)]
    print(
        f"{label} ratio per round:     {statistics.median(paired):.2f} (median; rounds: "
        f"{', '.join(f'{r:.2f}' for r in paired)})"
    )
    return post_rate, copy_rate


def main() -> None:
    """Run both measurements in one scratch database (and the baseline's) and compare."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--events", type=int, default=100_000, help="events per round")
    parser.add_argument("--batch", type=int, default=1_000, help="events per POST")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved POST/COPY rounds")
    parser.add_argument(
        "--baseline",
        nargs="?",
        action="append",
        const=BEFORE_PARTITIONS,
        metavar="REV",
        help="also measure the code and schema of git revision REV, rounds interleaved "
        f"(default {BEFORE_PARTITIONS}, the last commit before migration 0011); repeatable",
    )
    args = parser.parse_args()
    baselines = list(dict.fromkeys(args.baseline or []))
    sides: dict[str, tuple[list[float], list[float]]] = {"after": ([], [])}
    loads: list[float] = []
    with contextlib.ExitStack() as stack:
        targets = {"after": (stack.enter_context(scratch_postgres()), None)}
        for rev in baselines:
            label = f"before ({rev})"
            sides[label] = ([], [])
            tree = stack.enter_context(exported_tree(rev))
            targets[label] = (stack.enter_context(scratch_postgres_at(tree)), tree)
        servers = {}
        try:
            for label, (url, tree) in targets.items():
                servers[label] = start_server(url, tree)
            for r in range(args.rounds):
                for label, (url, _tree) in targets.items():
                    events = make_events(args.events, tag=f"r{r}")
                    _truncate(url)
                    base, token = servers[label][1], servers[label][2]
                    sides[label][0].append(bench_post(base, token, events, args.batch))
                    sides[label][1].append(bench_copy(url, events))
                    loads.append(os.getloadavg()[0])
        finally:
            for server, _base, _token in servers.values():
                server.terminate()
                server.wait(10)
    print(f"events: {args.events} per round, batch: {args.batch}, rounds: {args.rounds}")
    print(f"load average (1 min) during the rounds: {min(loads):.1f} to {max(loads):.1f}")
    post_rate, copy_rate = _rates("after: ", *sides["after"])
    for label in sides:
        if label == "after":
            continue
        before_post, before_copy = _rates(f"{label}:", *sides[label])
        print(
            f"after/{label}: POST {post_rate / before_post:.2f}, COPY {copy_rate / before_copy:.2f}"
        )
    ok = post_rate >= 20_000 and post_rate >= copy_rate / 2
    print("target (>= 20,000/s and >= 1/2 of COPY):", "met" if ok else "NOT met")


if __name__ == "__main__":
    main()
