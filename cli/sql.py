"""``wgstore sql "SELECT ..."``: one read-only SQL query on the log, the read models and the views.

The command parses its options, calls :func:`wgstore.events.sql_reader.run_read_only` and renders
the rows. That function is where writes are refused, by the database itself: on SQLite a
read-only file with an authorizer, on PostgreSQL a login role that can only read (see its
docstring and docs/sql.md). When the SQL read models are behind the log, one line on stderr
says by how many events.
"""

from __future__ import annotations

from typing import Annotated, Any

import typer
from rich.table import Table
from rich.text import Text

from wgstore.cli.common import (
    DEFAULT_URL,
    UrlOption,
    UsageProblem,
    check_url,
    err_console,
    json_line,
    out_console,
    parse_duration,
)
from wgstore.events.sql_reader import (
    MAX_RESULT_BYTES,
    MAX_RESULT_ROWS,
    MAX_TIMEOUT_S,
    READER_URL_ENV,
    QueryResult,
    run_read_only,
)

__all__ = ["run_query", "sql_command"]

ReaderUrlOption = Annotated[
    str | None,
    typer.Option(
        "--reader-url",
        envvar=READER_URL_ENV,
        help=(
            "PostgreSQL: log in as this read-only user instead of the reader role "
            "`wgstore db reader` makes (for a --url user that may not ready that role)."
        ),
        show_envvar=True,
    ),
]


def _timeout_seconds(text: str) -> float:
    try:
        seconds = parse_duration(text).total_seconds()
    except OverflowError:
        seconds = float("inf")
    if not 0 < seconds <= MAX_TIMEOUT_S:
        raise UsageProblem(
            f"--timeout {text!r} must be more than 0 and at most {MAX_TIMEOUT_S / 3600:g}h, "
            "e.g. 30s, 10m"
        )
    return seconds


def run_query(
    url: str,
    query: str,
    *,
    timeout_s: float = 60.0,
    reader_url: str | None = None,
    max_rows: int | None = None,
) -> QueryResult:
    """Run one read-only statement on the store at ``url`` (see ``run_read_only``), reading at
    most ``max_rows`` rows (None: all, within ``run_read_only``'s bounds).

    ``QueryResult.behind`` counts the events the SQL read models have not applied yet.

    Raises:
        UsageProblem: a bad URL or an empty query.
        ValueError: not one statement (from ``run_read_only``).
        WgstoreError: the database refused the statement, it failed, or no reader session.
    """
    from wgstore.projections import READ_MODELS_SUBSCRIPTION

    if not query.strip():
        raise UsageProblem('give a query, e.g. wgstore sql "SELECT * FROM wg_event_log LIMIT 10"')
    check_url(url)
    if reader_url:
        check_url(reader_url)
    # A ValueError (a bad statement shape) reaches WgstoreGroup, the one place that maps
    # errors to exit codes (2 for it).
    return run_read_only(
        url,
        query,
        timeout_s=timeout_s,
        reader_url=reader_url,
        behind_of=READ_MODELS_SUBSCRIPTION,
        max_rows=max_rows,
    )


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
    limit: Annotated[
        int,
        typer.Option(
            min=0,
            max=MAX_RESULT_ROWS,
            help=f"Show at most this many rows (0: all, up to {MAX_RESULT_ROWS:,} and "
            f"{MAX_RESULT_BYTES // 2**20} MB).",
        ),
    ] = 1000,
    timeout: Annotated[
        str, typer.Option(help="Stop the query after this long (at most 1h).")
    ] = "60s",
    reader_url: ReaderUrlOption = None,
) -> None:
    """Run one read-only SQL query on the log, the read models and the views."""
    timeout_s = _timeout_seconds(timeout)
    result = run_query(
        url, query, timeout_s=timeout_s, reader_url=reader_url or None, max_rows=limit or None
    )
    columns = _unique(result.columns)
    shown = 0
    table = None if as_json else Table(*columns, show_lines=False)
    for row in result.rows:
        shown += 1
        if table is None:
            typer.echo(json_line(dict(zip(columns, row, strict=True))))
        else:
            table.add_row(*(_cell(value) for value in row))
    if table is not None:
        if columns:
            out_console().print(table)
        err_console().print(Text(f"{shown} row{'s' if shown != 1 else ''}", style="dim"))
    if result.more:
        err_console().print(
            Text(f"showing the first {limit} rows; --limit 0 shows all", style="yellow")
        )
    if result.behind:
        err_console().print(
            Text(
                f"the read models are {result.behind} event{'s' if result.behind != 1 else ''} "
                "behind the log (wg_events and wg_event_log are current): run "
                "`wgstore projections catch-up`",
                style="yellow",
            )
        )
