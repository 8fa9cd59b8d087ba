"""Named, durable readers of the log: catch up from a checkpoint, then follow live.

A subscription's checkpoint is the position of the last event it handled, kept in
``wg_subscriptions``. With ``transactional=True`` the handler gets the SQLAlchemy connection of
the transaction that advances the checkpoint, so its own writes and the checkpoint commit
together: each event is applied exactly once, even across crashes. The checkpoint only moves
by compare-and-set, so two processes running the same subscription never both apply a batch.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql, sqlite

from wgstore.events._translate import translate_errors
from wgstore.events.errors import EventStoreError, StoreUnavailableError
from wgstore.events.records import RecordedEvent
from wgstore.events.schema import wg_subscriptions

if TYPE_CHECKING:
    from wgstore.events.log_access import LogAccess

__all__ = ["Subscription", "SubscriptionConflictError", "follow_until_stopped"]

log = logging.getLogger(__name__)

MAX_RETRY_WAIT_S = 5.0
"""The longest pause of a follower (:func:`follow_until_stopped`) between tries while the
database is away."""

BatchHandler = Callable[[list[RecordedEvent]], Any]
TransactionalHandler = Callable[[sa.Connection, list[RecordedEvent]], Any]


class SubscriptionConflictError(EventStoreError):
    """Another reader moved the subscription's checkpoint while this one was handling a batch."""


class Subscription:
    """A named, durable, catch-up-then-live reader of the log."""

    def __init__(
        self,
        store: LogAccess,
        name: str,
        *,
        types: Iterable[str | type] | None = None,
        streams: str | tuple[str, ...] | None = None,
    ) -> None:
        """A reader named ``name``; ``types`` and ``streams`` (stream id prefixes) narrow it.

        With ``streams``, events of other streams are never read (nor decoded), and the
        checkpoint still moves past them: once caught up, it is at the log's head.
        """
        if not isinstance(name, str) or not name:
            raise ValueError("a subscription needs a non-empty name")
        self.store = store
        self.name = name
        self.types = list(types) if types is not None else None
        self.streams = streams

    def checkpoint(self) -> int:
        """The position of the last event this subscription handled (0 for none)."""
        with translate_errors(self.store.url), self.store.engine.connect() as connection:
            value = connection.execute(
                sa.select(wg_subscriptions.c.checkpoint).where(wg_subscriptions.c.name == self.name)
            ).scalar()
            connection.rollback()
        return int(value or 0)

    def reset(self, to: int = 0) -> None:
        """Move the checkpoint to position ``to`` (0: handle everything again)."""
        with translate_errors(self.store.url), self.store.engine.begin() as connection:
            self._ensure_row(connection)
            connection.execute(
                wg_subscriptions.update()
                .where(wg_subscriptions.c.name == self.name)
                .values(checkpoint=to, updated_at=datetime.now(UTC))
            )

    def process(
        self,
        handler: BatchHandler | TransactionalHandler,
        *,
        transactional: bool = False,
        batch_size: int = 500,
        max_batches: int | None = None,
        prepare: Callable[[list[RecordedEvent]], Any] | None = None,
    ) -> int:
        """Hand every event available now to ``handler``, batch by batch; return how many.

        ``handler(batch)`` by default (at-least-once: the checkpoint is saved after the batch);
        ``handler(connection, batch)`` with ``transactional=True`` (exactly-once).
        ``max_batches`` stops after that many batches, caught up or not (a caller that must not
        spend long on a big backlog); None goes on until caught up. ``prepare`` (transactional
        only): called with each batch before its transaction opens, and the handler gets what
        it returned instead of the batch: the work that needs no lock (reading, folding), so a
        SQLite write transaction is held only for the writes.
        """
        handled = 0
        batches = 0
        while max_batches is None or batches < max_batches:
            count = self._process_batch(handler, transactional, batch_size, prepare)
            handled += count
            batches += 1
            if count < batch_size:
                break
        return handled

    def run(
        self,
        handler: BatchHandler | TransactionalHandler,
        *,
        stop: threading.Event,
        transactional: bool = False,
        batch_size: int = 500,
        wait_s: float = 1.0,
    ) -> None:
        """Catch up, then follow the log live until ``stop`` is set.

        The database going away (a dropped connection, a server restart) does not end it: it
        logs the outage once, tries again with a backoff up to :data:`MAX_RETRY_WAIT_S` until
        the database answers or ``stop`` is set, and logs the way back. Nothing is lost or
        applied twice beyond the handler's contract: the checkpoint moves only in a committed
        transaction, so a batch whose checkpoint was not saved is handed over again (at least
        once), and a transactional handler's writes rolled back with it (exactly once).
        """

        def one_pass() -> None:
            self.process(handler, transactional=transactional, batch_size=batch_size)
            if not stop.is_set():
                self.store.wait_for_new(self.checkpoint(), timeout_s=wait_s)

        follow_until_stopped(self.store, f"subscription {self.name!r}", one_pass, stop=stop)

    def _process_batch(
        self,
        handler: Any,
        transactional: bool,
        batch_size: int,
        prepare: Callable[[list[RecordedEvent]], Any] | None = None,
    ) -> int:
        start = self.checkpoint()
        # Read the head first: every event at or below it is committed (appends are serialized),
        # so once a filtered read comes back short, nothing below the head is left for us.
        head = self.store.head() if self.streams is not None else 0
        batch = list(
            self.store.read_all(
                after=start, limit=batch_size, types=self.types, streams=self.streams
            )
        )
        end = batch[-1].position if batch else start
        if len(batch) < batch_size:
            end = max(end, head)
        if end <= start:
            return 0
        with translate_errors(self.store.url):
            if transactional:
                work = prepare(batch) if prepare is not None and batch else batch
                with self.store.engine.begin() as connection:
                    if batch:
                        handler(connection, work)
                    self._advance(connection, start, end)
            elif batch:
                handler(batch)
                with self.store.engine.begin() as connection:
                    self._advance(connection, start, end)
            else:
                with self.store.engine.begin() as connection:
                    self._advance(connection, start, end)
        return len(batch)

    def _advance(self, connection: sa.Connection, start: int, end: int) -> None:
        self._ensure_row(connection)
        moved = connection.execute(
            wg_subscriptions.update()
            .where(wg_subscriptions.c.name == self.name, wg_subscriptions.c.checkpoint == start)
            .values(checkpoint=end, updated_at=datetime.now(UTC))
        ).rowcount
        if moved != 1:
            raise SubscriptionConflictError(
                f"subscription {self.name!r} was moved past position {start} by another reader "
                f"while this one handled events up to {end}; run one reader per subscription name"
            )

    def _ensure_row(self, connection: sa.Connection) -> None:
        dialect = postgresql if connection.dialect.name == "postgresql" else sqlite
        connection.execute(
            dialect.insert(wg_subscriptions)
            .values(name=self.name, checkpoint=0, updated_at=datetime.now(UTC))
            .on_conflict_do_nothing(index_elements=["name"])
        )


