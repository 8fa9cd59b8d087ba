"""One follower of the log for the whole server, fanning each batch of new events out to the
open pages (server-sent events) and keeping the counters ``/metrics`` reports.

It blocks in :meth:`~wgstore.events.EventStore.wait_for_new` (Postgres ``LISTEN/NOTIFY``, or
SQLite's short poll of the head) in one thread, reads what is new once, and hands a small message
to each subscriber's queue: the pages then ask the JSON API for what they show. However many pages
are open, the database sees one follower. A database that goes away turns into a ``status``
message (``available: false``, the reason) and the follower retries until it is back.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections import Counter
from typing import Any

import sqlalchemy as sa

from wgstore.events import EventStore
from wgstore.events.schema import wg_events

__all__ = ["MAX_EVENT_TYPES", "Follower"]

_log = logging.getLogger("wgstore.serve")

MAX_EVENT_TYPES = 100
"""Distinct event types counted by name; any further type counts as ``other`` (a label bound)."""
MAX_LISTED = 200
"""An ``append`` message lists at most this many events (position, stream, type)."""
QUEUE_SIZE = 64
"""Messages a slow page may fall behind by; past it, its oldest message is dropped (it refetches
what it shows on every message, so it loses nothing but an intermediate picture)."""


class Follower:
    """Follows the log in a thread; each subscriber gets an :class:`asyncio.Queue` of messages.

    Messages are dicts: ``{"kind": "append", "head": N, "events": [{position, stream_id, type},
    ...], "more": M}`` and ``{"kind": "status", "available": bool, "problem": str | None,
    "head": N}``.
    """

    def __init__(self, store: EventStore, *, wait_s: float = 1.0, retry_s: float = 1.0) -> None:
        self.store = store
        self.wait_s = wait_s
        self.retry_s = retry_s
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
        self._subscribers: dict[asyncio.Queue[dict[str, Any]], asyncio.AbstractEventLoop] = {}

    # ------------------------------------------------------------------ subscribers

    def subscribe(self) -> asyncio.Queue[dict[str, Any]]:
        """A new queue of messages for the calling event loop's task (a page's stream)."""
        queue: asyncio.Queue[dict[str, Any]] = asyncio.Queue(QUEUE_SIZE)
        with self._lock:
            self._subscribers[queue] = asyncio.get_running_loop()
        return queue

    def unsubscribe(self, queue: asyncio.Queue[dict[str, Any]]) -> None:
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

    def _publish(self, message: dict[str, Any]) -> None:
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
        while not self._stop.is_set():
            try:
                if not self._primed:
                    self._prime()
                head = self.store.wait_for_new(self.head, timeout_s=self.wait_s, stop=self._stop)
                if not self.available:
                    self._set_available(True, None)
                if head > self.head and not self._stop.is_set():
                    self._take(head)
            except Exception as error:  # noqa: BLE001 - any failure of the store: banner, retry
                _log.info("the store is unavailable: %s", error)
                self._set_available(False, _first_line(error))
                self._stop.wait(self.retry_s)

    def _prime(self) -> None:
        """The head and the appends per type so far: one ``GROUP BY`` when the server starts."""
        query = sa.select(wg_events.c.event_type, sa.func.count()).group_by(wg_events.c.event_type)
        checkpoints = sa.select(sa.func.count()).where(
            wg_events.c.event_type == "WorkerReported",
            _has_checkpoint(self.store),
        )
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

    def _take(self, head: int) -> None:
        records = [r for r in self.store.read_all(after=self.head) if r.position <= head]
        for record in records:
            self.type_counts[_bounded(self.type_counts, record.type)] += 1
            if record.type == "WorkerReported" and getattr(record.event, "checkpoint", None):
                self.checkpoints += 1
        self.head = head
        listed = [
            {"position": r.position, "stream_id": r.stream_id, "type": r.type}
            for r in records[-MAX_LISTED:]
        ]
        self._publish(
            {
                "kind": "append",
                "head": head,
                "events": listed,
                "more": len(records) - len(listed),
            }
        )

    def _set_available(self, available: bool, problem: str | None) -> None:
        changed = available != self.available or problem != self.problem
        self.available, self.problem = available, problem
        if changed:
            self._publish(self.status())


def _offer(queue: asyncio.Queue[dict[str, Any]], message: dict[str, Any]) -> None:
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


def _has_checkpoint(store: EventStore) -> sa.TextClause:
    """``data`` holds a non-null ``checkpoint`` (the JSON column of each backend)."""
    if store.is_postgres:
        return sa.text("(data->>'checkpoint') IS NOT NULL")
    return sa.text("json_extract(data, '$.checkpoint') IS NOT NULL")


def _first_line(error: BaseException) -> str:
    text = str(error).strip() or type(error).__name__
    return text.splitlines()[0][:600]
