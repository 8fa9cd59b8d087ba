"""The archive's files: plain Parquet, one file per run per batch, under a folder or fsspec URL.

Layout under the location::

    events/<run id>/<batch id>.parquet   one run's events of one batch, in position order
    manifests/<batch id>.json            the batch's manifest (:mod:`archive_manifest`)

Every column a reader of ``wg_events`` sees is there as stored (:data:`ARROW_SCHEMA`): ``data``
and ``metadata`` are the JSON text each backend stores (the text the stream hash covers), with
``hash``, ``log_hash`` and ``mac`` beside them, so ``verify`` checks an archived event as it
checks a live one, and DuckDB, pandas, Spark or ``ray.data.read_parquet`` read the folder as it
is. A file is written under a temporary name and moved into place, then read back whole: its
SHA-256 and its rows are what the manifest records.

Needs ``pyarrow`` and ``fsspec`` (``pip install 'wgstore[archive]'``; ``s3://`` and the like need
their fsspec filesystem, ``s3fs``, ``gcsfs``...).
"""

from __future__ import annotations

import hashlib
import io
import uuid
from collections.abc import Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any, NamedTuple, cast
from urllib.parse import quote

from wgstore.events.decoding import decode_log
from wgstore.events.errors import InvalidArgumentError, StoreUnavailableError
from wgstore.events.recorder import LogRow

if TYPE_CHECKING:
    from collections.abc import Iterator

    import pyarrow as pa
    from fsspec import AbstractFileSystem

    from wgstore.events.codec import Codec
    from wgstore.events.records import RecordedEvent

__all__ = [
    "ArchiveLocation",
    "ArchiveRow",
    "arrow_schema",
    "parse_rows",
    "parse_table",
    "records_of",
    "rows_table",
    "table_bytes",
]


class ArchiveRow(NamedTuple):
    """One archived event, in the order ``verify``'s checker reads a row."""

    position: int
    stream_id: str
    stream_version: int
    event_id: str
    event_type: str
    schema_version: int
    data: str
    metadata: str
    recorded_at: datetime
    hash: str
    log_hash: str
    mac: str | None


def _arrow() -> Any:
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:  # pragma: no cover - the dev install has it
        raise InvalidArgumentError(
            "the archive needs pyarrow and fsspec: pip install 'wgstore[archive]'"
        ) from None
    return pa, pq


def arrow_schema() -> pa.Schema:
    """The columns of an archive file (``run_id`` is the run the file holds)."""
    pa, _ = _arrow()
    return pa.schema(
        [
            ("position", pa.int64()),
            ("stream_id", pa.string()),
            ("stream_version", pa.int64()),
            ("event_id", pa.string()),
            ("event_type", pa.string()),
            ("schema_version", pa.int32()),
            ("data", pa.string()),
            ("metadata", pa.string()),
            ("recorded_at", pa.timestamp("us", tz="UTC")),
            ("hash", pa.string()),
            ("log_hash", pa.string()),
            ("mac", pa.string()),
            ("run_id", pa.string()),
        ]
    )


def rows_table(rows: Sequence[Sequence[Any]], run_id: str) -> pa.Table:
    """An Arrow table of ``rows`` (of run ``run_id``): :class:`ArchiveRow` values, or rows as
    read from ``wg_events`` in the same column order, whose ``recorded_at`` is what the
    backend's recorder reads (Postgres: microseconds since the epoch; SQLite: UTC text)."""
    pa, _ = _arrow()
    schema = arrow_schema()
    columns: list[Any] = [list(column) for column in zip(*rows, strict=True)] or [
        [] for _ in ArchiveRow._fields
    ]
    times = columns[8]
    if times and isinstance(times[0], int | str):  # as stored: converted by Arrow, not per row
        naive = pa.array(times).cast(pa.timestamp("us"))
        columns[8] = naive.cast(schema.field("recorded_at").type)
    columns.append([run_id] * len(rows))
    return pa.Table.from_arrays(
        [
            column if isinstance(column, pa.Array) else pa.array(column, type=field.type)
            for column, field in zip(columns, schema, strict=True)
        ],
        schema=schema,
    )


def table_bytes(table: pa.Table) -> bytes:
    """The Parquet file of an archive table (zstd, dictionary-encoded strings)."""
    _, pq = _arrow()
    sink = io.BytesIO()
    pq.write_table(table, sink, compression="zstd")
    return sink.getvalue()


def parse_table(data: bytes, name: str) -> pa.Table:
    """The table of an archive file's bytes.

    Raises:
        ValueError: they are not an archive file.
    """
    pa, pq = _arrow()
    try:
        table = pq.read_table(io.BytesIO(data))
    except (pa.ArrowException, ValueError) as error:
        raise ValueError(f"{name} is not a wgstore archive file: {error}") from None
    missing = [n for n in ArchiveRow._fields if n not in table.column_names]
    if missing:
        raise ValueError(f"{name} is not a wgstore archive file: it has no column {missing}")
    return table


def _rows_of(table: pa.Table) -> list[ArchiveRow]:
    names = ArchiveRow._fields
    columns = [table.column(name).to_pylist() for name in names]
    return [ArchiveRow(*values) for values in zip(*columns, strict=True)]


