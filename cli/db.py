"""``wgstore db upgrade | current | check | reader``: the schema (Alembic) and the SQL reader role."""

from __future__ import annotations

import typer

from wgstore.cli.common import (
    DEFAULT_URL,
    CliError,
    UrlOption,
    check_url,
    open_store,
    store_label,
)
from wgstore.events._translate import translate_errors
from wgstore.events.engine import create_store_engine, parse_url
from wgstore.events.reader_role import (
    READER_CONNECTION_LIMIT,
    READER_SETTINGS,
    READER_URL_ENV,
    drop_reader,
    prepare_reader,
)
from wgstore.migrations.runner import (
    check_known,
    check_wgstore_schema,
    current_revision,
    head_revision,
)

__all__ = ["db_app"]

db_app = typer.Typer(
    help="The database schema: upgrade it, show it, check it; the role wgstore sql reads as.",
    no_args_is_help=True,
)


def _current(url: str) -> str | None:
    """The revision the database is at (None when never migrated), read without writing."""
    engine = create_store_engine(check_url(url), read_only=True)
    try:
        with translate_errors(url), engine.connect() as connection:
            revision = current_revision(connection)
            if revision is None:
                check_wgstore_schema(connection, url)
            connection.rollback()
        check_known(revision, url)  # a newer wgstore's: say so, not "run wgstore db upgrade"
        return revision
    finally:
        engine.dispose()


@db_app.command("upgrade")
def upgrade_command(url: UrlOption = DEFAULT_URL) -> None:
    """Create the tables, or migrate them to the newest revision this wgstore knows."""
    check_url(url)
    before = _current_or_none(url)
    open_store(url, read_only=False, migrate=True).close()
    head = head_revision()
    if before == head:
        typer.echo(f"{store_label(url)} is already at {head} (head)")
    else:
        typer.echo(
            f"upgraded {store_label(url)} from {before or 'an empty database'} to {head} (head)"
        )


def _current_or_none(url: str) -> str | None:
    """Like :func:`_current`, but a SQLite file that does not exist yet is simply empty."""
    from sqlalchemy.engine import make_url

    parsed = make_url(url)
    if parsed.get_backend_name() == "sqlite":
        from pathlib import Path

        if not Path(parsed.database or "").exists():
            return None
    return _current(url)


@db_app.command("current")
def current_command(url: UrlOption = DEFAULT_URL) -> None:
    """Show the revision the database is at, and the newest one this wgstore knows."""
    current = _current(url)
    head = head_revision()
    state = "at head" if current == head else "behind: run `wgstore db upgrade`"
    typer.echo(f"current: {current or 'none (no wgstore tables)'}")
    typer.echo(f"head:    {head} ({state})")


@db_app.command("check")
def check_command(url: UrlOption = DEFAULT_URL) -> None:
    """Exit 0 when the database is at head, 1 (naming the revision) when it is not."""
    current = _current(url)
    head = head_revision()
    if current != head:
        raise CliError(
            f"{store_label(url)} is at {current or 'no revision (no wgstore tables)'}, "
            f"not at head {head}: run `wgstore db upgrade`"
        )
    typer.echo(f"{store_label(url)} is at head ({head})")


@db_app.command("reader")
def reader_command(
    url: UrlOption = DEFAULT_URL,
    drop: bool = typer.Option(
        False,
        "--drop",
        help="Drop the role instead, and give back what making it took from PUBLIC (when it is "
        "the last wgstore reader of the database).",
    ),
) -> None:
    """PostgreSQL: create or update the login role `wgstore sql` runs queries as (once, as a
    superuser); with --drop, remove it.

    This is the step that changes the server: a LOGIN role (cluster-wide: it outlives DROP
    DATABASE; --drop removes it) and, in the store's database, EXECUTE on functions a read-only
    session must not run taken from PUBLIC. `wgstore sql` and `wgstore serve` only use it.
    """
    if parse_url(check_url(url)).get_backend_name() == "sqlite":
        raise CliError(
            "the reader role is for PostgreSQL; on SQLite wgstore sql opens the file read-only"
        )
    if drop:
        dropped = drop_reader(url)
        if not dropped.existed:
            typer.echo(f"{dropped.name}: no such role for {store_label(url)}; nothing to drop")
            return
        typer.echo(f"dropped {dropped.name} and its privileges")
        for change in dropped.changes:
            typer.echo(f"changed: {change}")
        return
    role = prepare_reader(url)
    typer.echo(
        f"{role.name}: LOGIN, CONNECTION LIMIT {READER_CONNECTION_LIMIT}, no other attribute "
        f"and no role membership; USAGE on schema {role.schema} and SELECT on "
        f"{len(role.relations)} tables and views ({', '.join(role.relations)}), nothing else"
    )
    typer.echo(
        f"its settings: {', '.join(f'{k}={v}' for k, v in READER_SETTINGS.items())}; no "
        "EXECUTE on functions that write WAL, create large objects, take advisory locks or "
        "signal sessions"
    )
    for change in role.changes:
        typer.echo(f"changed: {change}")
    typer.echo(
        "wgstore sql logs in as it with a fresh password when its --url user may manage roles; "
        f"otherwise give it a password and pass --reader-url (or {READER_URL_ENV}); "
        "`wgstore db reader --drop` removes it"
    )
