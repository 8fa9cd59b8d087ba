"""Wake-ups per stream: one follower per store object, waking only the waiters of streams that moved.

A thread that waits on the whole log (:meth:`EventStore.wait_for_new`) is woken by every append
anywhere, and re-reads what it follows to find nothing new. With many such waiters in one
process (a run controller per run, each following its run and group streams) that is waiters x
events reads: the fleet benchmark found it taking two thirds of the busy time at 100 runs.

Here one thread per store object (:class:`StreamFollower`) follows the log: it waits for it to
move (Postgres ``LISTEN/NOTIFY`` or, on SQLite, by polling, as the notifier does), reads the new
rows' position, stream id and type (never their data) and hands each to the
:class:`StreamWatch` objects that watch that stream. A waiter loses no wake-up if it takes a
token *before* it reads its streams and waits with it afterwards::

    with store.watch_streams([run_stream(run_id)]) as watch:
        while True:
            token = watch.position()      # 1. before reading
            ...                           # 2. read the streams, act
            watch.add(group_stream(gid))  #    (a stream learnt from the read)
            watch.wait(token, 10.0)       # 3. True at once if one of them moved after the token

The token is the follower's position: every event up to it was handed to the watches, and every
event after it on a watched stream will be, so an event that lands between the read and the
wait still wakes the waiter (a wake-up for an event the read already saw costs one extra
read). Positions become visible in position order (Postgres appends hold the table lock,
SQLite has one writer), so reading ``position > p`` never skips one. A stream added after the
token was taken may have had events the follower passed before it knew the stream: ``wait``
then returns at once, and the waiter re-reads once.

The follower runs while some watch is open (no polling otherwise), and stops with the store.
If the store cannot be read it logs it, retries every second, and goes on from where it was.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, Protocol

import sqlalchemy as sa

from wgstore.events.engine import READ_ONLY_OPTION
from wgstore.events.errors import StoreUnavailableError

if TYPE_CHECKING:
    from wgstore.events.log_access import LogAccess

__all__ = ["RowReader", "StreamFollower", "StreamWatch", "Waker"]

_log = logging.getLogger("wgstore.notifier")

PAGE = 1000
"""Rows the follower reads per query."""
SQLITE_POLL_S = 0.01
"""SQLite has no notifications: the follower reads every this often while watches are open."""
POSTGRES_POLL_S = 0.5
"""Postgres: the fallback read interval when no notification came (they are lost while the
listening connection is down)."""
MIN_READ_INTERVAL_S = 0.01
"""The least time between two reads: on a busy log the follower reads batches of rows, not one
query per notification."""
RETRY_S = 1.0
"""After a failed read, the follower waits this long before it reads again."""

_ROWS = sa.text(
    "SELECT position, stream_id, event_type FROM wg_events "
    f"WHERE position > :after ORDER BY position LIMIT {PAGE}"
)


class StreamWatch:
    """One waiter's set of streams: :meth:`wait` returns when one of them gets an event.

    Made by :meth:`EventStore.watch_streams`; see the module's docstring for the protocol
    (take :meth:`position` before reading, :meth:`wait` with it after). Close it when done
    (it is a context manager): the follower stops when no watch is open.
    """

    def __init__(self, follower: StreamFollower, ignore_types: Iterable[str] = ()) -> None:
        self._follower = follower
        self.ignore_types: frozenset[str] = frozenset(ignore_types)
        """Event types that never wake this watch (e.g. reports, for a run controller)."""
        self.streams: set[str] = set()
        """The stream ids watched (read it; change it with :meth:`add`)."""
        self._changed = threading.Condition()
        self._moved = 0  # the position of the latest event of ours handed over
        self._blind_until = 0  # the follower's position when a stream was added
        self._closed = False

    def position(self) -> int:
        """The token to take before reading the watched streams (the follower's position)."""
        return self._follower.position

    def add(self, *stream_ids: str) -> None:
        """Watch these streams too (adding one already watched does nothing)."""
        new = [s for s in stream_ids if s not in self.streams]
        if new:
            self._follower.add(self, new)

    def moved_after(self, token: int) -> bool:
        """True when a watched stream got an event after ``token`` (or may have: a stream added
        after the token was taken)."""
        with self._changed:
            return self._moved > token or self._blind_until > token

    def wait(self, token: int, timeout_s: float, stop: threading.Event | None = None) -> bool:
        """Block until a watched stream has an event after ``token``, ``timeout_s`` passed, the
        watch is closed, or ``stop`` is set and :meth:`wake` called.

        Returns:
            True when a watched stream moved after ``token``: re-read it. False otherwise.
        """
        deadline = time.monotonic() + max(timeout_s, 0.0)
        with self._changed:
            while True:
                if self._moved > token or self._blind_until > token:
                    return True
                remaining = deadline - time.monotonic()
                if self._closed or remaining <= 0 or (stop is not None and stop.is_set()):
                    return False
                self._changed.wait(remaining)

    def wake(self) -> None:
        """Make :meth:`wait` re-check at once (its ``stop`` event, say)."""
        with self._changed:
            self._changed.notify_all()

    def close(self) -> None:
        """Stop watching; a thread in :meth:`wait` returns False."""
        if self._closed:
            return
        self._follower.remove(self)
        with self._changed:
            self._closed = True
            self._changed.notify_all()

    @property
    def closed(self) -> bool:
        """True once :meth:`close` was called (or the store closed)."""
        return self._closed

    def __enter__(self) -> StreamWatch:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ the follower's side

    def _moved_to(self, position: int) -> None:
        with self._changed:
            if position > self._moved:
                self._moved = position
                self._changed.notify_all()

    def _blind(self, position: int) -> None:
        with self._changed:
            self._blind_until = max(self._blind_until, position)


class Waker(Protocol):
    """What the follower needs of the store's :class:`~wgstore.events.notifier.Notifier` (which
    makes it, so this module names a Protocol, not the class: one way, no circle)."""

    @property
    def generation(self) -> int:
        """A counter that moves on every wake-up."""
        ...

    def wake(self) -> None:
        """Make every waiter re-check at once."""
        ...

    def ensure_listening(self) -> None:
        """Postgres: make sure other processes' appends wake it."""
        ...

    def wait_for_wake(self, generation: int, timeout_s: float) -> int:
        """Block until :attr:`generation` moved past ``generation`` or ``timeout_s`` passed."""
        ...


class StreamFollower:
    """Follows one store's log for its :class:`StreamWatch` objects (one per store object)."""

    def __init__(self, store: LogAccess, notifier: Waker) -> None:
        self._store = store
        self._notifier = notifier
        self._lock = threading.Lock()
        self._by_stream: dict[str, set[StreamWatch]] = {}
        self._watches: set[StreamWatch] = set()
        self._position = 0
        self._thread: threading.Thread | None = None
        self._idle = threading.Event()  # set when no watch is open (or closing): pauses end
        self._stopped = False

    @property
    def position(self) -> int:
        """Every event up to here was handed to the watches of its stream."""
        return self._position

    def watch(self, stream_ids: Iterable[str], ignore_types: Iterable[str]) -> StreamWatch:
        """A new watch of ``stream_ids`` (see :meth:`EventStore.watch_streams`)."""
        watch = StreamWatch(self, ignore_types)
        with self._lock:
            if self._stopped:
                raise StoreUnavailableError("this EventStore is closed; open a new one")
            if not self._watches:
                # Nobody watched what went by meanwhile: go on from the head.
                self._position = max(self._position, self._store.head())
            self._watches.add(watch)
            self._idle.clear()
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._follow, name="wgstore-streams", daemon=True
                )
                self._thread.start()
        watch.add(*stream_ids)
        return watch

    def add(self, watch: StreamWatch, stream_ids: list[str]) -> None:
        """Hand ``watch`` the events of ``stream_ids`` from now on."""
        with self._lock:
            if watch not in self._watches:
                return  # closed
            for stream_id in stream_ids:
                watch.streams.add(stream_id)
                self._by_stream.setdefault(stream_id, set()).add(watch)
            # Events up to here went by before the watch knew these streams.
            watch._blind(self._position)

    def remove(self, watch: StreamWatch) -> None:
        """Forget ``watch``; the thread stops once no watch is left."""
        with self._lock:
            self._watches.discard(watch)
            for stream_id in watch.streams:
                watchers = self._by_stream.get(stream_id)
                if watchers is not None:
                    watchers.discard(watch)
                    if not watchers:
                        del self._by_stream[stream_id]
            if not self._watches:
                self._idle.set()
        self._notifier.wake()

    def close(self) -> None:
        """Stop following (the store is closing); every open watch's ``wait`` returns False."""
        with self._lock:
            self._stopped = True
            watches = list(self._watches)
            thread = self._thread
            self._idle.set()
        for watch in watches:
            watch.close()
        self._notifier.wake()
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=5)

    # ------------------------------------------------------------------ the thread

    def _running(self) -> bool:
        with self._lock:
            if self._stopped or not self._watches:
                self._thread = None  # a later watch starts a new thread
                return False
            return True

    def _follow(self) -> None:
        postgres = self._store.is_postgres
        poll_s = POSTGRES_POLL_S if postgres else SQLITE_POLL_S
        reader = RowReader(self._store, _ROWS)
        failing = False
        try:
            while self._running():
                generation = self._notifier.generation
                started = time.monotonic()
                try:
                    rows = reader.read(self._position)
                except Exception as error:  # noqa: BLE001 - retried; waiters time out meanwhile
                    reader.drop(broken=True)
                    if self._store.closed:
                        return
                    if not failing:
                        _log.warning("cannot follow the log for stream wake-ups: %s", error)
                        failing = True
                    self._idle.wait(RETRY_S)
                    continue
                if failing:
                    _log.warning("following the log for stream wake-ups again")
                    failing = False
                self._hand_over(rows)
                if len(rows) == PAGE:
                    continue
                if postgres:
                    self._notifier.ensure_listening()
                self._notifier.wait_for_wake(generation, poll_s)
                pause = MIN_READ_INTERVAL_S - (time.monotonic() - started)
                if pause > 0:
                    self._idle.wait(pause)
        finally:
            reader.drop()

    def _hand_over(self, rows: list[Any]) -> None:
        if not rows:
            return
        moved: dict[StreamWatch, int] = {}
        with self._lock:
            position = self._position
            by_stream = self._by_stream
            for row_position, stream_id, event_type in rows:
                if row_position <= position:
                    continue  # the position jumped to the head meanwhile (no watch was open)
                watchers = by_stream.get(stream_id)
                if watchers:
                    for watch in watchers:
                        if event_type not in watch.ignore_types:
                            moved[watch] = row_position
            # The watches learn of their events before the position passes them: a token
            # taken at the new position is never ahead of what was handed over.
            for watch, at in moved.items():
                watch._moved_to(at)
            self._position = max(position, int(rows[-1][0]))