def _protocols(fs: Any) -> tuple[str, ...]:
    protocol = fs.protocol
    return (protocol,) if isinstance(protocol, str) else tuple(protocol)


class ArchiveLocation:
    """An archive's folder or fsspec URL (``s3://bucket/prefix``), opened once."""

    def __init__(self, location: str) -> None:
        if not location or not location.strip():
            raise InvalidArgumentError("an archive location is a folder or an fsspec URL")
        _arrow()
        import fsspec

        self.location = location
        try:
            fs, root = fsspec.core.url_to_fs(location)
        except (ImportError, ValueError) as error:
            raise InvalidArgumentError(
                f"cannot open the archive location {location!r}: {error} (a folder, or an "
                "fsspec URL whose filesystem is installed: s3fs for s3://, gcsfs for gs://)"
            ) from None
        self.fs: AbstractFileSystem = fs
        self.root = root.rstrip("/")
        if "file" in _protocols(fs):  # a folder: named absolutely, as every later reader finds it
            self.location = self.root

    def __repr__(self) -> str:
        return f"ArchiveLocation({self.location!r})"

    @staticmethod
    def run_file(batch_id: str, run_id: str) -> str:
        """Where one run's file of a batch goes, relative to the location."""
        return f"events/{quote(run_id, safe='')}/{batch_id}.parquet"

    @staticmethod
    def manifest_file(batch_id: str) -> str:
        """Where a batch's manifest goes, relative to the location."""
        return f"manifests/{batch_id}.json"

    def _full(self, relative: str) -> str:
        return f"{self.root}/{relative}"

    def write_bytes(self, relative: str, data: bytes) -> None:
        """Write ``data`` under a temporary name and move it into place (a reader never sees
        half a file).

        Raises:
            StoreUnavailableError: the location refused the write (full, unreachable, read-only).
        """
        path = self._full(relative)
        partial = f"{path}.{uuid.uuid4().hex}.partial"
        try:
            self.fs.makedirs(path.rsplit("/", 1)[0], exist_ok=True)
            with self.fs.open(partial, "wb") as out:
                out.write(data)
            self.fs.mv(partial, path)
        except OSError as error:
            try:
                if self.fs.exists(partial):
                    self.fs.rm(partial)
            except OSError:
                pass
            raise StoreUnavailableError(
                f"cannot write {path} in the archive {self.location!r}: {error}"
            ) from None

    def read_bytes(self, relative: str) -> bytes:
        """The bytes of a file of the archive.

        Raises:
            StoreUnavailableError: it is missing or cannot be read.
        """
        path = self._full(relative)
        try:
            with self.fs.open(path, "rb") as source:
                return bytes(source.read())
        except (OSError, ValueError) as error:
            raise StoreUnavailableError(
                f"cannot read {path} of the archive {self.location!r}: {error}"
            ) from None

    def exists(self, relative: str) -> bool:
        """True when the file is there."""
        try:
            return bool(self.fs.exists(self._full(relative)))
        except OSError:
            return False

    def remove(self, relative: str) -> None:
        """Delete a file of the archive (a missing one is no error)."""
        path = self._full(relative)
        try:
            if self.fs.exists(path):
                self.fs.rm(path)
        except OSError as error:
            raise StoreUnavailableError(
                f"cannot delete {path} of the archive {self.location!r}: {error}"
            ) from None

    def parquet_bytes(self, rows: Sequence[Sequence[Any]], run_id: str) -> bytes:
        """The Parquet file of ``rows`` (see :func:`rows_table`)."""
        return table_bytes(rows_table(rows, run_id))

    def read_rows(self, relative: str, sha256: str | None = None) -> list[ArchiveRow]:
        """The events of one archive file, checked against ``sha256`` when given.

        Raises:
            StoreUnavailableError: the file is missing or unreadable.
            ValueError: its SHA-256 is not ``sha256``, or it is not an archive file.
        """
        data = self.read_bytes(relative)
        if sha256 is not None and hashlib.sha256(data).hexdigest() != sha256:
            raise ValueError(
                f"{self._full(relative)} is not the file its manifest names (its SHA-256 "
                "differs): it was changed or swapped"
            )
        return parse_rows(data, self._full(relative))


def parse_rows(data: bytes, name: str) -> list[ArchiveRow]:
    """The events of an archive file's bytes.

    Raises:
        ValueError: they are not an archive file.
    """
    pa, _ = _arrow()
    try:
        return _rows_of(parse_table(data, name))
    except pa.ArrowException as error:
        raise ValueError(f"{name} is not a wgstore archive file: {error}") from None


def _as_time(at: Any) -> datetime:
    return cast(datetime, at)


def records_of(codec: Codec, rows: Sequence[ArchiveRow]) -> Iterator[RecordedEvent]:
    """The decoded records of archived rows, as a read of the live log gives them (their
    ``recorded_at`` is already an aware datetime, passed through as the stored time)."""
    return decode_log(codec, _as_time, (LogRow(*cast(tuple[Any, ...], row[:10])) for row in rows))
