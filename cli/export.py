"""``wgstore export``: events of a group, a run, a time range or the whole log, to JSON Lines or Parquet.

Each row is one event: its place in the log, its type, its data and metadata, its hash. In
Parquet, ``data`` and ``metadata`` are JSON text (their shape depends on the event type), and
``recorded_at_ns`` gives the time as integer nanoseconds since the epoch for tools that want it.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.progress import Progress, SpinnerColumn, TextColumn

from wgstore.cli.common import (
    DEFAULT_URL,
    UrlOption,
    UsageProblem,
    err_console,
    json_default,
    json_line,
    opened,
    parse_time,
    refuse_blank,
    resolve_group,
)
from wgstore.cli.events import check_types, run_streams
from wgstore.cli.render import event_json
from wgstore.events import RecordedEvent
from wgstore.events.streams import group_stream
from wgstore.projections.views import stored_events

__all__ = ["PARQUET_COLUMNS", "export_command"]

PARQUET_COLUMNS = (
    "position",
    "stream_id",
    "version",
    "event_id",
    "type",
    "schema_version",
    "recorded_at",
    "recorded_at_ns",
    "data",
    "metadata",
    "hash",
)
_BATCH = 5000
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def _row(record: RecordedEvent) -> dict[str, Any]:
    row = event_json(record)
    delta = record.recorded_at - _EPOCH
    row["recorded_at_ns"] = (
        delta.days * 86_400 + delta.seconds
    ) * 10**9 + delta.microseconds * 1000
    return row


def _parquet_schema() -> Any:
    import pyarrow as pa

    return pa.schema(
        [
            ("position", pa.int64()),
            ("stream_id", pa.string()),
            ("version", pa.int32()),
            ("event_id", pa.string()),
            ("type", pa.string()),
            ("schema_version", pa.int16()),
            ("recorded_at", pa.timestamp("us", tz="UTC")),
            ("recorded_at_ns", pa.int64()),
            ("data", pa.string()),
            ("metadata", pa.string()),
            ("hash", pa.string()),
        ]
    )


def _write_parquet(rows: Iterator[RecordedEvent], path: Path) -> int:
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:
        raise UsageProblem(
            "Parquet needs pyarrow: pip install 'wgstore[export]', or export to .jsonl"
        ) from None
    schema = _parquet_schema()
    count = 0
    with pq.ParquetWriter(path, schema) as writer:
        batch: list[dict[str, Any]] = []
        for record in rows:
            row = _row(record)
            row["recorded_at"] = record.recorded_at
            row["data"] = json.dumps(row["data"], default=json_default, sort_keys=True)
            row["metadata"] = json.dumps(row["metadata"], default=json_default, sort_keys=True)
            batch.append(row)
            count += 1
            if len(batch) >= _BATCH:
                writer.write_table(pa.Table.from_pylist(batch, schema=schema))
                batch = []
        if batch or count == 0:
            writer.write_table(pa.Table.from_pylist(batch, schema=schema))
    return count


def _write_jsonl(rows: Iterator[RecordedEvent], output: Any) -> int:
    count = 0
    for record in rows:
        output.write(json_line(_row(record)) + "\n")
        count += 1
    return count


def _format_of(output: str, given: str | None) -> str:
    if given:
        if given not in ("jsonl", "parquet"):
            raise UsageProblem(f"--format must be jsonl or parquet, not {given!r}")
        return given
    if output == "-":
        return "jsonl"
    suffix = Path(output).suffix.lower()
    if suffix == ".parquet":
        return "parquet"
    if suffix in (".jsonl", ".json", ".ndjson"):
        return "jsonl"
    raise UsageProblem(
        f"cannot tell the format from {output!r}: name it .jsonl or .parquet, or give --format"
    )


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
        str | None, typer.Option("--run", "-r", help="A run and every group started for it.")
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
    kind = _format_of(output, fmt)
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
        head = store.head()

        def selected() -> Iterator[RecordedEvent]:
            for record in stored_events(store, streams, type_names, head):
                if start is not None and record.recorded_at < start:
                    continue
                if end is not None and record.recorded_at > end:
                    continue
                yield record

        if target is None:
            count = _write_jsonl(selected(), sys.stdout)
            return
        columns = (SpinnerColumn(), TextColumn("exporting to {task.fields[path]}"))
        with Progress(*columns, console=err_console(), transient=True) as progress:
            progress.add_task("export", total=None, path=str(target))
            if kind == "parquet":
                count = _write_parquet(selected(), target)
            else:
                with target.open("w", encoding="utf-8") as handle:
                    count = _write_jsonl(selected(), handle)
    err_console().print(f"wrote {count} event(s) to {target} ({kind})")
