"""Whether every stream reads and folds as its readers read it: what ``wgstore verify`` adds to
the hash checks of :meth:`~wgstore.events.EventStore.verify`.

The hashes prove the rows are the ones written (with the key: by whom); they do not prove a reader
can read them. A ``run-*`` stream that does not begin with ``RunCreated``, a worker group whose
lifecycle breaks, an event that no longer decodes: ``wgstore runs``, ``state``, ``report`` and
serve refuse such a stream, so :func:`check_folds` names it, with the version and position where
the read stopped and why. Each stream is read as its readers read it (``read_stream``, by version,
from version 1):

- ``worker-group-*``: folded by :func:`~wgstore.projections.state.project_worker_group`, as
  ``wgstore state`` and the projector fold it.
- ``run-*``: folded by :func:`~wgstore.projections.run_state.evolve_run`, as ``wgstore runs`` and
  ``report`` fold it. One that begins with an event of a type this process does not know is not a
  run to its readers (a program's own stream of that name, from before such names were
  reserved): it is decoded, not folded, and listed in :attr:`FoldCheck.not_runs`.
- Any other stream is a program's own, which no fold reads: each of its events is decoded, as
  ``wgstore events`` decodes it (a type this process does not know reads as ``UnknownEvent``).

Snapshots are not used: a reader that starts from one folds less, the projector's rebuild folds
it all.
"""

from __future__ import annotations

from collections.abc import Generator, Iterator
from contextlib import closing
from dataclasses import dataclass, field
from itertools import chain
from typing import TYPE_CHECKING, cast

import sqlalchemy as sa

from wgstore.events._translate import translate_errors
from wgstore.events.errors import EventDecodeError
from wgstore.events.records import RecordedEvent, UnknownEvent
from wgstore.events.schema import wg_events
from wgstore.events.streams import GROUP_STREAM_PREFIX, RUN_STREAM_PREFIX
from wgstore.projections.errors import ProjectionError
from wgstore.projections.run_state import evolve_run
from wgstore.projections.state import project_worker_group

if TYPE_CHECKING:
    from wgstore.events.store import EventStore

__all__ = ["FoldCheck", "UnreadableStream", "check_folds"]


@dataclass(frozen=True, slots=True)
class UnreadableStream:
    """A stream whose readers stop at one of its events: which, and why."""

    stream_id: str
    version: int
    position: int
    event_type: str
    reason: str

    def __str__(self) -> str:
        return (
            f"stream {self.stream_id!r} cannot be read: its {self.event_type} at version "
            f"{self.version} (position {self.position}): {self.reason}"
        )


@dataclass(frozen=True, slots=True)
class FoldCheck:
    """What :func:`check_folds` found; ``ok`` when every stream reads to its end."""

    unreadable: list[UnreadableStream] = field(default_factory=list)
    folded: int = 0
    """Worker-group and run streams folded to their end (the unreadable ones not counted)."""
    decoded: int = 0
    """Other streams (no fold reads them) whose every event decoded."""
    not_runs: list[str] = field(default_factory=list)
    """``run-*`` streams that begin with a type this process does not know: decoded, not folded."""

    @property
    def ok(self) -> bool:
        """True when no stream stops its readers."""
        return not self.unreadable


def check_folds(store: EventStore, stream_id: str | None = None) -> FoldCheck:
    """Read every stream (or one) as its readers do and name each one they cannot read.

    Raises:
        StoreUnavailableError: the database cannot be reached.
    """
    streams = [stream_id] if stream_id is not None else [sid for sid, _ in store.streams()]
    unreadable: list[UnreadableStream] = []
    not_runs: list[str] = []
    folded = decoded = 0
    for sid in streams:
        try:
            # read_stream is a generator: closed at once when a read stops early (on Postgres
            # it holds a pooled connection until its page is read)
            records = cast("Generator[RecordedEvent, None, None]", store.read_stream(sid))
            with closing(records):
                kind = _read(sid, records)
        except ProjectionError as error:
            unreadable.append(_refused(error))
        except EventDecodeError as error:
            unreadable.append(_undecodable(store, error))
        else:
            folded += kind is _FOLDED
            decoded += kind is _DECODED
            if kind is _NOT_A_RUN:
                not_runs.append(sid)
    return FoldCheck(unreadable, folded, decoded, not_runs)


_FOLDED, _DECODED, _NOT_A_RUN, _EMPTY = "folded", "decoded", "not a run", "empty"


def _read(stream_id: str, records: Iterator[RecordedEvent]) -> str:
    """Read one stream's records to their end, as its readers do; say how.

    Raises:
        ProjectionError: its fold stops at an event.
        EventDecodeError: an event no longer decodes.
    """
    first = next(records, None)
    if first is None:
        return _EMPTY  # a stream named on the command line that has no events
    if stream_id.startswith(GROUP_STREAM_PREFIX):
        project_worker_group(chain([first], records))
        return _FOLDED
    if stream_id.startswith(RUN_STREAM_PREFIX) and not isinstance(first.event, UnknownEvent):
        state = evolve_run(None, first)
        for record in records:
            state = evolve_run(state, record)
        return _FOLDED
    for _ in records:  # decoded, as ``wgstore events`` shows them
        pass
    return _NOT_A_RUN if stream_id.startswith(RUN_STREAM_PREFIX) else _DECODED


def _refused(error: ProjectionError) -> UnreadableStream:
    """The fold's refusal, its text without the stream, version, position and type it begins
    with."""
    text = str(error)
    prefix = f"stream {error.stream_id!r}, version {error.version}, position {error.position}"
    prefix += f" ({error.event_type}): " if error.event_type else ": "
    return UnreadableStream(
        error.stream_id,
        error.version,
        error.position,
        error.event_type or "event",
        text.removeprefix(prefix),
    )


def _undecodable(store: EventStore, error: EventDecodeError) -> UnreadableStream:
    """The decode error, with the version and type of the event it names (from its row)."""
    text = str(error).removeprefix(f"event at position {error.position} in stream ")
    text = text.removeprefix(f"{error.stream_id!r}: ")
    query = sa.select(wg_events.c.stream_version, wg_events.c.event_type).where(
        wg_events.c.position == error.position
    )
    with translate_errors(store.url), store.engine.connect() as connection:
        row = connection.execute(query).first()
        connection.rollback()
    version, event_type = (int(row[0]), str(row[1])) if row is not None else (0, "event")
    return UnreadableStream(error.stream_id, version, error.position, event_type, text)
