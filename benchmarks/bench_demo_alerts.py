"""What replaying the alert evaluator adds to `ett demo`'s history step.

Loads the demo fleet once into a SQLite file, then times on fresh copies of it, alternately:
the SLO compliance history alone (`history.backfill`, the step before the replay existed) and
the step `ett demo` runs now (`loader.backfill_slo_history`: the same history from the replay,
the alert states stepped at each instant, the notices dispatched). Prints a Markdown table.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path

from sqlalchemy import func, select

from backend import migrate
from backend.alerts import history, store
from backend.alerts.models import AlertEpisode
from backend.config import Settings
from backend.db import Database
from backend.demo.command import DEFAULT_DAYS, DEFAULT_MODELS
from backend.demo.fleet import FleetSpec, fleet_events
from backend.demo.loader import backfill_slo_history, history_instants, load_in_process


def _timed(path: Path, spec: FleetSpec, replay: bool) -> tuple[float, int]:
    url = f"sqlite:///{path}"
    settings = Settings(home=path.parent, database_url=url)
    database = Database(url)
    started = time.perf_counter()
    if replay:
        backfill_slo_history(database, settings, spec.start, spec.now)
    else:
        with database.session() as s:
            store.sync_from_file(db_session=s, slo_file=store.slo_file_for(settings), now=spec.now)
            history.backfill(db_session=s, instants=history_instants(spec.start, spec.now))
            s.commit()
    took = time.perf_counter() - started
    with database.session() as s:
        episodes = int(s.scalar(select(func.count()).select_from(AlertEpisode)) or 0)
    database.dispose()
    return took, episodes


def main() -> None:
    """Load once, then time history-only and history-plus-replay `--runs` times each."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--models", type=int, default=DEFAULT_MODELS)
    parser.add_argument("--days", type=float, default=DEFAULT_DAYS)
    parser.add_argument("--runs", type=int, default=2)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as home:
        base = Path(home) / "loaded.db"
        url = f"sqlite:///{base}"
        migrate.upgrade(url)
        database = Database(url)
        spec = FleetSpec(models=args.models, days=args.days, now=time.time())
        report = load_in_process(
            database,
            Settings(home=home, database_url=url),
            fleet_events(spec),
            now=spec.now,
            progress=False,
        )
        database.dispose()
        instants = len(history_instants(spec.start, spec.now))
        print(f"load average at start: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
        print(
            f"fleet: {args.models} models, {args.days:g} days, {report.jobs:,} jobs; {instants} instants"
        )
        times: dict[bool, list[float]] = {False: [], True: []}
        episodes = 0
        for _ in range(args.runs):
            for replay in (False, True):
                copy = Path(home) / "run.db"
                shutil.copy(base, copy)
                took, n = _timed(copy, spec, replay)
                times[replay].append(took)
                episodes = max(episodes, n)
                copy.unlink()
        before, after = statistics.median(times[False]), statistics.median(times[True])
        print("| step | median s | runs |")
        print("|---|---|---|")
        print(
            f"| SLO history alone | {before:.1f} | {', '.join(f'{t:.1f}' for t in times[False])} |"
        )
        print(
            f"| history + alert replay | {after:.1f} | {', '.join(f'{t:.1f}' for t in times[True])} |"
        )
        print(f"replay adds {after - before:+.1f} s; {episodes} episodes")
        print(f"load average at end: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
