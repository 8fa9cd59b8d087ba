"""What every ``wgstore`` command shares: the store URL, opening the store, errors, time, output.

Errors are handled in one place, :class:`WgstoreGroup`: a :class:`CliError`, any
:class:`~wgstore.events.WgstoreError` and a ``ValueError`` from parsing become one red line on
stderr and a non-zero exit, never a traceback. Exit codes:

- 0: done (for ``verify`` / ``db check``: no problem found);
- 1: the store or its data is not as expected (database missing, unreachable, not migrated,
  a broken hash chain, a refused SQL statement);
- 2: the command line is wrong (bad URL, bad time, unknown or ambiguous group id, bad option);
- 130: interrupted with Ctrl-C.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Annotated, Any, NoReturn

import typer
from rich.console import Console
from rich.text import Text
from typer.core import TyperGroup

from wgstore.cli.errors import CliError, UsageProblem
from wgstore.cli.parsing import json_default, json_line, parse_duration, parse_time
from wgstore.events import EventStore, InvalidArgumentError, StoreUnavailableError, WgstoreError
from wgstore.events.engine import mask_url, parse_url
from wgstore.events.streams import group_id_of, group_stream
from wgstore.projections.text import format_time

__all__ = [
    "DEFAULT_URL",
    "URL_ENV",
    "CliError",
    "UrlOption",
    "UsageProblem",
    "WgstoreGroup",
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
]

URL_ENV = "WGSTORE_URL"
DEFAULT_URL = "sqlite:///wgstore.db"

UrlOption = Annotated[
    str,
    typer.Option(
        "--url",
        envvar=URL_ENV,
        help="The store: sqlite:///path.db or postgresql+psycopg://user@host/db.",
        show_envvar=True,
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


def fail(message: str, exit_code: int) -> NoReturn:
    """Print ``message`` as one red line on stderr and exit with ``exit_code``."""
    err_console().print(Text(f"error: {message}", style="bold red"))
    raise typer.Exit(exit_code)


class WgstoreGroup(TyperGroup):
    """The root command group: the one place where errors become a red line and an exit code."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        """A Typer group whose ``--help`` (and every subcommand's) shows no Python types."""
        super().__init__(*args, **kwargs)
        _plain_help(self)

    def invoke(self, ctx: Any) -> Any:
        """Run the chosen command, turning expected errors into a message and an exit code."""
        try:
            return super().invoke(ctx)
        except CliError as error:
            fail(str(error), error.exit_code)
        except InvalidArgumentError as error:  # a version, position or id from the command line
            fail(str(error), 2)
        except WgstoreError as error:
            fail(str(error), 1)
        except ValueError as error:
            fail(str(error), 2)
        except OverflowError as error:  # a number too large for a date or a database integer
            fail(f"a number on the command line is too large ({error})", 2)
        except ConnectionError as error:  # e.g. Ray is not at RAY_ADDRESS
            fail(f"cannot connect: {error}", 1)
        except KeyboardInterrupt:
            err_console().print(Text("interrupted", style="yellow"))
            raise typer.Exit(130) from None


def _plain_help(command: Any) -> None:
    """``--help`` shows what to type, not Python types: no ``<bool>`` after a flag, and a name
    (``--since SINCE``) instead of ``<str>`` after an option that takes a value."""
    for param in getattr(command, "params", ()):
        if getattr(param, "param_type_name", "") == "argument":
            param.display_type_rich = lambda ctx: None  # its name is already in the first column
            continue
        if getattr(param, "param_type_name", "") != "option" or param.metavar is not None:
            continue
        param.metavar = "" if param.is_flag else (param.name or "value").upper()
    for sub in getattr(command, "commands", {}).values():
        _plain_help(sub)
    make_help_option = command.get_help_option
    if getattr(make_help_option, "_wgstore_plain", False):
        return

    def plain_help_option(ctx: Any) -> Any:
        option = make_help_option(ctx)
        if option is not None:
            option.metavar = ""
        return option

    plain_help_option._wgstore_plain = True  # type: ignore[attr-defined]
    command.get_help_option = plain_help_option


def check_url(url: str) -> str:
    """Check that ``url`` is a usable store URL; a bad one is a usage problem (exit 2)."""
    try:
        parse_url(url)
    except StoreUnavailableError as error:
        raise UsageProblem(str(error)) from None
    return url


def open_store(url: str, *, read_only: bool = True) -> EventStore:
    """Open the store at ``url``: read-only (the default, for every read command) or writable.

    Raises:
        UsageProblem: the URL is not a SQLite or PostgreSQL URL.
        StoreUnavailableError / SchemaVersionError: missing, unreachable or not migrated.
    """
    check_url(url)
    return EventStore.open(url, read_only=read_only, migrate=not read_only)


@contextmanager
def opened(url: str, *, read_only: bool = True) -> Iterator[EventStore]:
    """:func:`open_store` as a context manager that closes the store."""
    store = open_store(url, read_only=read_only)
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
        UsageProblem: no group, or more than one, matches.
    """
    group = group.strip()
    group = group_id_of(group) or group
    if not group:
        raise UsageProblem("give a worker group id (or a unique prefix of one)")
    found = [group_id_of(sid) or sid for sid, _ in store.streams(group_stream(group))]
    if group in found:
        return group
    if not found:
        raise UsageProblem(
            f"no worker group id starts with {group!r} in {store_label(store.url)}; "
            "run `wgstore groups` (or `wgstore events`) to list them"
        )
    if len(found) > 1:
        shown = ", ".join(found[:5]) + (", ..." if len(found) > 5 else "")
        raise UsageProblem(
            f"{group!r} matches {len(found)} worker groups ({shown}); give more of the id"
        )
    return found[0]
