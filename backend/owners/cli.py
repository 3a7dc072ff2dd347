"""`ett owners reaccount`: after an owners-file edit, mark the jobs it accounts differently."""

from __future__ import annotations

import typer

from backend.config import get_settings

owners_app = typer.Typer(
    help="The owner mapping (phase -> component -> owner).", no_args_is_help=True
)


@owners_app.command("reaccount")
def reaccount() -> None:
    """Mark for recompute every job whose custom phases the mapping in force moves."""
    from backend.db import Database
    from backend.owners import service

    db = Database(get_settings().database_url)
    try:
        with db.session() as s:
            marked = service.mark_for_reaccount(db_session=s, settings=get_settings())
            s.commit()
    finally:
        db.dispose()
    typer.echo(f"{marked} jobs marked for recompute")
