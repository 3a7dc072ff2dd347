"""How long `ett demo` takes to load its fleet into a fresh embedded SQLite database.

Runs the same steps as the command (migrate, count, ingest in batches of 10,000, recompute every
job, annotations, the SLOs' compliance history) without serving. `--full` measures the 520-model
fleet too (several minutes).
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time

from backend import migrate
from backend.config import Settings
from backend.db import Database
from backend.demo.command import DEFAULT_DAYS, DEFAULT_MODELS, FULL_MODELS
from backend.demo.fleet import FleetSpec, count_events, fleet_annotations, fleet_events
from backend.demo.loader import backfill_slo_history, load_in_process, store_annotations


def measure(models: int) -> dict[str, float]:
    """Load one fleet of `models` models into a new SQLite file; return the timings."""
    with tempfile.TemporaryDirectory() as home:
        url = f"sqlite:///{home}/ett.db"
        started = time.perf_counter()
        migrate.upgrade(url)
        database = Database(url)
        spec = FleetSpec(models=models, days=DEFAULT_DAYS, now=time.time())
        total = count_events(spec)
        prepared = time.perf_counter() - started
        settings = Settings(home=home, database_url=url)
        report = load_in_process(
            database, settings, fleet_events(spec), total_events=total, now=spec.now, progress=False
        )
        began = time.perf_counter()
        store_annotations(database, fleet_annotations(spec))
        backfill_slo_history(database, settings, spec.start, spec.now, progress=False)
        history_s = time.perf_counter() - began
        wall = time.perf_counter() - started
        size_mb = os.path.getsize(f"{home}/ett.db") / 1e6
        database.dispose()
    assert report.accepted == report.sent == total and not report.rejected
    return {
        "models": models,
        "jobs": report.jobs,
        "events": report.sent,
        "prepare_s": prepared,
        "ingest_s": report.ingest_s,
        "recompute_s": report.recompute_s,
        "history_s": history_s,
        "total_s": wall,
        "db_mb": size_mb,
    }


def main() -> None:
    """Print one table row per fleet size."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--full", action="store_true", help=f"also the {FULL_MODELS}-model fleet")
    args = parser.parse_args()
    sizes = [DEFAULT_MODELS] + ([FULL_MODELS] if args.full else [])
    print(f"load average at start: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    print(
        "| models | jobs | events | migrate+count s | ingest s | ETT% s | SLO history s "
        "| total s | SQLite MB |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for models in sizes:
        r = measure(models)
        print(
            f"| {r['models']} | {r['jobs']:,} | {r['events']:,} | {r['prepare_s']:.1f} | "
            f"{r['ingest_s']:.1f} | {r['recompute_s']:.1f} | {r['history_s']:.1f} | "
            f"{r['total_s']:.1f} | {r['db_mb']:.0f} |"
        )
    print(f"load average at end: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
