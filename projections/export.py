"""Events as export rows, written to JSON Lines or Parquet (what ``wgstore export`` calls).

Each row is one event: its place in the log, its type, its data and metadata, its hash. In
Parquet, ``data`` and ``metadata`` are JSON text (their shape depends on the event type), and
``recorded_at_ns`` gives the time as integer nanoseconds since the epoch for tools that want it.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Iterable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any

from wgstore.events import EventStore, InvalidArgumentError, RecordedEvent
from wgstore.projections.text import event_json, json_default, json_line
from wgstore.projections.views import stored_events

__all__ = [
    "PARQUET_COLUMNS",
    "export_format",
    "export_row",
    "selected_events",
    "write_jsonl",
    "write_parquet",
]

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
"""The columns of an exported Parquet file, in order."""

_BATCH = 5000
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def export_row(record: RecordedEvent) -> dict[str, Any]:
    """One event as an export row (:func:`~wgstore.projections.text.event_json` plus ``recorded_at_ns``)."""
    row = event_json(record)
    delta = record.recorded_at - _EPOCH
    row["recorded_at_ns"] = (
        delta.days * 86_400 + delta.seconds
    ) * 10**9 + delta.microseconds * 1000
    return row


def export_format(output: str, given: str | None) -> str:
    """``jsonl`` or ``parquet``: ``given``, or else told by the name of ``output`` (``-``: stdout).

    Raises:
        InvalidArgumentError: an unknown format, or a name that does not tell.
    """
    if given:
        if given not in ("jsonl", "parquet"):
            raise InvalidArgumentError(f"--format must be jsonl or parquet, not {given!r}")
        return given
    if output == "-":
        return "jsonl"
    suffix = Path(output).suffix.lower()
    if suffix == ".parquet":
        return "parquet"
    if suffix in (".jsonl", ".json", ".ndjson"):
        return "jsonl"
    raise InvalidArgumentError(
        f"cannot tell the format from {output!r}: name it .jsonl or .parquet, or give --format"
    )


def selected_events(
    store: EventStore,
    streams: Collection[str] | None,
    types: Collection[str],
    *,
    since: datetime | None = None,
    until: datetime | None = None,
) -> Iterator[RecordedEvent]:
    """The events of ``streams`` (``None``: all) of ``types`` (empty: all) recorded in the range,
    up to the log's head when called."""
    head = store.head()  # now, not at the first read: events appended meanwhile stay out
    chosen = None if streams is None else set(streams)
    records = stored_events(store, chosen, list(types), head)
    return (
        record
        for record in records
        if (since is None or record.recorded_at >= since)
        and (until is None or record.recorded_at <= until)
    )


def write_jsonl(records: Iterable[RecordedEvent], output: IO[str]) -> int:
    """Write one JSON line per event to ``output``; returns how many."""
    count = 0
    for record in records:
        output.write(json_line(export_row(record)) + "\n")
        count += 1
    return count


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


def write_parquet(records: Iterable[RecordedEvent], path: Path) -> int:
    """Write the events to a Parquet file at ``path``; returns how many.

    Raises:
        InvalidArgumentError: pyarrow is not installed.
    """
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:
        raise InvalidArgumentError(
            "Parquet needs pyarrow: pip install 'wgstore[export]', or export to .jsonl"
        ) from None
    schema = _parquet_schema()
    count = 0
    with pq.ParquetWriter(path, schema) as writer:
        batch: list[dict[str, Any]] = []
        for record in records:
            row = export_row(record)
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
