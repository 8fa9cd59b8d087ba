"""Wake-ups for readers that follow the log: LISTEN/NOTIFY on Postgres, polling everywhere.

Notifications are an optimisation only. They are lost while the listening connection is down,
so every waiter also re-reads the head on a short interval.

Waiters that follow a few streams, not the whole log (run controllers), use
:meth:`Notifier.watch` instead: one follower per store object wakes each of them only for its
own streams (:mod:`wgstore.events.stream_watch`).
"""

from __future__ import annotations

import logging
import os
import selectors
import threading
import time
from collections.abc import Iterable
from typing import TYPE_CHECKING

from wgstore.events.postgres_functions import NOTIFY_CHANNEL_SQL

if TYPE_CHECKING:
    from wgstore.events.log_access import LogAccess
    from wgstore.events.stream_watch import StreamFollower, StreamWatch

__all__ = ["Notifier"]

_log = logging.getLogger("wgstore.notifier")

SQLITE_POLL_S = 0.01
POSTGRES_POLL_S = 0.5


class Notifier:
    """Lets threads wait for the log to grow past a position."""

    def __init__(self, store: LogAccess) -> None:
        self._store = store
        self._changed = threading.Condition()
        self._generation = 0
        self._listener: threading.Thread | None = None
        self._stop = threading.Event()
        # Postgres: close() writes a byte into this pipe to end the listener's wait for its
        # socket at once (an idle connection's wait cannot be cancelled, and waiting with a
        # timeout made every close() of a listening store take up to that timeout).
        self._close_pipe: tuple[int, int] | None = None
        self._follower: StreamFollower | None = None

    @property
    def generation(self) -> int:
        """A counter that moves on every wake-up (a notification, a local append, :meth:`wake`)."""
        return self._generation

    def wait_for_wake(self, generation: int, timeout_s: float) -> int:
        """Block until :attr:`generation` moved past ``generation`` or ``timeout_s`` passed;
        return it. No query: the caller reads what it needs (on Postgres, call
        :meth:`ensure_listening` first, or only local appends wake it)."""
        with self._changed:
            if self._generation == generation:
                self._changed.wait(max(timeout_s, 0.0))
            return self._generation

    def ensure_listening(self) -> None:
        """Postgres: make sure the thread that LISTENs for other processes' appends runs."""
        if self._store.is_postgres:
            self._ensure_listener()

    def watch(self, stream_ids: Iterable[str], ignore_types: Iterable[str] = ()) -> StreamWatch:
        """A :class:`~wgstore.events.stream_watch.StreamWatch` of ``stream_ids``, served by
        this store object's one follower (started with the first watch)."""
        with self._changed:
            if self._follower is None:
                from wgstore.events.stream_watch import StreamFollower

                self._follower = StreamFollower(self._store, self)
            follower = self._follower
        return follower.watch(stream_ids, ignore_types)

    def local_append(self) -> None:
        """Wake the waiters of this process: the store object itself just appended."""
        self.wake()

    def wake(self) -> None:
        """Make every waiter re-check at once (the head, and its ``stop`` event)."""
        with self._changed:
            self._generation += 1
            self._changed.notify_all()

    def wait(self, after: int, timeout_s: float, stop: threading.Event | None = None) -> int:
        """Block until ``head() > after``, ``timeout_s`` passed or ``stop`` is set (checked
        on every wake, see :meth:`wake`); return the head."""
        deadline = time.monotonic() + max(timeout_s, 0.0)
        poll_s = POSTGRES_POLL_S if self._store.is_postgres else SQLITE_POLL_S
        if self._store.is_postgres:
            self._ensure_listener()
        while True:
            with self._changed:
                generation = self._generation
            head = self._store.head()
            remaining = deadline - time.monotonic()
            if head > after or remaining <= 0 or (stop is not None and stop.is_set()):
                return head
            with self._changed:
                if self._generation == generation:
                    self._changed.wait(min(poll_s, remaining))

    def close(self) -> None:
        """Stop listening, and the stream follower (its watches' waits return False)."""
        self._stop.set()
        if self._follower is not None:
            self._follower.close()
        pipe = self._close_pipe
        if pipe is not None:
            os.write(pipe[1], b"x")
        if self._listener is not None:
            self._listener.join(timeout=5)
        if pipe is not None and (self._listener is None or not self._listener.is_alive()):
            self._close_pipe = None
            for fd in pipe:
                os.close(fd)

    def _ensure_listener(self) -> None:
        if self._stop.is_set():
            return  # closed: waiters poll
        if self._listener is None or not self._listener.is_alive():
            with self._changed:
                if self._listener is None or not self._listener.is_alive():
                    if self._close_pipe is None:
                        self._close_pipe = os.pipe()
                    self._listener = threading.Thread(
                        target=self._listen, name="wgstore-listen", daemon=True
                    )
                    self._listener.start()

    def _listen(self) -> None:
        import psycopg

        assert self._close_pipe is not None
        close_signal = self._close_pipe[0]
        engine = self._store.engine
        args, kwargs = engine.dialect.create_connect_args(engine.url)
        while not self._stop.is_set():
            try:
                with (
                    psycopg.connect(*args, **kwargs, autocommit=True) as connection,
                    selectors.PollSelector() as selector,
                ):
                    # the store's own channel (one per schema), named by the server as
                    # wg_append names it
                    row = connection.execute(f"SELECT {NOTIFY_CHANNEL_SQL}").fetchone()
                    assert row is not None
                    connection.execute(f'LISTEN "{row[0]}"')
                    self.local_append()  # something may have happened while we were away
                    selector.register(connection.fileno(), selectors.EVENT_READ)
                    selector.register(close_signal, selectors.EVENT_READ)
                    while not self._stop.is_set():
                        if selector.select() and not self._stop.is_set():
                            # The socket is readable: take what arrived (a closed connection
                            # raises here, and the loop reconnects).
                            for _ in connection.notifies(timeout=0):
                                self.local_append()
            except Exception as error:  # noqa: BLE001 - reconnect; waiters keep polling meanwhile
                _log.info("LISTEN connection lost (%s); reconnecting in 1 s", error)
                if not self._stop.wait(1.0):
                    continue
