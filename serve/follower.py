"""One follower of the log for the whole server, sending each open page (server-sent events)
the new events that concern it, and keeping the counters ``/metrics`` reports.

It waits for the log to move (Postgres ``LISTEN/NOTIFY``, or SQLite's short poll) in one thread,
reads what is new once, and hands a small message to the queue of each subscriber the batch
concerns (its :class:`~wgstore.serve.interest.Interest`), listing only the events that concern
it: the pages then ask the JSON API for what they show. Every other subscriber gets at most one
``head`` message (the new head, no events) every :data:`HEAD_INTERVAL_S`, so an append no page
shows costs the pages nothing. However many pages are open, the database sees one follower.

What it reads is narrow: each new event's position, stream, type, whether it is a report with
a checkpoint and, for a ``WorkerGroupStartRequested``, the run it names; one ``SELECT`` on a
connection it keeps (no event is decoded, and no pool checkout per wake).
It coalesces: after sending a message it reads again no sooner than :data:`MESSAGE_INTERVAL_S`
later, so a burst of appends is one read and one message per interval, while an append after a
quiet spell is sent at once.

A subscriber's first message is the follower's ``status``, taken with the subscription: a page
refetches on it, and every batch read after it goes to the subscriber, so a page that subscribes
(or subscribes again with another interest) misses no append that concerns it.

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
from collections.abc import Iterable, Sequence
from typing import Any

import sqlalchemy as sa

from wgstore.events import EventStore
from wgstore.events.notifier import POSTGRES_POLL_S, SQLITE_POLL_S
from wgstore.events.schema import wg_events
from wgstore.events.stored_names import json_field, type_name
from wgstore.events.stream_watch import RowReader
from wgstore.events.worker_group import WorkerGroupStartRequested, WorkerReported
from wgstore.serve.interest import EVERYTHING, NEW_ATTEMPT, Interest

__all__ = ["HEAD_INTERVAL_S", "MAX_EVENT_TYPES", "MESSAGE_INTERVAL_S", "Follower", "Message"]

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
HEAD_INTERVAL_S = 1.0
"""A subscriber that no append concerned gets the log's new head (a ``head`` message, for its
"live · head N") at most this often, and at once after a quiet spell."""
PAGE = 1000
"""Rows per query while catching up; a message counts every row read for it."""


class Follower:
    """Follows the log in a thread; each subscriber gets an :class:`asyncio.Queue` of messages.

    Messages are dicts: ``{"kind": "status", "available": bool, "problem": str | None,
    "head": N}`` (first, and whenever the store comes or goes), ``{"kind": "append", "head": N,
    "events": [{position, stream_id, type[, run_id]}, ...], "more": M}`` (the events of a batch
    that concern the subscriber, at most :data:`MAX_LISTED`; ``run_id`` on a
    ``WorkerGroupStartRequested``), ``{"kind": "head", "head": N}`` and ``{"kind": "closing"}``.
    """

    def __init__(
        self,
        store: EventStore,
        *,
        wait_s: float = 1.0,
        retry_s: float = 1.0,
        message_interval_s: float = MESSAGE_INTERVAL_S,
        head_interval_s: float = HEAD_INTERVAL_S,
    ) -> None:
        """Follow ``store``'s log (call :meth:`start`).

        Args:
            store: the store whose log to follow.
            wait_s: the longest wait without a read when no append wakes the follower (capped
                at the store's own poll interval: 0.5 s on Postgres, 10 ms on SQLite).
            retry_s: after a failed read, wait this long before the next.
            message_interval_s: the least time between two ``append`` messages
                (:data:`MESSAGE_INTERVAL_S`).
            head_interval_s: the least time between two ``head`` messages to a subscriber
                (:data:`HEAD_INTERVAL_S`).
        """
        if message_interval_s < 0 or wait_s <= 0 or retry_s < 0 or head_interval_s < 0:
            raise ValueError(
                "wait_s must be > 0, retry_s, message_interval_s and head_interval_s >= 0; got "
                f"wait_s={wait_s!r}, retry_s={retry_s!r}, message_interval_s="
                f"{message_interval_s!r}, head_interval_s={head_interval_s!r}"
            )
        self.store = store
        self.wait_s = wait_s
        self.retry_s = retry_s
        self.message_interval_s = message_interval_s
        self.head_interval_s = head_interval_s
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
        self._subscribers: dict[asyncio.Queue[Message], _Subscriber] = {}
        self._routes = _Routes(())
        self._heads_sent_at = 0.0
        self._heads_done = 0  # the head every subscriber has had

    # ------------------------------------------------------------------ subscribers

    @property
    def primed(self) -> bool:
        """True once :attr:`type_counts` and :attr:`checkpoints` count the log (the thread's
        first read); until then a reader counts for itself."""
        return self._primed

    def subscribe(self, interest: Interest = EVERYTHING) -> asyncio.Queue[Message]:
        """A new queue of messages for the calling event loop's task (a page's stream): the
        ``status`` as of now first, then what concerns ``interest``."""
        queue: asyncio.Queue[Message] = asyncio.Queue(QUEUE_SIZE)
        with self._lock:  # the status and the routes of one moment: no batch falls between
            status = Message(self.status())
            queue.put_nowait(status)
            self._subscribers[queue] = _Subscriber(
                queue, asyncio.get_running_loop(), interest, status["head"]
            )
            self._routes = _Routes(self._subscribers.values())
        return queue

    def unsubscribe(self, queue: asyncio.Queue[Message]) -> None:
        """Stop sending to ``queue`` (its page went away)."""
        with self._lock:
            if self._subscribers.pop(queue, None) is not None:
                self._routes = _Routes(self._subscribers.values())

    @property
    def clients(self) -> int:
        """How many pages are subscribed now."""
        with self._lock:
            return len(self._subscribers)

    def interests(self) -> list[Interest]:
        """What each open page stream watches (one entry a stream)."""
        with self._lock:
            return [subscriber.interest for subscriber in self._subscribers.values()]

    def status(self) -> dict[str, Any]:
        """The ``status`` message as of now."""
        return {
            "kind": "status",
            "available": self.available,
            "problem": self.problem,
            "head": self.head,
        }

    def _publish(self, fields: dict[str, Any]) -> None:
        """Send ``fields`` to every subscriber."""
        message = Message(fields)  # one object for every page: its JSON is encoded once
        with self._lock:
            targets = list(self._subscribers.values())
        for subscriber in targets:
            subscriber.send(message)

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
        # each wake through a pool checkout, a round trip before this follower's own read. Here
        # a wake costs the one read.
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
                self._send_heads()
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
        checkpoints = sa.select(sa.func.count()).where(reports_a_checkpoint(self.store))
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
        with self._lock:
            self.head = head
        self._primed = True
        self._set_available(True, None)

    def _take(self, reader: _RowReader) -> bool:
        """Read every event past :attr:`head`, a page at a time, count them and send each page
        to the subscribers it concerns; False when there was none."""
        read = False
        while True:
            rows = reader.read(self.head)
            if rows:
                self._deliver(rows)
                read = True
            if len(rows) < PAGE:
                return read

    def _deliver(self, rows: Sequence[Any]) -> None:
        """Count ``rows`` (position, stream id, type, has a checkpoint, run named), move the
        head past them and send each subscriber the ones that concern it."""
        counts = Counter(row[2] for row in rows)
        # A new Counter, not an update in place: /metrics copies it from another thread.
        totals = self.type_counts.copy()
        for event_type, count in counts.items():
            totals[_bounded(totals, event_type)] += count
        self.type_counts = totals
        self.checkpoints += sum(bool(row[3]) for row in rows)
        head = int(rows[-1][0])
        with self._lock:  # a subscriber from now on has a status at this head or later
            self.head = head
            routes = self._routes
        for interest, listing in routes.listings(rows).items():
            message = Message(
                {
                    "kind": "append",
                    "head": head,
                    "events": list(listing.events),
                    "more": listing.count - len(listing.events),
                }
            )
            for subscriber in routes.members[interest]:
                subscriber.send(message)
                subscriber.sent_head = head

    def _send_heads(self) -> None:
        """The log's head to each subscriber that has not had it, at most every
        :attr:`head_interval_s` (one message, encoded once, for all of them)."""
        now = time.monotonic()
        if self.head == self._heads_done or now - self._heads_sent_at < self.head_interval_s:
            return  # (a subscriber falls behind only when the head moves)
        with self._lock:
            head = self.head
            behind = [s for s in self._subscribers.values() if s.sent_head < head]
        self._heads_done = head
        if not behind:
            return
        self._heads_sent_at = now
        message = Message({"kind": "head", "head": head})
        for subscriber in behind:
            subscriber.send(message)
            subscriber.sent_head = head

    def _set_available(self, available: bool, problem: str | None) -> None:
        changed = available != self.available or problem != self.problem
        self.available, self.problem = available, problem
        if changed:
            self._publish(self.status())


class _Subscriber:
    """A page's stream: its queue, the event loop that reads it, what it watches and the
    newest head it was sent."""

    __slots__ = ("interest", "loop", "queue", "sent_head")

    def __init__(
        self,
        queue: asyncio.Queue[Message],
        loop: asyncio.AbstractEventLoop,
        interest: Interest,
        sent_head: int,
    ) -> None:
        self.queue = queue
        self.loop = loop
        self.interest = interest
        self.sent_head = sent_head

    def send(self, message: Message) -> None:
        """Put ``message`` on the queue, from any thread."""
        with contextlib.suppress(RuntimeError):  # the loop closed: the page is gone
            self.loop.call_soon_threadsafe(_offer, self.queue, message)


class _Listing:
    """The events of a batch that concern one interest: the last :data:`MAX_LISTED` of them,
    and how many there were."""

    __slots__ = ("count", "events")

    def __init__(self) -> None:
        self.events: deque[dict[str, Any]] = deque(maxlen=MAX_LISTED)
        self.count = 0


class _Routes:
    """The subscribers grouped by interest, and the interests indexed by what they watch: a
    batch costs a lookup or two per event, not a test per page. Rebuilt whenever a subscriber
    comes or goes, never changed (the follower's thread reads it without a lock)."""

    def __init__(self, subscribers: Iterable[_Subscriber]) -> None:
        self.members: dict[Interest, list[_Subscriber]] = {}
        for subscriber in subscribers:
            self.members.setdefault(subscriber.interest, []).append(subscriber)
        self.wide = [i for i in self.members if i.everything or i.wgstore_streams]
        self.by_stream: dict[str, list[Interest]] = {}
        self.by_run: dict[str, list[Interest]] = {}
        for interest in self.members.keys() - self.wide:
            for stream_id in interest.streams:
                self.by_stream.setdefault(stream_id, []).append(interest)
            for run_id in interest.runs:
                self.by_run.setdefault(run_id, []).append(interest)

    def reached(self, stream_id: str, event_type: str, run_id: str | None) -> list[Interest]:
        """The interests an event concerns (each once)."""
        found = [i for i in self.wide if i.concerns(stream_id, event_type, run_id)]
        found += self.by_stream.get(stream_id, ())
        if event_type == NEW_ATTEMPT and run_id is not None:
            found += [i for i in self.by_run.get(run_id, ()) if i not in found]
        return found

    def listings(self, rows: Iterable[Any]) -> dict[Interest, _Listing]:
        """The events of ``rows`` each interest is told about (only the interests reached)."""
        listings: dict[Interest, _Listing] = {}
        for position, stream_id, event_type, _checkpoint, run_id in rows:
            reached = self.reached(stream_id, event_type, run_id)
            if not reached:
                continue
            event = {"position": position, "stream_id": stream_id, "type": event_type}
            if event_type == NEW_ATTEMPT:
                event["run_id"] = run_id
            for interest in reached:
                listing = listings.get(interest)
                if listing is None:
                    listing = listings[interest] = _Listing()
                listing.events.append(event)
                listing.count += 1
        return listings


class _RowReader(RowReader):
    """The follower's query (position, stream id, type, a report with a checkpoint, the run a
    ``WorkerGroupStartRequested`` names) on a kept connection
    (:class:`~wgstore.events.stream_watch.RowReader`). A read that fails on the kept connection
    is tried once more on a new one (the server restarted since the last read); only that
    failing is an outage."""

    def __init__(self, store: EventStore) -> None:
        query = (
            sa.select(
                wg_events.c.position,
                wg_events.c.stream_id,
                wg_events.c.event_type,
                sa.case((reports_a_checkpoint(store), 1), else_=0),
                sa.case((wg_events.c.event_type == NEW_ATTEMPT, _names_a_run(store))),
            )
            .where(wg_events.c.position > sa.bindparam("after"))
            .order_by(wg_events.c.position)
            .limit(PAGE)
        )
        super().__init__(store, query)

    def read(self, after: int) -> list[Any]:
        """Up to :data:`PAGE` rows (position, stream id, type, has a checkpoint, run named)
        after ``after``."""
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


_REPORTED = type_name(WorkerReported)
# The stored fields the follower reads, named at import for each backend (PostgreSQL: True).
_RUN_ID = {pg: json_field(WorkerGroupStartRequested, "run_id", postgres=pg) for pg in (True, False)}
_CHECKPOINT = {pg: json_field(WorkerReported, "checkpoint", postgres=pg) for pg in (True, False)}


def _names_a_run(store: EventStore) -> sa.ColumnElement[Any]:
    """The ``run_id`` field of a ``WorkerGroupStartRequested``'s ``data`` (the JSON column of
    each backend)."""
    return _RUN_ID[store.is_postgres]


def reports_a_checkpoint(store: EventStore) -> sa.ColumnElement[bool]:
    """The event is a ``WorkerReported`` whose ``data`` holds a non-null ``checkpoint`` (the
    JSON column of each backend): what ``/metrics`` counts as committed checkpoints."""
    checkpoint = _CHECKPOINT[store.is_postgres]
    return sa.and_(wg_events.c.event_type == _REPORTED, sa.Grouping(checkpoint).is_not(None))


def _first_line(error: BaseException) -> str:
    text = str(error).strip() or type(error).__name__
    return text.splitlines()[0][:600]
