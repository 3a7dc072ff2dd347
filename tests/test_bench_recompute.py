"""bench_recompute's smallest configuration runs, extends the open job and prints its rows."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import DIALECTS, PG_ADMIN_URL

pytestmark = pytest.mark.skipif(
    "postgresql" not in DIALECTS, reason="bench_recompute needs Postgres"
)

ROOT = Path(__file__).resolve().parents[1]


def test_bench_recompute_smallest_configuration_extends_the_job() -> None:
    out = subprocess.run(
        [
            sys.executable,
            "benchmarks/bench_recompute.py",
            "--ages",
            "1h,1d",
            "--batches",
            "2",
            "--full-batches",
            "1",
            "--json",
        ],
        cwd=ROOT,
        env={**os.environ, "ETT_BENCH_PG_URL": PG_ADMIN_URL},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    rows = json.loads(out.stdout.strip().splitlines()[-1])
    assert [(r["age"], r["mode"]) for r in rows] == [
        ("1h", "full"),
        ("1h", "incremental"),
        ("1d", "full"),
        ("1d", "incremental"),
    ]
    assert all(r["cpu_s"] > 0 and r["wall_s"] > 0 for r in rows)
    # A day of history: 30 s windows, minute heartbeats, half-hourly saves.
    assert 4_000 < rows[2]["events"] < 4_700
