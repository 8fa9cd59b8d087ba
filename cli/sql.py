"""``wgstore sql "SELECT ..."``: read-only SQL on the log, the read models and the views.

Writes are refused by the database itself, not by parsing the query:

- SQLite: the file is opened with ``mode=ro`` and ``PRAGMA query_only = ON``, and an authorizer
  lets the statement do nothing but read tables and call functions (no ATTACH, no PRAGMA, no
  temporary tables); ``sqlite3`` runs exactly one statement per ``execute``.
- PostgreSQL: the statement runs in a ``READ ONLY`` transaction that is always rolled back,
  as the predefined role ``pg_read_all_data`` when the user may take it (so server-side side
  effects such as ``lo_export`` or ``pg_terminate_backend`` are refused too), through the
  extended query protocol, which refuses more than one statement.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Generator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table
from rich.text import Text

from wgstore.cli.common import (
    DEFAULT_URL,
    CliError,
    UrlOption,
    UsageProblem,
    check_url,
    database_errors,
    err_console,
    json_line,
    out_console,
    parse_duration,
)
from wgstore.events.engine import create_store_engine, parse_url

__all__ = ["QueryResult", "run_query", "sql_command"]

_BATCH = 500
_SQLITE_ALLOWED = {
    sqlite3.SQLITE_SELECT,
    sqlite3.SQLITE_READ,
    sqlite3.SQLITE_FUNCTION,
    sqlite3.SQLITE_RECURSIVE,
}
_REFUSED = "refused: wgstore sql only reads"


@dataclass
class QueryResult:
    """The columns of a query and an iterator over its rows (at most ``limit`` of them)."""

    columns: list[str]
    rows: Generator[Sequence[Any], None, None]


def _sqlite_authorizer(action: int, *_args: object) -> int:
    """Let a statement read and compute, nothing else (ATTACH, PRAGMA, CREATE ... are denied)."""
    return sqlite3.SQLITE_OK if action in _SQLITE_ALLOWED else sqlite3.SQLITE_DENY


def _sqlite_rows(path: Path, query: str, timeout_s: float) -> QueryResult:
    if not path.exists():
        raise CliError(f"no wgstore database at {path}: check the path or --url / WGSTORE_URL")
    connection = sqlite3.connect(
        f"{path.resolve().as_uri().replace('file://', 'file:', 1)}?mode=ro",
        uri=True,
        isolation_level=None,
        check_same_thread=False,
    )
    deadline = time.monotonic() + timeout_s
    connection.execute("PRAGMA query_only = ON")
    connection.set_authorizer(_sqlite_authorizer)
    connection.set_progress_handler(lambda: int(time.monotonic() > deadline), 10_000)
    try:
        cursor = connection.execute(query)
    except sqlite3.ProgrammingError as error:
        connection.close()
        if "one statement" in str(error):
            raise CliError(f"{_REFUSED} exactly one statement; SQLite ran none of them") from None
        raise CliError(f"SQL error: {error}") from None
    except sqlite3.Error as error:
        connection.close()
        raise CliError(_sqlite_message(error)) from None
    columns = [d[0] for d in cursor.description or ()]

    def rows() -> Generator[Sequence[Any], None, None]:
        try:
            while batch := cursor.fetchmany(_BATCH):
                yield from batch
        except sqlite3.Error as error:
            raise CliError(_sqlite_message(error)) from None
        finally:
            connection.close()

    return QueryResult(columns, rows())


def _sqlite_message(error: sqlite3.Error) -> str:
    text = str(error)
    if any(
        word in text for word in ("not authorized", "authorization denied", "readonly", "read-only")
    ):
        return f"{_REFUSED}; the database refused this statement ({text})"
    if "interrupted" in text:
        return "the query ran past --timeout and was stopped"
    return f"SQL error: {text}"


def _postgres_rows(url: str, query: str, timeout_s: float) -> QueryResult:
    import psycopg

    engine = create_store_engine(url, read_only=True)
    try:
        with database_errors(url):
            raw = engine.raw_connection()
    except CliError:
        engine.dispose()
        raise
    connection: psycopg.Connection[Any] = raw.driver_connection  # type: ignore[assignment]

    def close() -> None:
        try:
            if not connection.closed:
                connection.rollback()  # nothing is ever committed
        finally:
            raw.close()
            engine.dispose()

    try:
        connection.autocommit = False
        cursor = connection.cursor()
        cursor.execute("SET TRANSACTION READ ONLY")
        cursor.execute(f"SET LOCAL statement_timeout = {max(1, int(timeout_s * 1000))}")
        cursor.execute(
            "SELECT to_regrole('pg_read_all_data') IS NOT NULL "
            "AND pg_has_role(current_user, 'pg_read_all_data', 'MEMBER')"
        )
        row = cursor.fetchone()
        if row and row[0]:
            cursor.execute("SET LOCAL ROLE pg_read_all_data")
        # prepare=True sends the query with the extended protocol: one statement only.
        cursor.execute(query, prepare=True)
    except psycopg.Error as error:
        close()
        raise CliError(_postgres_message(error)) from None
    except BaseException:
        close()
        raise
    columns = [d.name for d in cursor.description or ()]

    def rows() -> Generator[Sequence[Any], None, None]:
        try:
            if cursor.description is None:
                return
            while batch := cursor.fetchmany(_BATCH):
                yield from batch
        except psycopg.Error as error:
            raise CliError(_postgres_message(error)) from None
        finally:
            close()

    return QueryResult(columns, rows())


def _postgres_message(error: Any) -> str:
    text = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
    state = getattr(error, "sqlstate", None)
    if state in ("25006", "42501") or "read-only" in text:
        return f"{_REFUSED}; the database refused this statement ({text})"
    if "multiple commands" in text:
        return f"{_REFUSED} exactly one statement; PostgreSQL ran none of them"
    if state == "57014":
        return "the query ran past --timeout and was stopped"
    return f"SQL error: {text}"


def run_query(url: str, query: str, *, timeout_s: float = 60.0) -> QueryResult:
    """Run one read-only statement on the store at ``url``.

    Raises:
        UsageProblem: a bad URL or an empty query.
        CliError: the database refused the statement, or it failed.
    """
    if not query.strip():
        raise UsageProblem('give a query, e.g. wgstore sql "SELECT * FROM wg_event_log LIMIT 10"')
    parsed = parse_url(check_url(url))
    if parsed.get_backend_name() == "sqlite":
        return _sqlite_rows(Path(parsed.database or ""), query, timeout_s)
    return _postgres_rows(url, query, timeout_s)


def _cell(value: Any) -> Text:
    if value is None:
        return Text("NULL", style="dim")
    if isinstance(value, dict | list):
        return Text(json_line(value))
    if isinstance(value, bytes | memoryview):
        return Text(bytes(value).hex())
    return Text(str(value))


def _unique(columns: list[str]) -> list[str]:
    seen: dict[str, int] = {}
    names = []
    for column in columns:
        seen[column] = seen.get(column, 0) + 1
        names.append(column if seen[column] == 1 else f"{column}_{seen[column]}")
    return names


def sql_command(
    query: Annotated[str, typer.Argument(help='One SELECT, e.g. "SELECT * FROM wg_event_log".')],
    url: UrlOption = DEFAULT_URL,
    as_json: Annotated[bool, typer.Option("--json", help="One JSON object per row.")] = False,
    limit: Annotated[int, typer.Option(min=0, help="Show at most this many rows (0: all).")] = 1000,
    timeout: Annotated[str, typer.Option(help="Stop the query after this long.")] = "60s",
) -> None:
    """Run one read-only SQL query on the log, the read models and the views."""
    timeout_s = parse_duration(timeout).total_seconds()
    result = run_query(url, query, timeout_s=timeout_s)
    columns = _unique(result.columns)
    shown = 0
    more = False
    table = None if as_json else Table(*columns, show_lines=False)
    for row in result.rows:
        if limit and shown >= limit:
            more = True
            break
        shown += 1
        if table is None:
            typer.echo(json_line(dict(zip(columns, row, strict=True))))
        else:
            table.add_row(*(_cell(value) for value in row))
    result.rows.close()
    if table is not None:
        if columns:
            out_console().print(table)
        err_console().print(Text(f"{shown} row{'s' if shown != 1 else ''}", style="dim"))
    if more:
        err_console().print(
            Text(f"showing the first {limit} rows; --limit 0 shows all", style="yellow")
        )
