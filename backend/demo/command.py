"""`ett demo`: load a realistic fleet through the real pipeline, then serve it."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Annotated

import typer

if TYPE_CHECKING:
    from backend.db import Database
    from backend.demo.loader import LoadReport

DEFAULT_MODELS = 30
FULL_MODELS = 520
DEFAULT_DAYS = 182.0


def _database_is_empty(database: Database) -> bool:
    from sqlalchemy import select

    from backend.events.models import RawEvent

    with database.session() as s:
        return s.scalar(select(RawEvent.event_id).limit(1)) is None


def demo(
    host: Annotated[str, typer.Option(help="Address to bind.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port to bind.")] = 8050,
    full: Annotated[
        bool, typer.Option("--full", help=f"The {FULL_MODELS}-model fleet (several minutes).")
    ] = False,
    seed: Annotated[int, typer.Option(help="Seed: the same seed gives the same fleet.")] = 7,
    models: Annotated[
        int | None,
        typer.Option(
            min=0,
            help=f"Models in the longitudinal fleet (default {DEFAULT_MODELS}, "
            f"with --full {FULL_MODELS}).",
        ),
    ] = None,
    days: Annotated[
        float, typer.Option(min=3.0, help="Days of history, ending now.")
    ] = DEFAULT_DAYS,
    url: Annotated[
        str | None,
        typer.Option(help="Send the fleet to this running server over HTTP, then exit."),
    ] = None,
    token: Annotated[
        str | None, typer.Option(envvar="ETT_TOKEN", help="Ingest token for --url.")
    ] = None,
    serve: Annotated[
        bool, typer.Option(help="Serve API and dashboard after loading (--no-serve: exit).")
    ] = True,
    live: Annotated[
        bool, typer.Option(help="Keep the running jobs sending events while serving.")
    ] = True,
) -> None:
    """Load a demo fleet (6 benchmark pairs, 6 months of jobs) into an empty database, serve it."""
    from backend import migrate
    from backend.config import get_settings
    from backend.db import Database
    from backend.demo import fleet, loader
    from backend.demo import live as live_feed

    settings = get_settings()
    count = models if models is not None else (FULL_MODELS if full else DEFAULT_MODELS)
    spec = fleet.FleetSpec(seed=seed, models=count, days=days, now=time.time())
    what = f"{count} models and 6 benchmark pairs over {days:g} days (seed {seed})"

    if url is not None:
        if not token:
            typer.secho("error: --url needs --token (or ETT_TOKEN)", fg="red", err=True)
            raise typer.Exit(2)
        typer.echo(f"sending the demo fleet ({what}) to {url}")
        began = time.perf_counter()
        report = loader.send_over_http(
            url,
            token,
            fleet.fleet_events(spec),
            total_events=fleet.count_events(spec, progress=True),
        )
        _summary(report, time.perf_counter() - began)
        return

    try:
        migrate.upgrade(settings.database_url)
    except Exception as err:  # noqa: BLE001 - report any driver error in words
        typer.secho(f"error: could not migrate {settings.database_url}: {err}", fg="red", err=True)
        raise typer.Exit(2) from None
    database = Database(settings.database_url)
    db_url = settings.database_url
    state = live_feed.read_state(settings.home, db_url)
    resume = state is not None and not state[1]
    if resume or _database_is_empty(database):
        if resume:
            # Sending the same fleet again is safe: ingest drops event ids it already holds.
            spec = state[0]
            typer.echo(f"resuming the interrupted demo load into {db_url}")
        else:
            typer.echo(f"loading the demo fleet ({what}) into {db_url}")
        live_feed.save_spec(settings.home, spec, database_url=db_url, complete=False)
        began = time.perf_counter()
        report = loader.load_in_process(
            database,
            settings,
            fleet.fleet_events(spec),
            total_events=fleet.count_events(spec, progress=True),
            now=spec.now,
        )
        loader.store_annotations(database, fleet.fleet_annotations(spec))
        typer.echo(
            "measuring the SLOs over the fleet's past and replaying the alert evaluator over it"
        )
        loader.backfill_slo_history(database, settings, spec.start, spec.now, progress=True)
        live_feed.save_spec(settings.home, spec, database_url=db_url, complete=True)
        _summary(report, time.perf_counter() - began)
    else:
        typer.echo(
            f"{db_url} already holds events: serving them as they are "
            "(point ETT_DATABASE_URL or ETT_HOME elsewhere for a fresh demo fleet)"
        )
        live = live and state is not None
        if state is not None:
            spec = state[0]
    if not serve:
        database.dispose()
        return

    from backend.app import serve as serve_app
    from backend.migrate import SchemaOutOfDate

    feed = live_feed.LiveFeed(database, spec) if live else None
    if feed is not None:
        feed.start()
    try:
        serve_app(host, port, announce=typer.echo)
    except (ValueError, SchemaOutOfDate) as err:
        typer.secho(f"error: {err}", fg=typer.colors.RED, err=True)
        raise typer.Exit(2) from None
    finally:
        if feed is not None:
            feed.stop()
        database.dispose()


def _summary(r: LoadReport, total_s: float) -> None:
    jobs = f"; {r.jobs:,} jobs accounted" if r.jobs else ""
    typer.echo(
        f"sent {r.sent:,} events: {r.accepted:,} stored, {r.duplicates:,} duplicates, "
        f"{len(r.rejected):,} rejected{jobs}; the load took {total_s:.0f} s"
    )
    for rejected in r.rejected[:5]:
        typer.secho(f"  rejected: {rejected}", fg="yellow", err=True)
