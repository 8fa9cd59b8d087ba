"""Ray's export event files: which to read, how each is known, and their whole lines. No database.

Ray writes each export source to ``<session>/logs/export_events/event_<SOURCE>.log`` through
Python's ``RotatingFileHandler`` (the GCS's C++ writer for nodes and jobs): a full file is
renamed ``.log.1`` (``.1`` to ``.2``...) and a new one begun. So a file is known by its content,
not its name: :func:`file_id` is the SHA-256 of its first line (every line has a unique event
id), which survives a rename, a copy to another machine and a sidecar that mounts the folder
elsewhere. A file truncated to nothing (``copytruncate``) begins again with a new first line: a
new file. Only whole lines are read: a line still being written (no newline yet) waits.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import msgspec

from wgstore.orchestration.ray_export.mapping import SOURCE_TYPES, ExportEvent

__all__ = ["ExportLine", "default_folder", "export_files", "file_id", "parse_line", "read_lines"]

_decode = msgspec.json.Decoder().decode
_NAME = re.compile(r"^event_(EXPORT_[A-Z_]+)\.log(?:\.(\d+))?$")
_FIRST_LINE_LIMIT = 1 << 20


def default_folder() -> Path:
    """The export folder of the newest Ray session on this machine (``RAY_TMPDIR`` or /tmp)."""
    import os

    root = Path(os.environ.get("RAY_TMPDIR") or "/tmp") / "ray" / "session_latest"
    return root / "logs" / "export_events"


def export_files(paths: Iterable[Path]) -> list[Path]:
    """The export files to read under ``paths`` (folders, or files named as Ray names them),
    of the sources the mapper reads, a rotated file before the one that replaced it."""
    found: list[tuple[str, int, Path]] = []
    for path in paths:
        candidates = sorted(path.iterdir()) if path.is_dir() else [path]
        for candidate in candidates:
            match = _NAME.match(candidate.name)
            if match is None or match.group(1) not in _SOURCES_OF_FILES:
                continue
            rotation = int(match.group(2) or 0)
            found.append((str(candidate.parent), -rotation, candidate))
    return [
        path for _, _, path in sorted(found, key=lambda f: (f[0], f[2].name.split(".")[0], f[1]))
    ]


_SOURCES_OF_FILES = frozenset({"EXPORT_TRAIN_STATE", "EXPORT_NODE", "EXPORT_DRIVER_JOB"})


def file_id(path: Path) -> str | None:
    """The SHA-256 (hex, 32 digits) of the file's first line; ``None`` while it has no whole
    line (empty, or its first line is being written)."""
    try:
        with path.open("rb") as handle:
            first = handle.readline(_FIRST_LINE_LIMIT)
    except FileNotFoundError:
        return None
    if not first.endswith(b"\n"):
        return None
    return hashlib.sha256(first).hexdigest()[:32]


@dataclass(frozen=True, slots=True)
class ExportLine:
    """One whole line: its number in the file (1-based) and its bytes (no newline)."""

    number: int
    text: bytes


def read_lines(path: Path, offset: int, line: int, limit: int) -> tuple[list[ExportLine], int]:
    """At most ``limit`` whole lines from byte ``offset`` (the ``line``-th line read so far),
    and the offset after the last of them."""
    lines: list[ExportLine] = []
    with path.open("rb") as handle:
        handle.seek(offset)
        while len(lines) < limit:
            raw = handle.readline()
            if not raw.endswith(b"\n"):
                break  # end of file, or a line still being written
            offset += len(raw)
            lines.append(ExportLine(line + len(lines) + 1, raw.rstrip(b"\r\n")))
    return lines, offset


def parse_line(raw: bytes, where: str) -> ExportEvent | str | None:
    """The export event of one line; ``None`` for a source the mapper does not read; the
    reason as text for a line that is not an export event."""
    if not raw.strip():
        return None
    try:
        envelope = _decode(raw)  # msgspec's: a quarter of json.loads' time
    except msgspec.DecodeError as error:
        return f"{where}: not JSON ({error})"
    if not isinstance(envelope, dict):
        return f"{where}: not an export event (a JSON {type(envelope).__name__})"
    source = envelope.get("source_type")
    data = envelope.get("event_data")
    if not isinstance(source, str) or not isinstance(data, dict):
        return f"{where}: not an export event (no source_type or event_data)"
    if source not in SOURCE_TYPES:
        return None
    try:
        timestamp = int(envelope.get("timestamp") or 0)
    except (TypeError, ValueError):
        return f"{where}: timestamp {envelope.get('timestamp')!r} is not a number"
    return ExportEvent(
        event_id=str(envelope.get("event_id") or ""),
        timestamp=timestamp,
        source_type=source,
        data=data,
        where=where,
    )


def envelope(event: ExportEvent) -> dict[str, object]:
    """An export event as Ray wrote its line (to hold it in the log)."""
    return {
        "event_id": event.event_id,
        "timestamp": event.timestamp,
        "source_type": event.source_type,
        "event_data": dict(event.data),
        "where": event.where,
    }


def from_envelope(held: Sequence[object]) -> list[ExportEvent]:
    """Held lines back as export events."""
    events: list[ExportEvent] = []
    for item in held:
        if isinstance(item, dict):
            events.append(
                ExportEvent(
                    event_id=str(item.get("event_id") or ""),
                    timestamp=int(item.get("timestamp") or 0),
                    source_type=str(item.get("source_type") or ""),
                    data=dict(item.get("event_data") or {}),
                    where=str(item.get("where") or ""),
                )
            )
    return events
