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
import contextlib
import os
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from backend import migrate  # noqa: E402
from backend.app import create_app  # noqa: E402
from backend.config import Settings  # noqa: E402
from backend.db import Database  # noqa: E402
from tests.dashboard.browser import Browser, browser_available, free_port, serve  # noqa: E402

TARGET_S = 2.0
ROOT = Path(__file__).resolve().parents[1]

# The baseline's server: its own tree first on sys.path, same database, no workers.
_SERVE_BASELINE = """
import sys, uvicorn
from pathlib import Path
from backend.app import create_app
from backend.config import Settings
from backend.db import Database
url, port, home = sys.argv[1], int(sys.argv[2]), Path(sys.argv[3])
settings = Settings(home=home, database_url=url)
app = create_app(settings, database=Database(url), start_workers=False)
uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning")
"""


@contextlib.contextmanager
def serve_baseline(rev: str, url: str, home: Path) -> Iterator[str]:
    """The dashboard as it was at git revision `rev`, on the same database; yields its URL."""
    tree = Path(tempfile.mkdtemp(prefix="ett-bench-base-"))
    archive = subprocess.run(["git", "archive", rev], cwd=ROOT, capture_output=True, check=True)
    subprocess.run(["tar", "-x", "-C", str(tree)], input=archive.stdout, check=True)
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-c", _SERVE_BASELINE, url, str(port), str(home)],
        cwd=tree,
        env={**os.environ, "PYTHONPATH": str(tree)},
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                urllib.request.urlopen(base + "/healthz", timeout=2).close()
                break
            except OSError:
                if time.monotonic() > deadline or proc.poll() is not None:
                    raise RuntimeError("the baseline server did not start") from None
                time.sleep(0.2)
        yield base
    finally:
        proc.terminate()
        proc.wait(timeout=15)


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
    from backend.alerts import cycle, silences

    cycle.evaluate_once(db=database, settings=settings, release=True)
    now = time.time()
    with database.session() as s:
        if not silences.list_silences(db_session=s):
            silences.create_silence(
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


def pages(database: Database) -> list[tuple[str, str, int, int]]:
    """(name, path, charts on the first screen, charts in all) for every page, on real ids."""
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
        ("fleet", "/", 3, 7),
        ("models (list)", "/model", 0, 0),
        (f"model ({model})", f"/model?model={model}", 3, 6),
        ("jobs (list)", "/job", 0, 0),
        ("jobs (search)", f"/job?q={model[:6]}", 0, 0),
        (f"job ({failed})", f"/job?job_id={failed}", 1, 3),
        ("compare (6 pairs)", "/compare", 2, 2),
        ("owners", "/owners", 1, 2),
        ("plan", "/plan", 1, 1),
        (f"plan ({model})", f"/plan?model={model}", 1, 1),
        ("nodes", "/nodes", 1, 1),
    ]


# Charts on the baseline's pages (before ab81f67's successor: every chart in the first answer,
# the job page with the init charts of three attempts at once).
BASELINE_CHARTS = {"fleet": 7, "model": 6, "job": 7, "owners": 2}


def _task_s(browser: Browser) -> float:
    metrics = browser.driver.execute_cdp_cmd("Performance.getMetrics", {})["metrics"]
    return float(next(m["value"] for m in metrics if m["name"] == "TaskDuration"))


# Resolves with the page's own clock (ms since navigation) when the title and `need` charts
# have drawn (or, with need 0, the table); checked after every change of the page, so the
# time is not rounded up to a poll interval.
_WHEN_DRAWN = """
const need = arguments[0], done = arguments[arguments.length - 1];
const drawn = () => document.querySelectorAll('.js-plotly-plot .main-svg:first-of-type').length;
const ready = () => document.querySelector('.ett-main h1') &&
  (need ? drawn() >= need : document.querySelector('.dash-spreadsheet'));
if (ready()) { done(performance.now()); return; }
const obs = new MutationObserver(() => {
  if (ready()) { obs.disconnect(); done(performance.now()); }
});
obs.observe(document.body, {childList: true, subtree: true});
"""


