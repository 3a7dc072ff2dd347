"""The /metrics exporter on Postgres: what booking the ledger adds to a recompute, and a scrape.

Loads a demo fleet (default 20 models over 30 days) through ingest, then, interleaved for
`--rounds` rounds, recomputes every job twice: once with the ledger booking (the ledger emptied
first, so every job is a first booking) and once without it. The ratio of the medians is the
booking's cost relative to the same run's recompute. Then times `GET /metrics`'s database
collector (median of `--scrapes`) and counts the exported series.

`--flood N` then adds N models with N distinct owners, each with one submitted job, as any
ingest token could send them (issue 24 item 5), and scrapes again: the scrape's size, series
and time against the scrape of the same fleet before the flood (the baseline of the same run).
The team label is folded past ETT_METRICS_MAX_TEAMS, so the flood adds no series per owner.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

from prometheus_client import generate_latest
from sqlalchemy import delete, func, select

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import backend.fleet.rollups as rollups  # noqa: E402
from backend.alerts import exported as alerts_exported  # noqa: E402
from backend.config import Settings  # noqa: E402
from backend.db import Database  # noqa: E402
from backend.demo import loader  # noqa: E402
from backend.demo.fleet import FleetSpec, fleet_events  # noqa: E402
from backend.exporter.views import build_registry  # noqa: E402
from backend.fleet.models import LedgerEntry  # noqa: E402
from backend.jobs.models import Job  # noqa: E402
from benchmarks._pg import scratch_postgres  # noqa: E402
from ingest.service import ingest_batch  # noqa: E402


def _recompute(db: Database, settings: Settings, ids: list[str], *, book: bool) -> float:
    original = rollups.book_jobs
    if not book:
        rollups.book_jobs = lambda **_kw: 0  # type: ignore[assignment]
    else:
        with db.session() as s:
            s.execute(delete(LedgerEntry))
            s.commit()
    try:
        started = time.perf_counter()
        loader.recompute_jobs(db, settings, ids, progress=False)
        return time.perf_counter() - started
    finally:
        rollups.book_jobs = original


def _scrape(registry: object, n: int) -> tuple[list[float], bytes]:
    times, text = [], b""
    for _ in range(max(n, 1)):
        started = time.perf_counter()
        text = generate_latest(registry)  # type: ignore[arg-type]
        times.append(time.perf_counter() - started)
    return times, text


def _series(text: bytes) -> int:
    return sum(1 for line in text.decode().splitlines() if line and line[0] != "#")


def _flood(db: Database, settings: Settings, n: int) -> None:
    """N job_submitted events, each its own model and owner, through ingest in batches."""
    now = time.time()
    for k in range(0, n, 1000):
        events = [
            {
                "event_id": f"flood-{i}",
                "job_id": f"flood-{i}",
                "type": "job_submitted",
                "ts": now - 60,
                "model": f"flood-model-{i}",
                "gpus": 1,
                "labels": {"owner": f"flood-owner-{i}"},
            }
            for i in range(k, min(k + 1000, n))
        ]
        with db.session() as s:
            ingest_batch(db_session=s, events=events, token=None, now=now)
            s.commit()


def main() -> None:
    """Run the benchmark and print its numbers (JSON, then a Markdown table)."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", type=int, default=20)
    ap.add_argument("--days", type=float, default=30.0)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--scrapes", type=int, default=7)
    ap.add_argument("--flood", type=int, default=0, help="models, each with its own owner")
    args = ap.parse_args()
    with scratch_postgres("ett_bench_metrics") as url:
        db = Database(url)
        settings = Settings(database_url=url)
        spec = FleetSpec(models=args.models, days=args.days, now=time.time(), benchmarks=False)
        events = list(fleet_events(spec))
        loader.load_in_process(db, settings, events, recompute=False, progress=False)
        with db.session() as s:
            ids = sorted(s.scalars(select(Job.job_id)))
        with_book, without = [], []
        for _ in range(args.rounds):
            without.append(_recompute(db, settings, ids, book=False))
            with_book.append(_recompute(db, settings, ids, book=True))
        registry = build_registry(settings, db, alerts=alerts_exported)
        scrapes, text = _scrape(registry, args.scrapes)
        with db.session() as s:
            rows = int(s.scalar(select(func.count()).select_from(LedgerEntry)) or 0)
        series = _series(text)
        flood: dict[str, float] = {}
        if args.flood:
            _flood(db, settings, args.flood)
            times, flooded = _scrape(registry, args.scrapes)
            flood = {
                "flood_models": args.flood,
                "flood_scrape_bytes": len(flooded),
                "flood_series": _series(flooded),
                "flood_scrape_s_median": statistics.median(times),
                "flood_scrape_s_max": max(times),
                "baseline_scrape_bytes": len(text),
                "flood_scrape_ratio": statistics.median(times) / statistics.median(scrapes),
            }
        result = {
            "jobs": len(ids),
            "events": len(events),
            "ledger_rows": rows,
            "recompute_s_without_ledger": statistics.median(without),
            "recompute_s_with_ledger": statistics.median(with_book),
            "ledger_cost_ratio": statistics.median(with_book) / statistics.median(without),
            "scrape_s_median": statistics.median(scrapes),
            "exported_series": series,
            **flood,
        }
        db.dispose()
    print(json.dumps(result))
    print()
    print(
        "| jobs | ledger rows | recompute without / with ledger (s) | ratio | scrape (s) | series |"
    )
    print("|---|---|---|---|---|---|")
    print(
        f"| {result['jobs']} | {rows} | {result['recompute_s_without_ledger']:.2f} / "
        f"{result['recompute_s_with_ledger']:.2f} | {result['ledger_cost_ratio']:.2f} | "
        f"{result['scrape_s_median']:.3f} | {series} |"
    )
    if flood:
        print()
        print("| flood models (owners) | scrape bytes | series | scrape median / max (s) | ratio |")
        print("|---|---|---|---|---|")
        print(
            f"| {args.flood:,} ({args.flood:,}) | {flood['flood_scrape_bytes']:,} | "
            f"{flood['flood_series']:,} | {flood['flood_scrape_s_median']:.2f} / "
            f"{flood['flood_scrape_s_max']:.2f} | {flood['flood_scrape_ratio']:.1f} |"
        )


if __name__ == "__main__":
    main()
