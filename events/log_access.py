"""``LogAccess``: what the store's helpers need of an open store, as a Protocol.

The notifier, the stream watch, subscriptions and verify are parts of
:class:`~wgstore.events.store.EventStore` that work on it; they name this Protocol instead of
the class, so the store depends on them and they depend on this module only (one way, no
circle). ``EventStore`` satisfies it; mypy checks that where the store hands itself over.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    import sqlalchemy as sa

    from wgstore.events.recorder import Recorder
    from wgstore.events.records import RecordedEvent

__all__ = ["LogAccess"]


class LogAccess(Protocol):
    """An open store, as its helpers see it (see the module docstring)."""

    url: str
    engine: sa.Engine
    recorder: Recorder

    @property
    def closed(self) -> bool:
        """True once the store was closed."""
        ...

    @property
    def is_postgres(self) -> bool:
        """True on PostgreSQL, False on SQLite."""
        ...

    def head(self) -> int:
        """The log's last position, 0 when it is empty."""
        ...

    def read_stream(
        self, stream_id: str, from_version: int = 1, to_version: int | None = None
    ) -> Iterator[RecordedEvent]:
        """One stream's events in order (see ``EventStore.read_stream``)."""
        ...

    def read_all(
        self,
        after: int = 0,
        limit: int | None = None,
        types: Iterable[str | type] | None = None,
        *,
        streams: str | tuple[str, ...] | None = None,
        keep: Callable[[int, str, str], bool] | None = None,
    ) -> Iterator[RecordedEvent]:
        """The log after ``after``, in order (see ``EventStore.read_all``)."""
        ...

    def wait_for_new(
        self, after: int, timeout_s: float, *, stop: threading.Event | None = None
    ) -> int:
        """Block until the log grows past ``after`` (see ``EventStore.wait_for_new``)."""
        ...

    def fetch_rows(self, sql: str, params: Sequence[Any]) -> Sequence[tuple[Any, ...]]:
        """All the rows of one SELECT of the caller's own, errors translated."""
        ...
