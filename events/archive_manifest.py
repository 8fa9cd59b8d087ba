"""The manifest of an archive batch: what its files hold and where its cut meets the live log.

One JSON document per batch, written beside its files (``manifests/<batch>.json``) and kept in
``wg_archive_batches``; its SHA-256 is in the batch's signed ``LogArchived`` event, so a changed
or swapped manifest is caught by ``verify`` however it was changed. The bytes are msgspec's
JSON of :class:`Manifest` (fields in declaration order): the digest is over those bytes as
stored, never over a re-encoding.

A :class:`ArchivedRange` is a run of one run's events with no live event, and no other range,
between them. ``log_hash_before`` is the log hash of the event just before its first in the
whole log (a live event's or another range's last), ``log_hash_last`` its last event's: with
them, ``verify`` follows the log chain across the cut without the files (and with the files
checks every event inside).
"""

from __future__ import annotations

import functools
import hashlib

import msgspec

__all__ = [
    "MANIFEST_FORMAT",
    "ArchivedFile",
    "ArchivedRange",
    "Manifest",
    "decode_manifest",
    "encode_manifest",
    "manifest_sha256",
]

MANIFEST_FORMAT = "wgstore-archive/1"


class ArchivedRange(msgspec.Struct, frozen=True):
    """Positions ``first`` to ``last`` of run ``run_id``: ``events`` events, no live one
    between."""

    run_id: str
    first: int
    last: int
    events: int
    log_hash_before: str
    log_hash_last: str


class ArchivedFile(msgspec.Struct, frozen=True):
    """One Parquet file of the batch: one run's events (``path`` relative to the location)."""

    path: str
    run_id: str
    sha256: str
    events: int
    bytes: int
    first_position: int
    last_position: int
    streams: dict[str, int]
    """The run's streams in the file, each with its last version."""
    name: str = ""
    status: str = ""
    """How the run ended (``FINISHED``, ``ERRORED``, ``ABORTED``), for listings that read no file."""
    created_at: str = ""
    ended_at: str = ""
    """ISO times ("" unknown)."""


class Manifest(msgspec.Struct, frozen=True):
    """What one archive batch holds (see the module docstring)."""

    batch_id: str
    created_at: str
    runs: tuple[str, ...]
    events: int
    first_position: int
    last_position: int
    ranges: tuple[ArchivedRange, ...]
    files: tuple[ArchivedFile, ...]
    previous_manifest_sha256: str = ""
    format: str = MANIFEST_FORMAT

    @property
    def streams(self) -> dict[str, int]:
        """Every archived stream of the batch and its last version."""
        return {stream: v for file in self.files for stream, v in file.streams.items()}

    def run_of(self, stream_id: str) -> str | None:
        """The run whose file holds ``stream_id``."""
        return next((f.run_id for f in self.files if stream_id in f.streams), None)


_encoder = msgspec.json.Encoder()
_decoder = msgspec.json.Decoder(Manifest)


def encode_manifest(manifest: Manifest) -> bytes:
    """The manifest's bytes, as stored and digested."""
    return _encoder.encode(manifest)


def decode_manifest(data: bytes | str) -> Manifest:
    """The manifest of stored bytes (the last few decoded are kept: a fleet's manifest lists
    tens of thousands of ranges, and every read of an archived run needs its batch's).

    Raises:
        ValueError: they are not a manifest of this format.
    """
    return _decode(data.decode() if isinstance(data, bytes) else data)


@functools.lru_cache(maxsize=16)
def _decode(data: str) -> Manifest:
    try:
        manifest = _decoder.decode(data)
    except msgspec.DecodeError as error:
        raise ValueError(f"not a wgstore archive manifest: {error}") from None
    if manifest.format != MANIFEST_FORMAT:
        raise ValueError(
            f"archive manifest format {manifest.format!r}: this wgstore reads {MANIFEST_FORMAT!r}"
        )
    return manifest


def manifest_sha256(data: bytes | str) -> str:
    """Hex SHA-256 of a manifest's stored bytes."""
    return hashlib.sha256(data.encode() if isinstance(data, str) else data).hexdigest()
