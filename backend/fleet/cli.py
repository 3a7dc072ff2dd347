"""`ett fleet rebuild`: recompute the fleet tables from the stored per-job results."""

from __future__ import annotations

import typer

from backend.config import get_settings

fleet_app = typer.Typer(help="Fleet analytics tables (day rollups).", no_args_is_help=True)


@fleet_app.command("rebuild")
def rebuild() -> None:
    """Rebuild every day rollup from job_results and job_intervals (raw events are not read)."""
    from backend.db import Database
    from backend.fleet.rollups import rebuild_rollups

    db = Database(get_settings().database_url)
    try:
        with db.session() as s:
            jobs = rebuild_rollups(db_session=s)
            s.commit()
    finally:
        db.dispose()
    typer.echo(f"rebuilt the fleet rollups from {jobs} jobs")
