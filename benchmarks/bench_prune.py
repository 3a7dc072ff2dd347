"""`ett db prune` on Postgres while ingest runs: ingest's latency during a prune, against without.

Loads `--months` old months of finished jobs (`--jobs` per month, each a job of 7 events) into
the partitioned raw_events and computes them, then measures batches of new events POSTed
through ingest (one thread, batches of `--batch` events) twice: alone (the baseline of the same
run) and while `prune_raw` drops those months. Prints p50, p99 and max batch latency of each,
the prune's time and the months it dropped (issue 24 item 7: an ingest waited 14.6 s behind a
prune before each month was detached in its own short transaction).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import threading
import time
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from backend.db import Database  # noqa: E402
from backend.events import retention  # noqa: E402
from backend.results import recompute  # noqa: E402
from benchmarks._pg import scratch_postgres  # noqa: E402
from ingest.service import ingest_batch  # noqa: E402
from tests.backend.alerts.fleet import job_events  # noqa: E402

WINDOW = (0.0, 1e11)


def _load(db: Database, months: int, per_month: int, now: float) -> None:
    for m in range(months):
        t0 = datetime(2024, 1 + m, 5, tzinfo=UTC).timestamp()
        for k in range(0, per_month, 200):
            events = [
                ev
                for j in range(k, min(k + 200, per_month))
                for ev in job_events(f"old-{m}-{j}", "bench-m", t0 + j * 60)
            ]
            with db.session() as s:
                ingest_batch(db_session=s, events=events, token=None, now=t0, time_window=WINDOW)
                s.commit()
    with db.session() as s:
        recompute.recompute_all(db_session=s, progress=False, now=now)


def _ingest_for(db: Database, stop: threading.Event, batch: int, tag: str) -> list[float]:
    lat, n = [], 0
    while not stop.is_set():
        now = time.time()
        events = [
            {
                "event_id": f"{tag}-{n}-{i}",
                "job_id": f"{tag}-{n % 50}",
                "type": "heartbeat",
                "attempt": 0,
                "ts": now - 1,
            }
            for i in range(batch)
        ]
        started = time.perf_counter()
        with db.session() as s:
            ingest_batch(db_session=s, events=events, token=None, now=now)
            s.commit()
        lat.append(time.perf_counter() - started)
        n += 1
    return lat


def _run(db: Database, batch: int, tag: str, seconds: float | None, work: object = None) -> dict:
    stop, out = threading.Event(), {}
    t = threading.Thread(target=lambda: out.update(lat=_ingest_for(db, stop, batch, tag)))
    t.start()
    took = None
    if work is None:
        time.sleep(seconds or 5.0)
    else:
        time.sleep(1.0)
        started = time.perf_counter()
        work()  # type: ignore[operator]
        took = time.perf_counter() - started
        time.sleep(1.0)
    stop.set()
    t.join()
    lat = sorted(out["lat"])
    p99 = lat[min(len(lat) - 1, int(0.99 * len(lat)))]
    return {
        "batches": len(lat),
        "p50": statistics.median(lat),
        "p99": p99,
        "max": lat[-1],
        "took": took,
    }


def main() -> None:
    """Run the benchmark and print its numbers (JSON, then a Markdown table)."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--months", type=int, default=3)
    ap.add_argument("--jobs", type=int, default=1000, help="finished jobs per old month")
    ap.add_argument("--batch", type=int, default=50, help="events per ingest batch")
    args = ap.parse_args()
    now = time.time()
    with scratch_postgres("ett_bench_prune") as url:
        db = Database(url)
        with db.engine.begin() as conn:
            for m in range(args.months):
                retention.create_partition(conn, 202401 + m)
        _load(db, args.months, args.jobs, now)
        base = _run(db, args.batch, "alone", 6.0)
        report: dict = {}

        def prune() -> None:
            with db.session() as s:
                r = retention.prune_raw(db_session=s, older_than_s=90 * 86_400.0, now=now)
                s.commit()
            report.update(dropped=r.dropped, jobs=len(r.jobs_pruned), busy=r.busy)

        during = _run(db, args.batch, "during", None, prune)
        db.dispose()
    result = {"alone": base, "during_prune": during, **report, "rows": 7 * args.jobs * args.months}
    print(json.dumps(result))
    print()
    print("| ingest | batches | p50 (s) | p99 (s) | max (s) | prune (s) | months dropped | jobs |")
    print("|---|---|---|---|---|---|---|---|")
    for name, r in (("alone", base), ("during prune", during)):
        extra = (
            f"{r['took']:.2f} | {len(report['dropped'])} | {report['jobs']}"
            if r["took"] is not None
            else "- | - | -"
        )
        print(
            f"| {name} | {r['batches']} | {r['p50']:.3f} | {r['p99']:.3f} | {r['max']:.3f} | "
            f"{extra} |"
        )


if __name__ == "__main__":
    main()