def measure(
    browser: Browser, url: str, first: int, total: int
) -> tuple[float, float, float, float, float]:
    """One load of a page: (s until its first screen is drawn, s until all its charts are,
    server s, browser main-thread s, server s of all its callbacks summed).

    The times are the page's own clock from navigation. The server time is the longest
    dashboard callback (the page's layout, or its part below the first screen); the browser
    time is Chromium's main-thread busy time (CDP TaskDuration), which CPU contention does not
    inflate the way it inflates wall time.
    """
    browser.get("about:blank")
    before = _task_s(browser)
    browser.driver.set_script_timeout(60)
    browser.driver.get(url)
    first_ms = browser.driver.execute_async_script(_WHEN_DRAWN, first)
    all_ms = browser.driver.execute_async_script(_WHEN_DRAWN, total) if total > first else first_ms
    server_ms, server_sum_ms = browser.driver.execute_script(
        "const d = performance.getEntriesByType('resource')"
        ".filter(e => e.name.includes('_dash-update-component')).map(e => e.duration);"
        "return [Math.max(0, ...d), d.reduce((a, b) => a + b, 0)];"
    )
    busy = max(0.0, _task_s(browser) - before)
    return (
        float(first_ms) / 1000.0,
        float(all_ms) / 1000.0,
        float(server_ms) / 1000.0,
        busy,
        float(server_sum_ms) / 1000.0,
    )


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
    parser.add_argument(
        "--baseline", help="also serve this git revision's dashboard; loads alternate run by run"
    )
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
    with contextlib.ExitStack() as stack:
        base = stack.enter_context(serve(app))
        old = (
            stack.enter_context(serve_baseline(args.baseline, url, home)) if args.baseline else None
        )
        browser = Browser(width=1440, height=1000)
        stack.callback(browser.close)
        browser.driver.execute_cdp_cmd("Performance.enable", {"timeDomain": "threadTicks"})
        for name, path, first, total in pages(database):
            if args.only and args.only not in name:
                continue
            sides = [("", base, first, total)]
            if old:
                # The baseline drew every chart at once; its own counts (first == total).
                sides.append(
                    (f"{args.baseline}: ", old, BASELINE_CHARTS.get(name.split(" ")[0], total), 0)
                )
            for _ in range(2):  # warm-up: first import, caches
                for _label, host, f, t in sides:
                    measure(browser, host + path, f, max(f, t))
            runs: dict[str, list[tuple[float, float, float, float, float]]] = {
                s[0]: [] for s in sides
            }
            for _ in range(args.runs):
                for label, host, f, t in sides:
                    runs[label].append(measure(browser, host + path, f, max(f, t)))
            severe = browser.severe()
            for label, _host, _f, t in sides:
                got = runs[label]
                rows.append(
                    (
                        f"{label}{name}" + (f", {t} charts" if t else ""),
                        statistics.median(r[0] for r in got),
                        statistics.median(r[1] for r in got),
                        max(r[1] for r in got),
                        statistics.median(r[2] for r in got),
                        statistics.median(r[4] for r in got),
                        statistics.median(r[3] for r in got),
                        len(severe),
                    )
                )
            if args.screenshots:
                args.screenshots.mkdir(parents=True, exist_ok=True)
                slug = name.split(" ")[0].strip("()")
                if "list" in name:
                    slug += "-list"
                elif slug == "plan" and "(" in name:
                    slug += "-model"
                measure(browser, base + path, first, total)
                time.sleep(0.5)
                browser.screenshot(args.screenshots / f"{slug}.png")
                browser.driver.set_window_size(1440, 1000)
    database.dispose()

    load = os.getloadavg()[0]
    print(
        f"\nDashboard, headless Chromium, demo fleet: {models} models, {jobs} jobs, "
        f"{args.runs} runs per page after one warm-up; load average {load:.1f} on "
        f"{os.cpu_count()} cores\n"
    )
    print(
        "| page | first screen drawn, median (s) | all charts drawn, median (s) | max (s) "
        "| server: longest callback (s) | server: callbacks summed (s) "
        "| browser main thread (s) | console errors |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for name, first, every, worst, server, server_sum, cpu, severe in rows:
        print(
            f"| {name} | {first:.2f} | {every:.2f} | {worst:.2f} | {server:.2f} "
            f"| {server_sum:.2f} | {cpu:.2f} | {severe} |"
        )
    slow = [r for r in rows if r[2] > TARGET_S]
    if slow:
        print(f"\nover the {TARGET_S:.0f} s target: {', '.join(r[0] for r in slow)}")
    # Wall time on a shared machine is only a report; console errors fail the run.
    return 1 if any(r[7] for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
