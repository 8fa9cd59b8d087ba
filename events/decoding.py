"""Stored rows as :class:`~wgstore.events.records.RecordedEvent`\\ s: the decode of every read.

The hot loop of every replay and follower: per row, the event payload goes through the type's
msgspec decoder in C; values that rows share (a batch has one time and one metadata text) are
decoded once, and each event type is looked up in the registry once per read, not per row.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable, Iterator
from datetime import UTC, datetime
from typing import Any

import msgspec

from wgstore.events.codec import DECODE_ERRORS, Codec
from wgstore.events.recorder import LogRow, StoredTime, StreamRow
from wgstore.events.records import RecordedEvent

__all__ = ["decode_log", "decode_stream"]

# Stored ids as UUIDs, parsed in C: the id in quotes is a JSON string. A third of UUID(text)'s
# cost, and cheaper than msgspec.convert(text, UUID), which resolves the type on every call.
_parse_uuid: Callable[[str], uuid.UUID] = msgspec.json.Decoder(uuid.UUID).decode
_NO_TIME = datetime.min.replace(tzinfo=UTC)  # before the first row: replaced at once


def decode_log(
    codec: Codec, time_of: Callable[[StoredTime], datetime], rows: Iterable[LogRow]
) -> Iterator[RecordedEvent]:
    """The records of rows read in log order (``time_of``: the recorder's)."""
    decoders: dict[str, tuple[int, Callable[[str], Any] | None]] = {}
    decode_json = msgspec.json.decode
    parse_uuid = _parse_uuid
    # The records of a batch share one metadata dict, as the records append returns do.
    last_at: StoredTime | None = None
    last_time = _NO_TIME
    last_meta: str | None = None
    metadata: dict[str, Any] = {}
    for (
        position,
        stream_id,
        version,
        event_id,
        type_,
        schema_version,
        data,
        meta,
        at,
        hash_,
    ) in rows:
        if at != last_at:
            last_at, last_time = at, time_of(at)
        if meta != last_meta:
            last_meta, metadata = meta, decode_json(meta)
        fast = decoders.get(type_)
        if fast is not None and fast[0] == schema_version and fast[1] is not None:
            try:
                event = fast[1](data)
            except DECODE_ERRORS:  # the slow path raises the EventDecodeError
                event = _event(codec, decoders, type_, schema_version, data, stream_id, position)
        else:
            event = _event(codec, decoders, type_, schema_version, data, stream_id, position)
        yield RecordedEvent(
            position=position,
            stream_id=stream_id,
            version=version,
            event_id=parse_uuid(f'"{event_id}"'),
            type=type_,
            schema_version=schema_version,
            event=event,
            metadata=metadata,
            recorded_at=last_time,
            hash=hash_,
        )


def decode_stream(
    codec: Codec,
    time_of: Callable[[StoredTime], datetime],
    rows: Iterable[StreamRow],
    stream_id: str,
) -> Iterator[RecordedEvent]:
    """The records of rows of stream ``stream_id`` (:func:`decode_log` for rows without the
    stream id; the same loop, kept apart so that neither pays a branch per row)."""
    decoders: dict[str, tuple[int, Callable[[str], Any] | None]] = {}
    decode_json = msgspec.json.decode
    parse_uuid = _parse_uuid
    last_at: StoredTime | None = None
    last_time = _NO_TIME
    last_meta: str | None = None
    metadata: dict[str, Any] = {}
    for position, version, event_id, type_, schema_version, data, meta, at, hash_ in rows:
        if at != last_at:
            last_at, last_time = at, time_of(at)
        if meta != last_meta:
            last_meta, metadata = meta, decode_json(meta)
        fast = decoders.get(type_)
        if fast is not None and fast[0] == schema_version and fast[1] is not None:
            try:
                event = fast[1](data)
            except DECODE_ERRORS:  # the slow path raises the EventDecodeError
                event = _event(codec, decoders, type_, schema_version, data, stream_id, position)
        else:
            event = _event(codec, decoders, type_, schema_version, data, stream_id, position)
        yield RecordedEvent(
            position=position,
            stream_id=stream_id,
            version=version,
            event_id=parse_uuid(f'"{event_id}"'),
            type=type_,
            schema_version=schema_version,
            event=event,
            metadata=metadata,
            recorded_at=last_time,
            hash=hash_,
        )


def _event(
    codec: Codec,
    decoders: dict[str, tuple[int, Callable[[str], Any] | None]],
    type_: str,
    schema_version: int,
    data: str,
    stream_id: str,
    position: int,
) -> Any:
    """The event of a row its reader has no fast decoder for (yet), or whose fast decode
    failed: caches the type's fast decoder (None: an unregistered type, or another schema
    version), then decodes (upcast, or as an ``UnknownEvent``, or raising the
    ``EventDecodeError`` of a payload that does not decode)."""
    known = decoders.get(type_)
    if known is None:
        known = decoders[type_] = (schema_version, codec.current_decoder(type_, schema_version))
    fast = known[1]
    if fast is None or known[0] != schema_version:
        return codec.decode(type_, schema_version, data, stream_id=stream_id, position=position)
    try:
        return fast(data)
    except DECODE_ERRORS:  # decode again to raise the EventDecodeError
        codec.decode(type_, schema_version, data, stream_id=stream_id, position=position)
        raise
