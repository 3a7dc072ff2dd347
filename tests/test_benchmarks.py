"""Each benchmark at its smallest configuration, so that none rots: the fleet benchmark's rollup
answers equal its scans and --keep reuses; the engine, ingest, OTLP, metrics and load benchmarks
run to their figures (their sizes are far too small for the figures to mean anything)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text

from tests.conftest import DIALECTS, PG_ADMIN_URL

needs_pg = pytest.mark.skipif("postgresql" not in DIALECTS, reason="the benchmark needs Postgres")

ROOT = Path(__file__).resolve().parents[1]
ARGS = ["--jobs", "300", "--models", "12", "--days", "365", "--runs", "1", "--scan-runs", "1"]


def _bench(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "ETT_BENCH_PG_URL": PG_ADMIN_URL}
    return subprocess.run(
        [sys.executable, "benchmarks/bench_fleet.py", *ARGS, *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


@needs_pg
def test_bench_fleet_checks_rollups_against_scans_and_reuses_a_kept_fleet() -> None:
    """It asserts every rollup read equals its scan; a second --keep run skips generating."""
    name = f"ett_test_bench_{uuid.uuid4().hex[:6]}"
    try:
        first = _bench("--keep", name)
        assert first.returncode == 0, first.stderr[-3000:]
        assert "generated in" in first.stdout
        rows = [line for line in first.stdout.splitlines() if line.startswith("| ")]
        names = [r.split("|")[1].strip() for r in rows[1:]]
        assert names[:3] == [
            "fleet series, 365 days by day",
            "fleet series, 365 days by week",
            "lost GPU-hours by owner, 365 days",
        ]
        assert names[3].startswith("model page (model-000")
        assert "rollups equal a rebuild afterwards" in first.stdout
        assert "jobs list, newest first over 365 days (page of 50 of 300)" in first.stdout
        again = _bench("--keep", name)
        assert again.returncode == 0, again.stderr[-3000:]
        assert f"reusing {name}" in again.stdout and "generated in" not in again.stdout
        other = subprocess.run(
            [sys.executable, "benchmarks/bench_fleet.py", "--jobs", "301", "--keep", name],
            cwd=ROOT,
            env={**os.environ, "ETT_BENCH_PG_URL": PG_ADMIN_URL},
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert other.returncode != 0 and "drop it" in other.stderr
    finally:
        admin = create_engine(PG_ADMIN_URL, isolation_level="AUTOCOMMIT")
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


def _run(script: str, *args: str, timeout: float = 120) -> str:
    """Run benchmarks/<script> with `args` against the test Postgres; its stdout (it must pass)."""
    env = {**os.environ, "ETT_BENCH_PG_URL": PG_ADMIN_URL}
    done = subprocess.run(
        [sys.executable, f"benchmarks/{script}", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def test_bench_engine_smallest_runs_both_arrivals_and_against_a_baseline() -> None:
    """Both arrival orders and the growth line; --baseline imports an older engine beside it."""
    out = _run("bench_engine.py", "--sizes", "500,1000", "--repeats", "1")
    rows = [line.split() for line in out.splitlines() if line.split()[:1] in (["in"], ["shuffled"])]
    assert [(r[0], r[-7]) for r in rows] == [
        ("in", "499"),
        ("in", "999"),
        ("shuffled", "499"),
        ("shuffled", "999"),
    ]
    assert "CPU per event, largest size / smallest: in order" in out
    before = _run("bench_engine.py", "--sizes", "500", "--repeats", "1", "--baseline", "HEAD")
    assert len([line for line in before.splitlines() if " 499 " in line]) == 2


@needs_pg
def test_bench_ingest_smallest_measures_post_and_copy_before_and_after_0011() -> None:
    """POST and COPY on this schema and on the one before migration 0011, in one run."""
    # A shallow clone lacks the pre-0011 commit: then this tree alone is measured.
    has_rev = subprocess.run(["git", "cat-file", "-e", "56ffcb2^{commit}"], cwd=ROOT).returncode
    baseline = ["--baseline"] if has_rev == 0 else []
    out = _run("bench_ingest.py", "--events", "1000", "--rounds", "1", *baseline)
    for label in ("after: ", "before (56ffcb2):")[: 1 + len(baseline)]:
        assert f"{label} POST /api/v1/events:" in out
        assert f"{label} COPY (ceiling):" in out
        assert f"{label} ratio per round:" in out
    assert ("after/before (56ffcb2): POST" in out) == bool(baseline)
    assert "target (>= 20,000/s and >= 1/2 of COPY):" in out


@needs_pg
def test_bench_otlp_smallest() -> None:
    """The OTLP receiver against the wire protocol, one small round."""
    out = _run("bench_otlp.py", "--events", "1000", "--rounds", "1")
    assert "ratio OTLP/wire:" in out


@needs_pg
def test_bench_metrics_smallest() -> None:
    """The ledger's recompute cost and a scrape, one model over a day."""
    out = _run(
        "bench_metrics.py", "--models", "1", "--days", "1", "--rounds", "1", "--scrapes", "1"
    )
    row = json.loads(out.splitlines()[0])
    assert row["jobs"] >= 1 and row["exported_series"] > 0


@needs_pg
def test_bench_load_smallest_with_history_counts_failures_on_arrival(tmp_path: Path) -> None:
    """A tiny aged fleet: its day of history reaches ingest with every failure and restart
    accepted (protocol-valid), and every measured batch is seen fresh."""
    report = tmp_path / "load.json"
    _run(
        "bench_load.py",
        *("--jobs", "3", "--speed", "8", "--duration", "4", "--history-days", "1"),
        *("--apis", "1", "--workers", "1", "--backlog-jobs", "4", "--backlog-hours", "0.25"),
        *("--repeats", "1", "--json", str(report)),
        timeout=240,
    )
    figures = json.loads(report.read_text())
    (fleet,) = figures["fleet"]
    warmup = fleet["warmup"]
    assert warmup["history_days"] == 1.0 and warmup["events"] > 3 * 4000  # ~4,500 a job-day
    assert warmup["rejected_events"] == 0 and warmup["failed_requests"] == 0
    assert warmup["failures"] == warmup["restarts"] > 0
    assert fleet["rejected_events"] == 0 and fleet["unresolved"] == 0
    assert figures["throughput"]["workers_1_best_jobs_per_s"] > 0


def test_bench_demo_alerts_smallest() -> None:
    """The replay's added time on a tiny demo fleet: both steps run, episodes come out."""
    out = _run("bench_demo_alerts.py", "--models", "2", "--days", "20", "--runs", "1")
    assert "| history + alert replay |" in out
    assert int(out.split(" episodes")[0].rsplit("; ", 1)[1]) > 0
