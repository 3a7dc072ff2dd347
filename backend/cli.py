"""The `ett` command line."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated

import typer

from backend.alerts.cli import alerts_app
from backend.auth.cli import token_app
from backend.config import SettingsError, get_settings
from backend.demo.command import demo
from backend.fleet.cli import fleet_app
from backend.live.cli import live_app
from backend.owners.cli import owners_app
from backend.results.cli import recompute_command

app = typer.Typer(
    name="ett",
    help="ETT% fleet observability: ingest, account and serve Effective Training Time.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
db_app = typer.Typer(help="Database schema (Alembic migrations).", no_args_is_help=True)


@app.callback()
def _check_settings() -> None:
    # Every command reads the ETT_ settings: a bad one stops it here, naming what is allowed.
    try:
        get_settings()
    except SettingsError as err:
        _fail(str(err))


app.add_typer(db_app, name="db")
app.add_typer(token_app, name="token")
app.add_typer(alerts_app, name="alerts")
app.add_typer(fleet_app, name="fleet")
app.add_typer(owners_app, name="owners")
app.add_typer(live_app, name="live")
app.command("recompute")(recompute_command)
app.command("demo")(demo)


def _fail(message: str, code: int = 2) -> None:
    typer.secho(f"error: {message}", fg=typer.colors.RED, err=True)
    raise typer.Exit(code)


def _ensure_partitions(url: str) -> None:
    from backend.db import Database
    from backend.events import retention

    db = Database(url)
    with db.engine.begin() as conn:
        retention.ensure_partitions(conn)
    db.dispose()


@db_app.command("upgrade")
def db_upgrade(
    revision: Annotated[str, typer.Option(help="Target revision.")] = "head",
) -> None:
    """Create or migrate the schema of ETT_DATABASE_URL (default: ~/.ett/ett.db)."""
    from backend import migrate

    settings = get_settings()
    try:
        migrate.upgrade(settings.database_url, revision)
        _ensure_partitions(settings.database_url)
    except Exception as err:  # noqa: BLE001 - report any driver error in words
        _fail(f"could not migrate {settings.database_url}: {err}")
    typer.echo(f"schema of {settings.database_url} is at {revision}")


@db_app.command("prune")
def db_prune(
    raw_older_than: Annotated[
        str,
        typer.Option(
            "--raw-older-than",
            help="Age of the raw events to drop, in days or weeks: 400d, 90d, 12w.",
        ),
    ],
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Report what would go; change nothing.")
    ] = False,
) -> None:
    """Drop the raw events of finished jobs older than an age; their results and rollups stay.

    A job's raw events go only when it ended and sent its last event before the cutoff, its
    final result is stored (not open, not abandoned) and it is not waiting for a recompute.
    Held events received before the cutoff go too. Later events for a pruned job are refused.
    On Postgres whole monthly partitions are detached and dropped, one short transaction each,
    and a month with any other job (a straggler) is kept whole and listed. A pruned job is never recomputed
    again: its stored result stays, but a rule change cannot re-account it (docs/SCALING.md).
    """
    from backend.db import Database
    from backend.events import retention

    try:
        age = retention.parse_age(raw_older_than)
    except ValueError as err:
        _fail(str(err))
    settings = get_settings()
    db = Database(settings.database_url)
    with db.session() as s:
        report = retention.prune_raw(db_session=s, older_than_s=age, dry_run=dry_run)
        if not dry_run:
            retention.ensure_partitions(s.connection())
            s.commit()
    verb = "would prune" if dry_run else "pruned"
    cutoff = datetime.fromtimestamp(report.cutoff, UTC).strftime("%Y-%m-%d %H:%M UTC")
    typer.echo(f"cutoff: jobs that ended before {cutoff}")
    if report.dropped or report.kept:
        dropped = ", ".join(str(m) for m in report.dropped) or "none"
        typer.echo(f"{verb} partitions: {dropped}")
    else:
        typer.echo(f"{verb} {report.rows_deleted} raw event rows")
    typer.echo(f"{verb} the raw events of {len(report.jobs_pruned)} jobs")
    typer.echo(f"{verb} {report.held_deleted} held events whose job was never submitted")
    for month in report.busy:
        typer.echo(f"busy partition {month}: ingest held its lock; run the prune again later")
    for month, late in sorted(report.kept.items()):
        shown = ", ".join(late[:5]) + (f" and {len(late) - 5} more" if len(late) > 5 else "")
        typer.echo(f"kept partition {month}: {len(late)} jobs not finished or not stored ({shown})")
    db.dispose()


@db_app.command("current")
def db_current() -> None:
    """Show the schema revision of the database and the one this code expects."""
    from backend import migrate
    from backend.db import Database

    settings = get_settings()
    db = Database(settings.database_url)
    current = sorted(migrate.current_revisions(db.engine)) or ["(empty)"]
    typer.echo(f"database: {', '.join(current)}")
    typer.echo(f"code:     {', '.join(sorted(migrate.head_revisions()))}")


@app.command()
def serve(
    host: Annotated[str, typer.Option(help="Address to bind.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port to bind.")] = 8050,
    role: Annotated[
        str | None,
        typer.Option(
            help="all: API, dashboard and the workers in one process; api: API and dashboard "
            "only (run `ett worker` processes beside it). Default: ETT_SERVE_ROLE, else all."
        ),
    ] = None,
    workers: Annotated[
        bool, typer.Option(help="Deprecated: --no-workers is --role api.", hidden=True)
    ] = True,
) -> None:
    """Serve the REST API (/api/v1, OpenAPI at /docs), the dashboard (/) and /healthz."""
    from backend.app import serve as serve_app
    from backend.migrate import SchemaOutOfDate

    try:
        serve_app(
            host,
            port,
            role="api" if not workers and role is None else role,
            announce=typer.echo,
        )
    except (ValueError, SchemaOutOfDate) as err:
        _fail(str(err))


@app.command()
def worker(
    metrics_port: Annotated[
        int | None, typer.Option(help="Serve this process's health on /metrics at this port.")
    ] = None,
    metrics_host: Annotated[str, typer.Option(help="Address for --metrics-port.")] = "127.0.0.1",
) -> None:
    """Run the workers: recompute of dirty jobs, fleet rollups, alert evaluation and delivery.

    Any number may run against one Postgres; stops cleanly on SIGTERM or Ctrl-C.
    """
    import logging

    from backend import runtime
    from backend.migrate import SchemaOutOfDate

    settings = runtime.build_settings()
    logging.basicConfig(
        level=settings.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    typer.echo(f"ETT% worker on {settings.database_url.split('@')[-1]}")
    runtime.freeze_startup_heap()
    try:
        runtime.run_workers(settings, metrics_port=metrics_port, metrics_host=metrics_host)
    except SchemaOutOfDate as err:
        _fail(str(err))


def main() -> None:
    """Entry point for `python -m backend.cli`."""
    app()


if __name__ == "__main__":
    main()
