"""One follower of the log for the whole server, fanning each batch of new events out to the
open pages (server-sent events) and keeping the counters ``/metrics`` reports.

It waits for the log to move (Postgres ``LISTEN/NOTIFY``, or SQLite's short poll) in one thread,
reads what is new once, and hands a small message to each subscriber's queue: the pages then ask
the JSON API for what they show. However many pages are open, the database sees one follower.

What it reads is narrow: each new event's position, stream, type and whether it is a report with
a checkpoint, one ``SELECT`` on a connection it keeps (no event is decoded, and no pool checkout
pings the server on each wake). It coalesces: after sending a message it reads again no sooner
than :data:`MESSAGE_INTERVAL_S` later, so a burst of appends is one read and one message per
interval, while an append after a quiet spell is sent at once.

A database that goes away turns into a ``status`` message (``available: false``, the reason) and
the follower retries until it is back. A kept connection that died while the server is up (a
restart since the last read) is replaced at once, without a banner.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import logging
import threading
import time
from collections import Counter, deque
from typing import Any

import sqlalchemy as sa

from wgstore.events import EventStore
from wgstore.events.notifier import POSTGRES_POLL_S, SQLITE_POLL_S
from wgstore.events.schema import wg_events
from wgstore.events.stream_watch import RowReader

__all__ = ["MAX_EVENT_TYPES", "MESSAGE_INTERVAL_S", "Follower", "Message"]

_log = logging.getLogger("wgstore.serve")

MAX_EVENT_TYPES = 100
"""Distinct event types counted by name; any further type counts as ``other`` (a label bound)."""
MAX_LISTED = 200
"""An ``append`` message lists at most this many events (position, stream, type)."""
QUEUE_SIZE = 64
"""Messages a slow page may fall behind by; past it, its oldest message is dropped (it refetches
what it shows on every message, so it loses nothing but an intermediate picture)."""
MESSAGE_INTERVAL_S = 0.05
"""After a message, the follower reads again no sooner than this: the appends of the interval go
out as one message (one read, one frame per page), not one each. An append after a quiet spell
is sent at once. The pages' goal is append -> visible within 500 ms (p99)."""
PAGE = 1000
"""Rows per query while catching up; a message counts every row read for it."""


