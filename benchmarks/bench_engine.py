"""Engine throughput for one job at 1k to 1M events (run: python benchmarks/bench_engine.py).

`--scaling REV` is issue 29's check: the per-event CPU cost at each size, in order and
shuffled, of this tree and of revision REV interleaved in one run, their medians over the
repeats, the ratio of the largest size to the smallest, and the peak memory of one call.
"""

from __future__ import annotations

import argparse
import importlib
import json
import random
import re
import statistics
import subprocess
import sys
import tempfile
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any

from backend.ett.engine import compute_job


def synthetic_job(n_events: int, *, seed: int = 0, shuffled: bool = True) -> list[dict[str, Any]]:
    """A realistic long job: restarts, init phases, progress windows, checkpoints, heartbeats."""
    rng = random.Random(seed)
    events: list[dict[str, Any]] = []

    def add(etype: str, **fields: Any) -> None:
        events.append({"event_id": f"e{len(events)}", "job_id": "bench", "type": etype, **fields})

    add("job_submitted", ts=0.0, model="bench", gpus=128, labels={"owner": "t"})
    t = 0.0
    cursor = 0.0
    attempt = 0
    n_attempts = max(1, n_events // 20_000)
    per_attempt = (n_events - 2) // n_attempts
    for attempt in range(n_attempts):
        t += rng.uniform(60, 600)
        add("attempt_started", attempt=attempt, ts=t, host="h")
        for name, dur in (("hardware_setup", 90), ("trainer_init", 600), ("pt2_compile", 1200)):
            add("phase", attempt=attempt, phase=name, start=t, end=t + dur)
            t += dur
        if attempt:
            cursor = max(0.0, cursor - rng.uniform(500, 2000))  # restore rewinds the cursor
        budget = per_attempt - 6
        while budget > 0:
            r = rng.random()
            if r < 0.7:
                dt = rng.uniform(5, 15)
                dc = 0.0 if rng.random() < 0.02 else dt * 10
                add(
                    "progress",
                    attempt=attempt,
                    start=t,
                    end=t + dt,
                    cursor_start=cursor,
                    cursor_end=cursor + dc,
                    steps=int(dc),
                )
                t += dt
                cursor += dc
            elif r < 0.95:
                add("heartbeat", attempt=attempt, ts=t)
            else:
                add(
                    "checkpoint",
                    attempt=attempt,
                    start=t,
                    blocking_end=t + 20,
                    committed=t + 60,
                    cursor=cursor,
                )
                t += 20
            budget -= 1
        if attempt + 1 < n_attempts:
            add("failure", attempt=attempt, ts=t, kind="infra")
            add("attempt_ended", attempt=attempt, ts=t + 30, reason="failure")
        else:
            add("attempt_ended", attempt=attempt, ts=t + 30, reason="completed")
        t += 30
    add("job_ended", ts=t + 60, status="succeeded")
    if shuffled:
        rng.shuffle(events)  # arrival order must not matter, and sorting it is part of the cost
    # Fresh dicts in arrival order, as the service gets them when it loads raw_events by id.
    return json.loads(json.dumps(events))


def bench(n_events: int, repeats: int, *, shuffled: bool) -> tuple[int, float, float, float]:
    """Best wall time, median wall time and best CPU time of compute_job on one synthetic job."""
    events = synthetic_job(n_events, shuffled=shuffled)
    walls = []
    cpus = []
    for _ in range(repeats):
        c0 = time.process_time()
        t0 = time.perf_counter()
        compute_job(events, now=1e12)
        walls.append(time.perf_counter() - t0)
        cpus.append(time.process_time() - c0)
    return len(events), min(walls), statistics.median(walls), min(cpus)


# The pure engine's modules; a revision that lacks one (livefacts is newer) is copied without it.
ENGINE_MODULES = ("catalogue", "timeline", "partition", "level1", "livefacts", "engine")
REPO = Path(__file__).resolve().parent.parent


def load_baseline_engine(rev: str, into: Path) -> Callable[..., Any]:
    """The engine as it was at git revision `rev`, imported as a separate package."""
    pkg = into / ("ett_baseline_" + re.sub(r"\W", "_", rev))
    pkg.mkdir(parents=True, exist_ok=True)
    (pkg / "__init__.py").write_text("")
    present = subprocess.run(
        ["git", "ls-tree", "--name-only", rev, "backend/ett/"],
        cwd=REPO,
        check=True,
        capture_output=True,
        text=True,
    ).stdout.split()
    for name in ENGINE_MODULES:
        if f"backend/ett/{name}.py" not in present:
            continue
        source = subprocess.run(
            ["git", "show", f"{rev}:backend/ett/{name}.py"],
            cwd=REPO,
            check=True,
            capture_output=True,
            text=True,
        ).stdout
        (pkg / f"{name}.py").write_text(source.replace("backend.ett.", f"{pkg.name}."))
    sys.path.insert(0, str(into))
    return importlib.import_module(f"{pkg.name}.engine").compute_job


def compare(rev: str, sizes: list[int], repeats: int) -> None:
    """Before (git rev) vs after (this tree), interleaved in one process on the same events."""
    with tempfile.TemporaryDirectory() as tmp:
        old = load_baseline_engine(rev, Path(tmp))
        print(
            f"{'arrival':>9} {'events':>8} {'before/s':>10} {'after/s':>10} {'ratio':>6} "
            f"{'before/cpu-s':>12} {'after/cpu-s':>12} {'cpu ratio':>9}"
        )
        for shuffled in (False, True):
            for size in sizes:
                events = synthetic_job(size, shuffled=shuffled)
                wall = {"before": float("inf"), "after": float("inf")}
                cpu = dict(wall)
                for _ in range(repeats):
                    for label, fn in (("before", old), ("after", compute_job)):
                        c0 = time.process_time()
                        t0 = time.perf_counter()
                        fn(events, now=1e12)
                        wall[label] = min(wall[label], time.perf_counter() - t0)
                        cpu[label] = min(cpu[label], time.process_time() - c0)
                order = "shuffled" if shuffled else "in order"
                n = len(events)
                print(
                    f"{order:>9} {n:>8} {n / wall['before']:>10.0f} {n / wall['after']:>10.0f} "
                    f"{wall['before'] / wall['after']:>6.2f} {n / cpu['before']:>12.0f} "
                    f"{n / cpu['after']:>12.0f} {cpu['before'] / cpu['after']:>9.2f}"
                )


def bench_recompute(url: str, sizes: list[int], repeats: int) -> None:
    """Materialization: one job's raw events read, computed and stored (recompute.recompute_job)."""
    from sqlalchemy import insert

    from backend import migrate
    from backend.db import Database
    from backend.events.models import RawEvent
    from backend.jobs.models import Job
    from backend.results import recompute

    migrate.upgrade(url)
    db = Database(url)
    print(f"{'events':>8} {'best_s':>9} {'events/s':>10}   (recompute_job on {db.dialect})")
    for size in sizes:
        job_id = f"bench-{size}-{time.time_ns()}"
        events = synthetic_job(size)
        for ev in events:
            ev["job_id"] = job_id
            ev["event_id"] = f"{job_id}-{ev['event_id']}"
        with db.session() as s:
            s.execute(insert(Job).values(job_id=job_id, dirty=True, created_at=0.0, updated_at=0.0))
            rows = [
                {
                    "event_id": ev["event_id"],
                    "job_id": job_id,
                    "type": ev["type"],
                    "attempt": ev.get("attempt"),
                    "ts": ev.get("ts", ev.get("start")),
                    "received_at": 0.0,
                    "payload": ev,
                    "job_month": 197001,  # the month of created_at=0.0
                }
                for ev in events
            ]
            for i in range(0, len(rows), 5000):
                s.execute(insert(RawEvent), rows[i : i + 5000])
            s.commit()
        best = float("inf")
        for _ in range(repeats):
            with db.session() as s:
                t0 = time.perf_counter()
                recompute.recompute_job(db_session=s, job_id=job_id, now=1e12)
                s.commit()
                best = min(best, time.perf_counter() - t0)
        print(f"{len(events):>8} {best:>9.4f} {len(events) / best:>10.0f}")
    db.dispose()


def _peak_mib(fn: Callable[..., Any], events: list[dict[str, Any]]) -> float:
    """Peak memory one call allocates beyond its input (tracemalloc), in MiB."""
    tracemalloc.start()
    try:
        fn(events, now=1e12)
        return tracemalloc.get_traced_memory()[1] / 2**20
    finally:
        tracemalloc.stop()


def scaling(rev: str, sizes: list[int], repeats: int) -> None:
    """Per-event CPU (median of `repeats`) before (rev) and after, each size, both orders."""
    with tempfile.TemporaryDirectory() as tmp:
        old = load_baseline_engine(rev, Path(tmp))
        print(
            f"{'arrival':>9} {'events':>8} {'before us/ev':>12} {'after us/ev':>12} "
            f"{'before MiB':>10} {'after MiB':>10}"
        )
        for shuffled in (False, True):
            order = "shuffled" if shuffled else "in order"
            per_event: dict[str, list[float]] = {"before": [], "after": []}
            for size in sizes:
                events = synthetic_job(size, shuffled=shuffled)
                cpu: dict[str, list[float]] = {"before": [], "after": []}
                for _ in range(repeats):
                    for label, fn in (("before", old), ("after", compute_job)):
                        c0 = time.process_time()
                        fn(events, now=1e12)
                        cpu[label].append(time.process_time() - c0)
                n = len(events)
                med = {k: statistics.median(v) / n * 1e6 for k, v in cpu.items()}
                mib = {"before": _peak_mib(old, events), "after": _peak_mib(compute_job, events)}
                for k in per_event:
                    per_event[k].append(med[k])
                print(
                    f"{order:>9} {n:>8} {med['before']:>12.3f} {med['after']:>12.3f} "
                    f"{mib['before']:>10.1f} {mib['after']:>10.1f}",
                    flush=True,
                )
                del events
            ratio = {k: v[-1] / v[0] for k, v in per_event.items()}
            print(
                f"{order:>9} largest/smallest per event: before {ratio['before']:.2f}x, "
                f"after {ratio['after']:.2f}x (target <= 1.5x: "
                f"{'met' if ratio['after'] <= 1.5 else 'NOT met'})",
                flush=True,
            )


def main() -> None:
    """Print a table: events, best and median seconds, events per second."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--sizes", default="1000,10000,100000")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument(
        "--db", help="also time recompute_job through this database URL (it gets migrated)"
    )
    parser.add_argument(
        "--baseline",
        metavar="REV",
        help="time the engine of this git revision beside this tree's, in the same run "
        "(e.g. cb8b33b, the engine before SPEC revision 2)",
    )
    parser.add_argument(
        "--scaling",
        metavar="REV",
        help="per-event CPU and peak memory of this tree and of REV by size (issue 29: "
        "try --sizes 10000,100000,1000000 --repeats 3)",
    )
    args = parser.parse_args()
    if args.scaling:
        scaling(args.scaling, [int(x) for x in args.sizes.split(",")], args.repeats)
        return
    if args.baseline:
        compare(args.baseline, [int(x) for x in args.sizes.split(",")], args.repeats)
        return
    if args.db:
        sizes = [int(x) for x in args.sizes.split(",")]
        bench_recompute(args.db, sizes, max(1, args.repeats // 2))
        return
    # CPU time is the steadier figure on a shared machine; wall time is what a caller waits.
    print(
        f"{'arrival':>9} {'events':>8} {'best_s':>9} {'median_s':>9} {'cpu_s':>9} "
        f"{'events/s':>10} {'ev/cpu-s':>10} {'us/event':>9}"
    )
    growth = {}
    for shuffled in (False, True):
        per_event = []
        for size in (int(x) for x in args.sizes.split(",")):
            n, best, med, cpu = bench(size, args.repeats, shuffled=shuffled)
            order = "shuffled" if shuffled else "in order"
            per_event.append(cpu / n)
            print(
                f"{order:>9} {n:>8} {best:>9.4f} {med:>9.4f} {cpu:>9.4f} "
                f"{n / best:>10.0f} {n / cpu:>10.0f} {best / n * 1e6:>9.2f}"
            )
        growth[order] = per_event[-1] / per_event[0]
    # Linear in a job's size: CPU per event at the largest size within 1.5x of the smallest.
    print(
        "CPU per event, largest size / smallest: "
        + ", ".join(f"{k} {v:.2f}x" for k, v in growth.items())
        + (
            " (target <= 1.5x: met)"
            if max(growth.values()) <= 1.5
            else " (target <= 1.5x: NOT met)"
        )
    )


if __name__ == "__main__":
    main()
