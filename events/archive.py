"""Event types of the archive: the cut is itself in the history.

``wgstore archive`` moves the events of ended runs out of the live log into Parquet files
(:mod:`wgstore.events.archive_files`, :mod:`wgstore.events.archive_log`). Before a batch's rows
are deleted, ``LogArchived`` names the batch's manifest by its SHA-256 on the stream
:data:`ARCHIVE_STREAM`, signed and chained like every event, so a verifier can tell a cut made
on purpose from events removed behind the writers' back. ``ArchiveAbandoned`` says a batch's
delete did not happen (a run it held moved on); ``RunRestored`` that ``wgstore restore`` put one
run's events back; ``ArchiveFilesDropped`` that a retention bound deleted a batch's files on
purpose (its manifest stays, so ``verify`` still proves what was there).
"""

from __future__ import annotations

from dataclasses import dataclass

from wgstore.events.registry import event_type

__all__ = [
    "ARCHIVE_STREAM",
    "ArchiveAbandoned",
    "ArchiveFilesDropped",
    "LogArchived",
    "RunRestored",
]

ARCHIVE_STREAM = "wgstore-archive"
"""The stream of every archive event (one stream: batches take turns by its version)."""


@event_type("LogArchived", version=1)
@dataclass(frozen=True, slots=True, kw_only=True)
class LogArchived:
    """A batch of ended runs' events was written to verified archive files and leaves the live
    log: ``manifest_sha256`` is the SHA-256 of the manifest's bytes (kept in
    ``wg_archive_batches`` and beside the files), ``previous_manifest_sha256`` the one of the
    batch before (the manifests' own chain; "" for the first)."""

    batch_id: str
    manifest_sha256: str
    location: str
    runs: tuple[str, ...]
    events: int
    first_position: int
    last_position: int
    previous_manifest_sha256: str = ""


@event_type("ArchiveAbandoned", version=1)
@dataclass(frozen=True, slots=True, kw_only=True)
class ArchiveAbandoned:
    """A batch whose ``LogArchived`` was appended did not leave the live log (``reason``): its
    events are all still live, its files were removed."""

    batch_id: str
    reason: str


@event_type("RunRestored", version=1)
@dataclass(frozen=True, slots=True, kw_only=True)
class RunRestored:
    """``wgstore restore`` put run ``run_id``'s ``events`` back into the live log, at their
    positions, from batch ``batch_id``'s verified file."""

    batch_id: str
    run_id: str
    events: int


@event_type("ArchiveFilesDropped", version=1)
@dataclass(frozen=True, slots=True, kw_only=True)
class ArchiveFilesDropped:
    """A batch's archive files were deleted on purpose (``wgstore archive
    --drop-archived-after ... --yes``); its manifest, and so what it held, stays."""

    batch_id: str
    files: tuple[str, ...]
    reason: str