class RowReader:
    """A query of new events (``:after`` / ``after`` its one parameter) read again and again on a
    connection kept between reads: autocommit on Postgres (one round trip a read, no pool
    pre-ping, no transaction left open); on SQLite a plain ``BEGIN``, ended after each read so
    no snapshot stays open. The stream follower's, and ``wgstore serve``'s."""

    def __init__(self, store: LogAccess, query: Any) -> None:
        self._store = store
        self._query = query
        self._connection: sa.Connection | None = None

    def read(self, after: int) -> list[Any]:
        """The query's rows after position ``after``."""
        connection = self._connection
        if connection is None:
            connection = self._store.engine.connect()
            if self._store.is_postgres:
                connection = connection.execution_options(isolation_level="AUTOCOMMIT")
            else:
                connection = connection.execution_options(**{READ_ONLY_OPTION: True})
            self._connection = connection
        rows = list(connection.execute(self._query, {"after": after}))
        if not self._store.is_postgres:
            connection.rollback()
        return rows

    def drop(self, *, broken: bool = False) -> None:
        """Give the connection back (``broken``: discard it, it may be dead)."""
        connection, self._connection = self._connection, None
        if connection is not None:
            with contextlib.suppress(Exception):
                if broken:
                    connection.invalidate()
                connection.close()