class Follower:
    """Follows the log in a thread; each subscriber gets an :class:`asyncio.Queue` of messages.

    Messages are dicts: ``{"kind": "append", "head": N, "events": [{position, stream_id, type},
    ...], "more": M}`` and ``{"kind": "status", "available": bool, "problem": str | None,
    "head": N}``.
    """

    def __init__(
        self,
        store: EventStore,
        *,
        wait_s: float = 1.0,
        retry_s: float = 1.0,
        message_interval_s: float = MESSAGE_INTERVAL_S,
    ) -> None:
        """Follow ``store``'s log (call :meth:`start`).

        Args:
            store: the store whose log to follow.
            wait_s: the longest wait without a read when no append wakes the follower (capped
                at the store's own poll interval: 0.5 s on Postgres, 10 ms on SQLite).
            retry_s: after a failed read, wait this long before the next.
            message_interval_s: the least time between two ``append`` messages
                (:data:`MESSAGE_INTERVAL_S`).
        """
        if message_interval_s < 0 or wait_s <= 0 or retry_s < 0:
            raise ValueError(
                "wait_s must be > 0, retry_s and message_interval_s >= 0; got "
                f"wait_s={wait_s!r}, retry_s={retry_s!r}, message_interval_s={message_interval_s!r}"
            )
        self.store = store
        self.wait_s = wait_s
        self.retry_s = retry_s
        self.message_interval_s = message_interval_s
        self.head = 0
        self.available = True  # until a read fails (pages show no banner while it starts)
        self.problem: str | None = None
        self.type_counts: Counter[str] = Counter()
        self.checkpoints = 0
        self.started_at = time.time()
        self._primed = False
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._subscribers: dict[asyncio.Queue[Message], asyncio.AbstractEventLoop] = {}

    # ------------------------------------------------------------------ subscribers

    def subscribe(self) -> asyncio.Queue[Message]:
        """A new queue of messages for the calling event loop's task (a page's stream)."""
        queue: asyncio.Queue[Message] = asyncio.Queue(QUEUE_SIZE)
        with self._lock:
            self._subscribers[queue] = asyncio.get_running_loop()
        return queue

    def unsubscribe(self, queue: asyncio.Queue[Message]) -> None:
        """Stop sending to ``queue`` (its page went away)."""
        with self._lock:
            self._subscribers.pop(queue, None)

    @property
    def clients(self) -> int:
        """How many pages are subscribed now."""
        with self._lock:
            return len(self._subscribers)

    def status(self) -> dict[str, Any]:
        """The ``status`` message as of now."""
        return {
            "kind": "status",
            "available": self.available,
            "problem": self.problem,
            "head": self.head,
        }

    def _publish(self, fields: dict[str, Any]) -> None:
        message = Message(fields)  # one object for every page: its JSON is encoded once
        with self._lock:
            targets = list(self._subscribers.items())
        for queue, loop in targets:
            with contextlib.suppress(RuntimeError):  # the loop closed: the page is gone
                loop.call_soon_threadsafe(_offer, queue, message)

    def close_streams(self) -> None:
        """Tell every subscribed page stream to end (before the server stops)."""
        self._publish({"kind": "closing"})

    # ------------------------------------------------------------------ the thread

    def start(self) -> None:
        """Start following in a daemon thread."""
        self._thread = threading.Thread(target=self._run, name="wgstore-serve-follow", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop following and wait for the thread (a few seconds at most)."""
        self._stop.set()
        with contextlib.suppress(Exception):
            self.store.wake_waiters()
        if self._thread is not None:
            self._thread.join(timeout=10)

    def _run(self) -> None:
        # The store's wake-ups without its head query: EventStore.wait_for_new reads the head on
        # each wake through a pool checkout, which pings the server first (pool_pre_ping): two
        # round trips a wake before this follower's own read. Here a wake costs the one read.
        notifier = self.store.notifier
        postgres = self.store.is_postgres
        poll_s = min(self.wait_s, POSTGRES_POLL_S if postgres else SQLITE_POLL_S)
        reader = _RowReader(self.store)
        try:
            while not self._stop.is_set():
                generation = notifier.generation
                try:
                    if not self._primed:
                        self._prime()
                    sent = self._take(reader)
                    if not self.available:
                        self._set_available(True, None)
                    if postgres:
                        notifier.ensure_listening()  # (again, if its thread ended)
                except Exception as error:  # noqa: BLE001 - any failure of the store: banner, retry
                    reader.drop(broken=True)
                    _log.info("the store is unavailable: %s", error)
                    self._set_available(False, _first_line(error))
                    self._stop.wait(self.retry_s)
                    continue
                if sent and self._stop.wait(self.message_interval_s):
                    return
                # At once when anything woke it since before the read (an append during the
                # interval above, or stop); else at the next append or poll.
                notifier.wait_for_wake(generation, poll_s)
        finally:
            reader.drop()

    def _prime(self) -> None:
        """The head and the appends per type so far: one ``GROUP BY`` when the server starts."""
        query = sa.select(wg_events.c.event_type, sa.func.count()).group_by(wg_events.c.event_type)
        checkpoints = sa.select(sa.func.count()).where(_reports_a_checkpoint(self.store))
        counts: Counter[str] = Counter()
        with self.store.engine.connect() as connection:
            head = int(
                connection.execute(sa.select(sa.func.max(wg_events.c.position))).scalar() or 0
            )
            for event_type, count in connection.execute(query.where(wg_events.c.position <= head)):
                counts[_bounded(counts, event_type)] += int(count)
            self.checkpoints = int(
                connection.execute(checkpoints.where(wg_events.c.position <= head)).scalar_one()
            )
            connection.rollback()
        self.type_counts = counts
        self.head = head
        self._primed = True
        self._set_available(True, None)

    def _take(self, reader: _RowReader) -> bool:
        """Read every event past :attr:`head`, count them and send one message; False when
        there was none."""
        listed: deque[dict[str, Any]] = deque(maxlen=MAX_LISTED)
        counts: Counter[str] = Counter()
        checkpoints = 0
        read = 0
        head = self.head
        while True:
            rows = reader.read(head)
            for position, stream_id, event_type, has_checkpoint in rows:
                counts[event_type] += 1
                checkpoints += bool(has_checkpoint)
                listed.append({"position": position, "stream_id": stream_id, "type": event_type})
            if rows:
                head = int(rows[-1][0])
                read += len(rows)
            if len(rows) < PAGE:
                break
        if not read:
            return False
        # A new Counter, not an update in place: /metrics copies it from another thread.
        totals = self.type_counts.copy()
        for event_type, count in counts.items():
            totals[_bounded(totals, event_type)] += count
        self.type_counts = totals
        self.checkpoints += checkpoints
        self.head = head
        self._publish(
            {"kind": "append", "head": head, "events": list(listed), "more": read - len(listed)}
        )
        return True

    def _set_available(self, available: bool, problem: str | None) -> None:
        changed = available != self.available or problem != self.problem
        self.available, self.problem = available, problem
        if changed:
            self._publish(self.status())


class _RowReader(RowReader):
    """The follower's query (position, stream id, type, a report with a checkpoint) on a kept
    connection (:class:`~wgstore.events.stream_watch.RowReader`). A read that fails on the kept
    connection is tried once more on a new one (the server restarted since the last read); only
    that failing is an outage."""

    def __init__(self, store: EventStore) -> None:
        query = (
            sa.select(
                wg_events.c.position,
                wg_events.c.stream_id,
                wg_events.c.event_type,
                sa.case((_reports_a_checkpoint(store), 1), else_=0),
            )
            .where(wg_events.c.position > sa.bindparam("after"))
            .order_by(wg_events.c.position)
            .limit(PAGE)
        )
        super().__init__(store, query)

    def read(self, after: int) -> list[Any]:
        """Up to :data:`PAGE` rows (position, stream id, type, has a checkpoint) after
        ``after``."""
        kept = self._connection is not None
        try:
            return super().read(after)
        except Exception:
            if not kept:
                raise
            self.drop(broken=True)
            return super().read(after)


class Message(dict[str, Any]):
    """A message to the pages: the dict, and its JSON, encoded the first time a page's stream
    sends it and shared by the others (50 open pages were 50 encodings of every message)."""

    @functools.cached_property
    def json(self) -> str:
        """The message as JSON text (an SSE event's data)."""
        return json.dumps(self)


def _offer(queue: asyncio.Queue[Message], message: Message) -> None:
    """Put ``message`` on ``queue``, dropping its oldest message when it is full."""
    if queue.full():
        with contextlib.suppress(asyncio.QueueEmpty):
            queue.get_nowait()
    queue.put_nowait(message)


def _bounded(counts: Counter[str], event_type: str) -> str:
    """``event_type``, or ``other`` once :data:`MAX_EVENT_TYPES` names are counted."""
    if event_type in counts or len(counts) < MAX_EVENT_TYPES:
        return event_type
    return "other"


def _reports_a_checkpoint(store: EventStore) -> sa.ColumnElement[bool]:
    """The event is a ``WorkerReported`` whose ``data`` holds a non-null ``checkpoint`` (the
    JSON column of each backend): what ``/metrics`` counts as committed checkpoints."""
    if store.is_postgres:
        has_checkpoint = sa.text("(data->>'checkpoint') IS NOT NULL")
    else:
        has_checkpoint = sa.text("json_extract(data, '$.checkpoint') IS NOT NULL")
    return sa.and_(wg_events.c.event_type == "WorkerReported", has_checkpoint)


def _first_line(error: BaseException) -> str:
    text = str(error).strip() or type(error).__name__
    return text.splitlines()[0][:600]
