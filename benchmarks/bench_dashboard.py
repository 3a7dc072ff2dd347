"""Each dashboard page's time until its charts are drawn, in headless Chromium, on the demo fleet.

Loads the demo fleet (`ett demo`'s default size unless told otherwise) through the real ingest
path into a SQLite file, serves API and dashboard on one port under uvicorn, then opens every
page several times and measures from navigation until the page's charts have drawn their SVG.
Target: under 2 s per page. With --screenshots DIR it also saves a PNG of each page.

    .venv/bin/python benchmarks/bench_dashboard.py [--models 40] [--days 182] [--runs 5]
        [--db PATH] [--screenshots docs/screenshots]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from backend import migrate  # noqa: E402
from backend.app import create_app  # noqa: E402
from backend.config import Settings  # noqa: E402
from backend.db import Database  # noqa: E402
from tests.dashboard.browser import Browser, browser_available, serve  # noqa: E402

TARGET_S = 2.0


def load_fleet(database: Database, settings: Settings, models: int, days: float) -> int:
    """The demo fleet through ingest and the ETT recompute; returns the number of jobs."""
    from backend.demo import fleet, loader

    spec = fleet.FleetSpec(seed=7, models=models, days=days, now=time.time())
    report = loader.load_in_process(
        database,
        settings,
        fleet.fleet_events(spec),
        total_events=fleet.count_events(spec),
        now=spec.now,
    )
    loader.store_annotations(database, fleet.fleet_annotations(spec))
    loader.backfill_slo_history(database, settings, spec.start, spec.now)
    return report.jobs


def evaluate_alerts(database: Database, settings: Settings) -> None:
    """What `ett serve`'s evaluator does: the shipped SLOs, one evaluation, plus one silence."""
    from backend.alerts import service as alerts

    alerts.evaluate_once(db=database, settings=settings, release=True)
    now = time.time()
    with database.session() as s:
        if not alerts.list_silences(db_session=s):
            alerts.create_silence(
                db_session=s,
                owner="publishing",
                component=None,
                model=None,
                starts_at=now,
                ends_at=now + 7 * 86400,
                comment="standalone publishing rollout in progress",
                created_by="bench",
                max_duration_s=settings.silence_max_duration_s,
            )
            s.commit()


def pages(database: Database) -> list[tuple[str, str, int]]:
    """(name, path, charts drawn once loaded) for every page, on real ids from the fleet."""
    from sqlalchemy import func, select

    from backend.ett.models import JobResult

    with database.session() as s:
        busiest = s.execute(
            select(JobResult.model, func.count())
            .group_by(JobResult.model)
            .order_by(func.count().desc())
            .limit(1)
        ).first()
        failed = s.execute(
            select(JobResult.job_id).order_by(JobResult.nof.desc(), JobResult.job_id).limit(1)
        ).scalar_one()
    model = busiest[0] if busiest else "model-a"
    return [
        ("fleet", "/", 7),
        ("models (list)", "/model", 0),
        (f"model ({model})", f"/model?model={model}", 6),
        ("jobs (list)", "/job", 0),
        ("jobs (search)", f"/job?q={model[:6]}", 0),
        (f"job ({failed})", f"/job?job_id={failed}", 3),
        ("compare (6 pairs)", "/compare", 2),
        ("owners", "/owners", 1),
        ("plan", "/plan", 1),
        (f"plan ({model})", f"/plan?model={model}", 1),
    ]


def _task_s(browser: Browser) -> float:
    metrics = browser.driver.execute_cdp_cmd("Performance.getMetrics", {})["metrics"]
    return float(next(m["value"] for m in metrics if m["name"] == "TaskDuration"))


