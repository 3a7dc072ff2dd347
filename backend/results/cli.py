"""`ett recompute [--job J ... | --all]`: rebuild stored ETT answers from raw events."""

from __future__ import annotations

from typing import Annotated

import typer

from backend.config import get_settings


def recompute_command(
    job: Annotated[
        list[str] | None, typer.Option("--job", "-j", help="Job id to rebuild (repeatable).")
    ] = None,
    all_jobs: Annotated[bool, typer.Option("--all", help="Rebuild every job.")] = False,
    progress: Annotated[bool, typer.Option(help="Show a progress bar.")] = True,
) -> None:
    """Recompute jobs from their raw events: given ones, every one (--all), or the marked ones.

    Run `ett recompute --all` once after an upgrade that changes the accounting rules
    (docs/ACCOUNTING.md): it rebuilds every stored answer with a progress bar.
    """
    from backend.db import Database
    from backend.results import recompute

    if job and all_jobs:
        typer.secho("error: give --job or --all, not both", fg=typer.colors.RED, err=True)
        raise typer.Exit(2)
    settings = get_settings()
    db = Database(settings.database_url)
    try:
        with db.session() as s:
            if all_jobs or job:
                ids = sorted(set(job)) if job else None
                done = recompute.recompute_all(
                    db_session=s, settings=settings, job_ids=ids, progress=progress
                )
                missing = len(ids) - done if ids else 0
            else:
                done = 0
                while True:
                    n = recompute.recompute_dirty(db_session=s, settings=settings, limit=500)
                    done += n
                    if n == 0:
                        break
                missing = 0
    finally:
        db.dispose()
    typer.echo(f"recomputed {done} job(s)")
    if missing:
        typer.secho(f"error: {missing} job id(s) have no events", fg=typer.colors.RED, err=True)
        raise typer.Exit(1)
