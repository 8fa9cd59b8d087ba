"""What every ``wgstore`` command shares: the store URL, opening the store, time, output.

Errors become one red line and an exit code in :class:`wgstore.cli.root.WgstoreGroup`.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Annotated

import typer
from rich.console import Console

from wgstore.cli.errors import CliError, UsageProblem
from wgstore.cli.parsing import json_default, json_line, parse_duration, parse_time
from wgstore.events import EventStore, InvalidArgumentError, StoreUnavailableError
from wgstore.events.engine import mask_url, parse_url
from wgstore.projections.run_views import resolve_run_id
from wgstore.projections.text import format_time
from wgstore.projections.views import resolve_group_id

__all__ = [
    "DEFAULT_URL",
    "ROOT_URL_KEY",
    "URL_ENV",
    "CliError",
    "UrlOption",
    "UsageProblem",
    "err_console",
    "format_time",
    "json_default",
    "json_line",
    "open_store",
    "out_console",
    "parse_duration",
    "parse_time",
    "refuse_blank",
    "resolve_group",
    "resolve_live_or_archived_group",
    "resolve_run",
    "url_from_root",
]

URL_ENV = "WGSTORE_URL"
DEFAULT_URL = "sqlite:///wgstore.db"

ROOT_URL_KEY = "wgstore.url"
"""Where the root command keeps a ``--url`` given before the subcommand (``ctx.meta``)."""


def url_from_root(ctx: typer.Context, param: typer.CallbackParam, value: str) -> str:
    """The store URL of a subcommand: a ``--url`` given before the subcommand
    (``wgstore --url URL groups``) counts as if given after it, and wins over ``WGSTORE_URL``.

    Raises:
        typer.BadParameter: ``--url`` given on both sides of the subcommand, differently.
    """
    root_url: str | None = ctx.meta.get(ROOT_URL_KEY)
    if root_url is None:
        return value
    source = ctx.get_parameter_source(param.name or "url")
    given_here = getattr(source, "name", None) == "COMMANDLINE"  # Typer vendors its own click
    if given_here and value != root_url:
        raise typer.BadParameter(
            f"given twice, as {mask_url(root_url)} before the command and as {mask_url(value)} "
            "after it; give it once"
        )
    return root_url


UrlOption = Annotated[
    str,
    typer.Option(
        "--url",
        envvar=URL_ENV,
        help="The store: sqlite:///path.db or postgresql+psycopg://user@host/db.",
        show_envvar=True,
        callback=url_from_root,
    ),
]


def err_console() -> Console:
    """A console on stderr (made at call time, so test runners see the output)."""
    return Console(stderr=True, highlight=False, soft_wrap=True)


def out_console() -> Console:
    """A console on stdout: full width on a terminal, wide enough not to wrap in a pipe."""
    if sys.stdout.isatty():
        return Console(highlight=False)
    return Console(highlight=False, width=int(os.environ.get("COLUMNS", "0") or 0) or 200)


def check_url(url: str) -> str:
    """Check that ``url`` is a usable store URL; a bad one is a usage problem (exit 2)."""
    try:
        parse_url(url)
    except StoreUnavailableError as error:
        raise UsageProblem(str(error)) from None
    return url


def open_store(url: str, *, read_only: bool = True, migrate: bool = False) -> EventStore:
    """Open the store at ``url``: read-only (the default, for every read command) or writable.

    Only with ``migrate`` are the tables created or upgraded (``wgstore db upgrade``, and
    ``wgstore run``, which records a new run): every other command, writable or not, refuses a
    database without wgstore's schema at head (and a SQLite file that does not exist) the same
    way, and changes nothing in it.

    Raises:
        UsageProblem: the URL is not a SQLite or PostgreSQL URL.
        StoreUnavailableError / SchemaVersionError: missing, unreachable or not migrated.
    """
    check_url(url)
    return EventStore.open(url, read_only=read_only, migrate=migrate and not read_only)


@contextmanager
def opened(url: str, *, read_only: bool = True, migrate: bool = False) -> Iterator[EventStore]:
    """:func:`open_store` as a context manager that closes the store."""
    store = open_store(url, read_only=read_only, migrate=migrate)
    try:
        yield store
    finally:
        store.close()


def store_label(url: str) -> str:
    """The URL for messages, with its password masked."""
    return mask_url(url)


# ---------------------------------------------------------------------- worker group ids


def refuse_blank(**options: str | None) -> None:
    """Refuse an option given as empty text (``--group ""``): it must not mean "everything".

    Keyword names are option names without the dashes, e.g. ``refuse_blank(group=group)``.

    Raises:
        UsageProblem: an option was given, but blank.
    """
    for name, value in options.items():
        if value is not None and not value.strip():
            raise UsageProblem(
                f"--{name} is empty; give a value, or leave the option out to select everything"
            )


def resolve_group(store: EventStore, group: str) -> str:
    """The full id of the worker group whose id is ``group`` or starts with it.

    Raises:
        UsageProblem: no group, or more than one, matches
            (:func:`wgstore.projections.views.resolve_group_id`).
    """
    try:
        return resolve_group_id(store, group)
    except InvalidArgumentError as error:
        raise UsageProblem(str(error)) from None


def resolve_live_or_archived_group(store: EventStore, group: str) -> tuple[str, bool]:
    """:func:`~wgstore.projections.archiving.resolve_group_or_archived`: the group's full id,
    live or archived, and whether it is archived.

    Raises:
        UsageProblem: no group matches, or more than one archived group does.
    """
    from wgstore.projections.archiving import resolve_group_or_archived

    try:
        return resolve_group_or_archived(store, group)
    except InvalidArgumentError as error:
        raise UsageProblem(str(error)) from None


def resolve_run(store: EventStore, run: str) -> str:
    """The full id of the run whose id is ``run`` or starts with it (as :func:`resolve_group`).

    Raises:
        UsageProblem: no run, or more than one, matches
            (:func:`wgstore.projections.run_views.resolve_run_id`).
    """
    try:
        return resolve_run_id(store, run)
    except InvalidArgumentError as error:
        raise UsageProblem(str(error)) from None