def measure(browser: Browser, url: str, charts: int) -> tuple[float, float, float]:
    """One load of a page: (wall s until its charts are drawn, server s, browser main-thread s).

    The server time is the longest dashboard callback (the page's layout); the browser time is
    Chromium's main-thread busy time (CDP TaskDuration), which CPU contention does not inflate
    the way it inflates wall time.
    """
    browser.get("about:blank")
    before = _task_s(browser)
    started = time.perf_counter()
    browser.get(url)
    browser.wait_for(".ett-main h1", timeout=60)
    if charts:
        browser.wait_for_graphs(charts, timeout=60)
    else:
        browser.wait_for(".dash-spreadsheet", timeout=60)
    wall = time.perf_counter() - started
    server_ms = browser.driver.execute_script(
        "return Math.max(0, ...performance.getEntriesByType('resource')"
        ".filter(e => e.name.includes('_dash-update-component')).map(e => e.duration))"
    )
    return wall, float(server_ms) / 1000.0, max(0.0, _task_s(browser) - before)


def main() -> int:
    """Load, serve, measure, print a markdown table; non-zero exit on console errors."""
    from backend.demo.command import DEFAULT_DAYS, DEFAULT_MODELS

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", type=int, default=DEFAULT_MODELS)
    parser.add_argument("--days", type=float, default=DEFAULT_DAYS)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--db", type=Path, help="reuse (or create) this SQLite file")
    parser.add_argument("--screenshots", type=Path, help="save a PNG of each page here")
    parser.add_argument("--only", help="measure only the pages whose name contains this")
    args = parser.parse_args()
    if not browser_available():
        print("chromium and chromedriver are needed (make test-services installs them)")
        return 1

    home = Path(tempfile.mkdtemp(prefix="ett-bench-dash-"))
    db_path = args.db or home / "ett.db"
    url = f"sqlite:///{db_path}"
    migrate.upgrade(url)
    database = Database(url)
    settings = Settings(home=home, database_url=url)
    from sqlalchemy import func, select

    from backend.ett.models import JobResult

    with database.session() as s:
        jobs = s.scalar(select(func.count()).select_from(JobResult)) or 0
    if not jobs:
        started = time.perf_counter()
        jobs = load_fleet(database, settings, args.models, args.days)
        print(f"loaded {jobs} jobs in {time.perf_counter() - started:.0f} s")
    with database.session() as s:
        models = s.scalar(select(func.count(func.distinct(JobResult.model)))) or 0
    evaluate_alerts(database, settings)

    app = create_app(settings, database=database, start_workers=False)
    rows = []
    with serve(app) as base:
        browser = Browser(width=1440, height=1000)
        try:
            browser.driver.execute_cdp_cmd("Performance.enable", {"timeDomain": "threadTicks"})
            for name, path, charts in pages(database):
                if args.only and args.only not in name:
                    continue
                measure(browser, base + path, charts)  # warm-up: first import, caches
                runs = [measure(browser, base + path, charts) for _ in range(args.runs)]
                severe = browser.severe()
                walls = [r[0] for r in runs]
                rows.append(
                    (
                        name,
                        statistics.median(walls),
                        max(walls),
                        statistics.median(r[1] for r in runs),
                        statistics.median(r[2] for r in runs),
                        len(severe),
                    )
                )
                if args.screenshots:
                    args.screenshots.mkdir(parents=True, exist_ok=True)
                    slug = name.split(" ")[0].strip("()")
                    if "list" in name:
                        slug += "-list"
                    time.sleep(0.5)
                    browser.screenshot(args.screenshots / f"{slug}.png")
                    browser.driver.set_window_size(1440, 1000)
        finally:
            browser.close()
    database.dispose()

    load = os.getloadavg()[0]
    print(
        f"\nDashboard, headless Chromium, demo fleet: {models} models, {jobs} jobs, "
        f"{args.runs} runs per page after one warm-up; load average {load:.1f} on "
        f"{os.cpu_count()} cores\n"
    )
    print(
        "| page | until charts drawn, median (s) | max (s) | server: page callback (s) "
        "| browser main thread (s) | console errors |"
    )
    print("|---|---|---|---|---|---|")
    for name, median, worst, server, cpu, severe in rows:
        print(f"| {name} | {median:.2f} | {worst:.2f} | {server:.2f} | {cpu:.2f} | {severe} |")
    slow = [r for r in rows if r[1] > TARGET_S]
    if slow:
        print(f"\nover the {TARGET_S:.0f} s target: {', '.join(r[0] for r in slow)}")
    # Wall time on a shared machine is only a report; console errors fail the run.
    return 1 if any(r[5] for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
