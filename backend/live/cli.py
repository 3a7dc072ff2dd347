"""`ett live` and `ett live bounds`: the fleet now and the learned bounds, from the terminal."""

from __future__ import annotations

import json
from typing import Annotated

import typer

from backend.config import get_settings

live_app = typer.Typer(
    help="The live state of open jobs and the bounds they are judged by.",
    invoke_without_command=True,
)


@live_app.callback()
def status(
    ctx: typer.Context,
    everything: Annotated[
        bool, typer.Option("--all", help="Every open job, not only bad ones.")
    ] = False,
    as_json: Annotated[
        bool, typer.Option("--json", help="Print GET /api/v1/live's document.")
    ] = False,
) -> None:
    """GPUs by live state now and the jobs in a bad state (or every open job with --all)."""
    if ctx.invoked_subcommand is not None:
        return
    from backend.db import Database
    from backend.live import service

    settings = get_settings()
    db = Database(settings.database_url)
    try:
        with db.read_session() as s:
            doc = service.fleet_now(s, settings)
    finally:
        db.dispose()
    if as_json:
        typer.echo(json.dumps(doc, default=str))
        return
    gpus = ", ".join(f"{k} {v:,}" for k, v in doc["gpus_by_state"].items() if v)
    typer.echo(f"{doc['open_jobs']} open jobs; GPUs: {gpus or 'none'}")
    for j in doc["jobs"] if everything else doc["bad_jobs"]:
        extra = ""
        if j["bad"]:
            bound = "-" if j["bound_s"] is None else f"{j['bound_s']:.0f}s"
            extra = (
                f" owner={j['owner']} bound={bound} overrun={j['overrun_s']:.0f}s "
                f"burned={j['gpu_hours_burned']:.2f}GPU-h"
            )
        typer.echo(f"  {j['job_id']:32} {j['model'] or '':20} {j['state']:36}{extra}")


@live_app.command("bounds")
def bounds(
    model: Annotated[str | None, typer.Option(help="Show this model's bounds.")] = None,
    refresh: Annotated[
        bool, typer.Option("--refresh", help="Learn from the jobs that finished first.")
    ] = False,
) -> None:
    """Learn the bounds again (--refresh) and/or show a model's bounds with their sources."""
    from backend.db import Database
    from backend.live import learn, service

    if not refresh and model is None:
        typer.secho("error: give --model M, --refresh, or both", fg=typer.colors.RED, err=True)
        raise typer.Exit(2)
    settings = get_settings()
    db = Database(settings.database_url)
    try:
        if refresh:
            with db.session() as s:
                done = learn.refresh(s, settings)
                s.commit()
            typer.echo(
                f"read {done['jobs']} finished jobs; learned {done['bounds']} bounds of "
                f"{done['keys']} keys"
            )
        if model is not None:
            with db.read_session() as s:
                rows = service.bounds_of(s, settings, model)
            for b in rows:
                name = b["phase"] + (f" ({b['variant']})" if b["variant"] else "")
                typer.echo(
                    f"  {name:36} {b['bound_s']:10.1f} s  {b['source']:8} {b['samples']:4d} samples"
                )
    finally:
        db.dispose()
