"""``wgstore export``: events of a group, a run, a time range or the whole log, to JSON Lines or Parquet.

The rows and the writers are :mod:`wgstore.projections.export`.
"""

from __future__ import annotations

import sys
from datetime import datetime
from pathlib import Path
from typing import Annotated

import typer
from rich.progress import Progress, SpinnerColumn, TextColumn

from wgstore.cli.common import (
    DEFAULT_URL,
    UrlOption,
    UsageProblem,
    err_console,
    opened,
    parse_time,
    refuse_blank,
    resolve_group,
)
from wgstore.cli.events import check_types, run_streams
from wgstore.events.streams import group_stream
from wgstore.projections.export import (
    PARQUET_COLUMNS,
    export_format,
    selected_events,
    write_jsonl,
    write_parquet,
)

__all__ = ["PARQUET_COLUMNS", "export_command"]


def export_command(
    output: Annotated[
        str,
        typer.Option(
            "--output", "-o", help="The file to write (.jsonl or .parquet); - for stdout."
        ),
    ],
    url: UrlOption = DEFAULT_URL,
    group: Annotated[
        str | None, typer.Option("--group", "-g", help="One worker group (id or prefix).")
    ] = None,
    run: Annotated[
        str | None,
        typer.Option(
            "--run", "-r", help="A run (an id or a unique prefix) and every group started for it."
        ),
    ] = None,
    types: Annotated[
        list[str] | None, typer.Option("--type", "-t", help="Only this event type (repeat).")
    ] = None,
    since: Annotated[
        str | None, typer.Option(help="From this time: ISO 8601 or 10m, 2h, 3d.")
    ] = None,
    until: Annotated[str | None, typer.Option(help="Up to this time.")] = None,
    fmt: Annotated[
        str | None, typer.Option("--format", help="jsonl or parquet (default: from -o).")
    ] = None,
) -> None:
    """Export events to JSON Lines or Parquet, for a group, a run, a time range or everything."""
    refuse_blank(group=group, run=run)
    if group and run:
        raise UsageProblem("give --group or --run, not both")
    kind = export_format(output, fmt)
    if kind == "parquet" and output == "-":
        raise UsageProblem("Parquet cannot go to stdout; give a file name with -o")
    start: datetime | None = parse_time(since) if since else None
    end: datetime | None = parse_time(until) if until else None
    target = None if output == "-" else Path(output)
    if target is not None and not target.parent.exists():
        raise UsageProblem(f"cannot write {target}: the folder {target.parent} does not exist")
    with opened(url) as store:
        type_names = check_types(list(types or []), store)
        streams = None
        if group:
            streams = {group_stream(resolve_group(store, group))}
        elif run:
            streams = run_streams(store, run)
        selected = selected_events(store, streams, type_names, since=start, until=end)
        if target is None:
            count = write_jsonl(selected, sys.stdout)
            return
        columns = (SpinnerColumn(), TextColumn("exporting to {task.fields[path]}"))
        with Progress(*columns, console=err_console(), transient=True) as progress:
            progress.add_task("export", total=None, path=str(target))
            if kind == "parquet":
                count = write_parquet(selected, target)
            else:
                with target.open("w", encoding="utf-8") as handle:
                    count = write_jsonl(selected, handle)
    err_console().print(f"wrote {count} event(s) to {target} ({kind})")
