"""`ett alerts ...`: evaluate once, list SLOs and alerts from the command line."""

from __future__ import annotations

import json
from typing import Annotated

import typer

from backend.config import get_settings

ALERT_STATES = ("firing", "pending", "resolved", "inactive")
alerts_app = typer.Typer(help="Per-owner SLOs and alerts.", no_args_is_help=True)


@alerts_app.command("evaluate")
def evaluate(
    as_json: Annotated[bool, typer.Option("--json", help="Print the pass as JSON.")] = False,
) -> None:
    """Run one evaluation pass: measure every SLO (the live ones too), move alert states, send
    queued notices."""
    from backend.alerts import cycle, live
    from backend.db import Database

    settings = get_settings()
    db = Database(settings.database_url)
    try:
        report = cycle.evaluate_once(db=db, settings=settings, release=True)
        if report.evaluated:
            fast = live.evaluate_live_once(db=db, settings=settings, release=True)
            report.evaluated = fast.evaluated
            report.slos += fast.slos
            report.instances += fast.instances
            report.transitions += fast.transitions
            report.queued += fast.queued
            report.delivered += fast.delivered
            report.failed += fast.failed
            report.errors += fast.errors
    finally:
        db.dispose()
    if as_json:
        typer.echo(
            json.dumps(
                {
                    "evaluated": report.evaluated,
                    "slos": report.slos,
                    "instances": report.instances,
                    "transitions": [list(t) for t in report.transitions],
                    "queued": report.queued,
                    "delivered": report.delivered,
                    "failed": report.failed,
                    "errors": report.errors,
                }
            )
        )
    elif not report.evaluated:
        typer.echo("another evaluator holds the lease; nothing done")
    else:
        typer.echo(
            f"{report.slos} SLOs, {report.instances} alert instances, "
            f"{len(report.transitions)} transitions, {report.queued} notices queued, "
            f"{report.delivered} delivered, {report.failed} failed"
        )
        for fp, old, new in report.transitions:
            typer.echo(f"  {fp}: {old} -> {new}")
        for err in report.errors:
            typer.secho(f"  error: {err}", fg=typer.colors.YELLOW, err=True)
    if not report.evaluated:
        raise typer.Exit(1)


@alerts_app.command("list")
def list_alerts(
    owner: Annotated[str | None, typer.Option(help="Only this owner's alerts.")] = None,
    state: Annotated[
        str | None, typer.Option(help="firing, pending, resolved or inactive.")
    ] = None,
) -> None:
    """Show alert instances, firing first; an unknown --state exits 2 naming the valid ones."""
    from backend.alerts import read
    from backend.db import Database

    if state is not None and state not in ALERT_STATES:
        typer.secho(
            f"error: --state {state!r} is not a state; use one of {', '.join(ALERT_STATES)}",
            fg=typer.colors.RED,
            err=True,
        )
        raise typer.Exit(2)

    db = Database(get_settings().database_url)
    try:
        with db.session() as s:
            for a in read.list_alerts(db_session=s, owner=owner, state=state):
                value = "-" if a.value is None else f"{a.value:.3g}"
                typer.echo(
                    f"{a.state:9} {a.owner:12} {a.slo_name:28} {a.model or '':20} "
                    f"value={value} objective={a.objective:g}"
                )
    finally:
        db.dispose()
