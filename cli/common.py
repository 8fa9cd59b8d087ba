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

import json
import os
import re
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from enum import Enum
from typing import Annotated, Any, NoReturn
from uuid import UUID

import typer
from rich.console import Console
from rich.text import Text
from typer.core import TyperGroup

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


class CliError(Exception):
    """A problem to report as one line on stderr, exiting with ``exit_code`` (default 1)."""

    exit_code = 1

    def __init__(self, message: str, exit_code: int | None = None) -> None:
        super().__init__(message)
        if exit_code is not None:
            self.exit_code = exit_code


class UsageProblem(CliError):
    """The command line is wrong (exit 2): a bad URL, time, group id or option combination."""

    exit_code = 2


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


# ---------------------------------------------------------------------- time

_DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)\s*(ms|s|m|h|d|w)", re.IGNORECASE)
_UNIT_SECONDS = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


def parse_duration(text: str) -> timedelta:
    """Parse a duration such as ``90s``, ``10m``, ``2h``, ``1h30m``, ``3d`` or ``1w``.

    Raises:
        UsageProblem: not a duration.
    """
    compact = text.strip().lower().replace(" ", "")
    parts = _DURATION_PART.findall(compact)
    if not compact or "".join(f"{n}{u}" for n, u in parts) != compact:
        raise UsageProblem(
            f"{text!r} is not a duration; use a number and a unit, e.g. 30s, 10m, 2h, 1h30m, 3d"
        )
    try:
        return timedelta(seconds=sum(float(n) * _UNIT_SECONDS[u] for n, u in parts))
    except OverflowError:
        raise UsageProblem(
            f"{text!r} is too long a duration (the limit is 999999999 days); use a smaller one"
        ) from None


def parse_time(text: str, *, now: datetime | None = None) -> datetime:
    """Parse a moment: ISO 8601 (naive means UTC), ``now``, or a time ago such as ``10m``/``2h``.

    Returns:
        A timezone-aware UTC datetime.

    Raises:
        UsageProblem: neither an ISO time nor a relative time.
    """
    now = now or datetime.now(UTC)
    value = text.strip()
    if value.lower() == "now":
        return now
    if _DURATION_PART.match(value.lower().removesuffix(" ago")):
        try:
            ago = parse_duration(value.lower().removesuffix("ago").strip())
        except UsageProblem as problem:
            if "too long" in str(problem):
                raise
        else:
            try:
                return now - ago
            except OverflowError:
                raise UsageProblem(
                    f"{text!r} reaches back before the year 1; use a shorter time ago"
                ) from None
    try:
        moment = datetime.fromisoformat(value.replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        raise UsageProblem(
            f"{text!r} is not a time; use ISO 8601 (2024-05-01T14:30:00Z, times without a zone "
            "are UTC) or a time ago such as 10m, 2h, 3d"
        ) from None
    if moment.tzinfo is None:
        return moment.replace(tzinfo=UTC)
    try:
        return moment.astimezone(UTC)
    except OverflowError:
        raise UsageProblem(
            f"{text!r} is outside the years 1 to 9999 once converted to UTC; give a time "
            "within them"
        ) from None


# ---------------------------------------------------------------------- JSON


def json_default(value: Any) -> Any:
    """Turn the values databases and events hold into JSON: times, ids, bytes, enums, decimals."""
    if isinstance(value, datetime):
        if value.tzinfo is None:
            value = value.replace(tzinfo=UTC)
        return value.isoformat()
    if isinstance(value, date):
        return value.isoformat()
    if isinstance(value, timedelta):
        return value.total_seconds()
    if isinstance(value, UUID):
        return str(value)
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value).hex()
    if isinstance(value, Enum):
        return value.value
    if isinstance(value, Decimal):
        return float(value)
    if isinstance(value, set | frozenset | tuple):
        return list(value)
    import msgspec

    try:
        return msgspec.to_builtins(value)
    except TypeError:
        return str(value)


def json_line(value: Any) -> str:
    """One JSON document on one line (sorted keys), for ``--json`` output."""
    return json.dumps(value, default=json_default, sort_keys=True, ensure_ascii=False)
