"""`ett fleet rebuild` restores the rollups from the per-job results, as a user runs it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from sqlalchemy import delete, func, select

from backend.fleet.models import FleetDayRollup, FleetDayTotal
from tests.backend.fleet.fleet_jobs import job_a

ETT = str(Path(sys.executable).with_name("ett"))


def test_rebuild_restores_rollups(post: Any, database: Any, tmp_path: Path) -> None:
    assert post(job_a().events).status_code == 200
    with database.session() as s:
        before = s.scalar(select(func.sum(FleetDayRollup.gpu_s)))
        s.execute(delete(FleetDayRollup))
        s.execute(delete(FleetDayTotal))
        s.commit()
    env = {**os.environ, "ETT_HOME": str(tmp_path), "ETT_DATABASE_URL": database.url}
    out = subprocess.run(
        [ETT, "fleet", "rebuild"], env=env, capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    assert "from 1 jobs" in out.stdout
    with database.session() as s:
        assert s.scalar(select(func.sum(FleetDayRollup.gpu_s))) == before == 9900 * 8
        assert s.scalar(select(func.sum(FleetDayTotal.gpu_s))) == before
