"""The fleet benchmark on a small fleet: its rollup answers equal its scans, and --keep reuses."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text

from tests.conftest import DIALECTS, PG_ADMIN_URL

pytestmark = pytest.mark.skipif("postgresql" not in DIALECTS, reason="bench_fleet needs Postgres")

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
