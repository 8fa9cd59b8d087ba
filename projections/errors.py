"""Errors raised by the projections.

The tree (under the project-wide root)::

    WgstoreError
     ├─ ProjectionError       an event that the fold cannot apply (names the stream and position)
     ├─ ReadModelsBusyError   the read models' checkpoint kept moving under the projector
     └─ StreamNotFoundError   no such stream (or not yet at the version or moment asked for)

A fold never skips an event it does not understand: an event of a known type it has no rule for,
a version out of order, an event after a terminal state or a stream that does not begin with its
creation event all raise :class:`ProjectionError`, which names the stream, the version and the
global position. The one exception is an :class:`~wgstore.events.UnknownEvent` (a type no class
is registered for in this process, e.g. another program's own event): it is not the fold's to
interpret, so the fold steps over it (in version order).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from wgstore.events.errors import WgstoreError

if TYPE_CHECKING:
    from wgstore.events.records import RecordedEvent

__all__ = ["ProjectionError", "ReadModelsBusyError", "StreamNotFoundError"]


class ProjectionError(WgstoreError):
    """An event that a projection cannot apply to the state folded so far.

    Attributes:
        stream_id: the stream the event belongs to.
        version: the event's version in that stream.
        position: the event's global position in the log.
        event_type: the stored type name of the event.
    """

    def __init__(
        self,
        message: str,
        *,
        stream_id: str,
        version: int,
        position: int,
        event_type: str = "",
    ) -> None:
        self.stream_id = stream_id
        self.version = version
        self.position = position
        self.event_type = event_type
        what = f" ({event_type})" if event_type else ""
        super().__init__(
            f"stream {stream_id!r}, version {version}, position {position}{what}: {message}"
        )

    @classmethod
    def at(cls, record: RecordedEvent, message: str) -> ProjectionError:
        """The error for ``record``, naming its stream, version, position and type."""
        return cls(
            message,
            stream_id=record.stream_id,
            version=record.version,
            position=record.position,
            event_type=record.type,
        )

    @classmethod
    def check_follows(cls, record: RecordedEvent, stream_id: str, version: int) -> None:
        """Raise unless ``record`` is the next event of ``stream_id`` after ``version``."""
        if record.stream_id != stream_id:
            raise cls.at(record, f"belongs to another stream than {stream_id!r}")
        if record.version != version + 1:
            raise cls.at(
                record,
                f"out of order: the state is at version {version}, so the next event must be "
                f"version {version + 1}",
            )

    @classmethod
    def nothing_to_fold(cls) -> ProjectionError:
        """The error for a fold given no events and no state to start from."""
        return cls(
            "no events to fold: the stream is empty or does not exist",
            stream_id="",
            version=0,
            position=0,
        )


class StreamNotFoundError(WgstoreError, LookupError):
    """The stream asked for has no events (or none yet at the version or moment asked for)."""


class ReadModelsBusyError(WgstoreError, RuntimeError):
    """Catching up lost the race for the read models' checkpoint too many times in a row."""
