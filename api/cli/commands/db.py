"""``commest db upgrade``: the profiles database's schema."""

from __future__ import annotations

import typer

from api.cli.client import database_down
from api.cli.commands import verb_group
from api.cli.exits import EXIT_UNAVAILABLE, die, die_of
from api.cli.transport import load_settings

app = verb_group("db")


@app.command("upgrade")
def db_upgrade() -> None:
    """Apply the migrations to the configured database; print its revision."""
    from sqlalchemy.exc import SQLAlchemyError

    from estimator.errors import CommestError
    from profiles.db import current_revision, normalise_url, upgrade_database

    url = load_settings().resolved_database_url
    try:
        upgrade_database(url)
        revision = current_revision(url)
    except CommestError as exc:
        die_of(exc)
    except SQLAlchemyError as exc:
        die(str(database_down(exc)), EXIT_UNAVAILABLE)
    shown = normalise_url(url).render_as_string(hide_password=True)
    typer.echo(f"{shown} at revision {revision}")
