"""`ett token ...`: create, list and revoke API tokens."""

from __future__ import annotations

import json
import sys
from typing import Annotated

import typer

from backend.config import get_settings

token_app = typer.Typer(
    help=(
        "API tokens for ingest, reads and admin. A token is shown once when created and "
        "stored only hashed; revoke one with `ett token revoke NAME` and it stops working at "
        "once, in the API and in the dashboard."
    ),
    no_args_is_help=True,
)


def _fail(message: str, code: int = 2) -> None:
    typer.secho(f"error: {message}", fg=typer.colors.RED, err=True)
    raise typer.Exit(code)


def _day(stamp: str | None, never: str = "-") -> str:
    """An RFC 3339 time as 'YYYY-MM-DD HH:MM' UTC, or a word when there is none."""
    return stamp[:16].replace("T", " ") if stamp else never


@token_app.command("create")
def token_create(
    name: Annotated[
        str, typer.Option(help="A unique name, e.g. the trainer fleet or a team: trainer-fleet.")
    ],
    scope: Annotated[
        str,
        typer.Option(help="ingest (trainers send events), read (dashboard, REST reads) or admin."),
    ] = "ingest",
    model: Annotated[
        list[str] | None,
        typer.Option("--model", help="Limit an ingest token to this model (repeatable)."),
    ] = None,
    expires_in: Annotated[
        str | None,
        typer.Option(
            "--expires-in",
            help="Lifetime such as 30d, 12h or 90m (units s, m, h, d, w). Default: never expires.",
        ),
    ] = None,
) -> None:
    """Create a token and print it, alone on the last line, once: it is stored only hashed."""
    from backend.auth import service
    from backend.db import Database
    from backend.timefmt import parse_duration, rfc3339

    try:
        expires = parse_duration(expires_in) if expires_in is not None else None
    except ValueError as err:
        _fail(f"--expires-in: {err}")
    db = Database(get_settings().database_url)
    try:
        with db.session() as s:
            try:
                row, secret = service.create(
                    db_session=s, name=name, scope=scope, models=model or None, expires_in_s=expires
                )
            except ValueError as err:
                _fail(str(err).replace("pick another name", "pick another --name"))
    finally:
        db.dispose()
    limited = f", models {', '.join(row.models)}" if row.models else ""
    until = f", expires {rfc3339(row.expires_at)}" if row.expires_at else ", never expires"
    typer.echo(
        f"created token {row.name!r} (scope {row.scope}{limited}{until}); store it now:", err=True
    )
    sys.stdout.write(secret + "\n")


@token_app.command("list")
def token_list(
    as_json: Annotated[bool, typer.Option("--json", help="Print a JSON list instead.")] = False,
) -> None:
    """List tokens: id, name, scope, models, created, expires, last used, status (never secrets).

    Times are UTC. Last use is recorded at most once a minute per token.
    """
    from backend.auth import service
    from backend.db import Database

    db = Database(get_settings().database_url)
    try:
        with db.session() as s:
            docs = [service.token_doc(t) for t in service.list_tokens(db_session=s)]
    finally:
        db.dispose()
    if as_json:
        typer.echo(json.dumps(docs, indent=2))
        return
    if not docs:
        typer.echo("no tokens yet; create one with `ett token create --name NAME`", err=True)
        return
    typer.echo("id\tname\tscope\tmodels\tcreated\texpires\tlast used\tstatus")
    for d in docs:
        state = d["status"]
        if d["revoked_at"]:
            state += f" {_day(d['revoked_at'])}"
        typer.echo(
            "\t".join(
                [
                    str(d["id"]),
                    d["name"],
                    d["scope"],
                    ",".join(d["models"]) if d["models"] else "*",
                    _day(d["created_at"]),
                    _day(d["expires_at"], "never"),
                    _day(d["last_used_at"], "never"),
                    state,
                ]
            )
        )


@token_app.command("revoke")
def token_revoke(
    ref: Annotated[
        str, typer.Argument(metavar="NAME_OR_ID", help="The token's name or id (ett token list).")
    ],
) -> None:
    """Revoke a token: from now on every request with it is refused, dashboard included."""
    from backend.auth import service
    from backend.db import Database

    db = Database(get_settings().database_url)
    try:
        with db.session() as s:
            try:
                row = service.revoke(db_session=s, ref=ref)
            except service.TokenNotFound as err:
                _fail(str(err))
            doc = service.token_doc(row)
    finally:
        db.dispose()
    typer.echo(f"token {doc['name']!r} (id {doc['id']}) is revoked since {doc['revoked_at']}")