def retry_wait_s(tries: int) -> float:
    """The pause after the ``tries``-th failed try in a row: 0.2 s doubling to
    :data:`MAX_RETRY_WAIT_S` (and staying there, however long the outage lasts)."""
    return min(0.1 * 2.0 ** min(tries, 16), MAX_RETRY_WAIT_S)


def follow_until_stopped(
    store: LogAccess, what: str, one_pass: Callable[[], Any], *, stop: threading.Event
) -> None:
    """Call ``one_pass`` (handle what is new, then wait for more) until ``stop`` is set.

    The database going away (a dropped connection, a server restart) does not end it: a pass
    that raises :class:`~wgstore.events.errors.StoreUnavailableError` is logged once as ``what``
    (``"subscription 'x'"``), tried again with a backoff up to :data:`MAX_RETRY_WAIT_S` until
    the database answers or ``stop`` is set, and the way back is logged. A store that was closed
    still raises: that is not an outage. What ``one_pass`` does must be safe to repeat (the
    subscriptions' checkpoints move only in a committed transaction).
    """
    failing_since: float | None = None
    tries = 0
    while not stop.is_set():
        try:
            one_pass()
        except StoreUnavailableError as error:
            if store.closed:
                raise  # not an outage: this store object was closed
            tries += 1
            if failing_since is None:
                failing_since = time.monotonic()
                log.warning(
                    "%s: the database went away (%s); trying again until it answers", what, error
                )
            stop.wait(retry_wait_s(tries))  # a backoff, or until stopped
            continue
        if failing_since is not None:
            log.warning(
                "%s: the database answers again after %.1f s (%d tries)",
                what,
                time.monotonic() - failing_since,
                tries,
            )
            failing_since, tries = None, 0
