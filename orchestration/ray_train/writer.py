"""A background writer: appends leave the caller at once, a thread writes them in batches.

Ray Train calls its callbacks on the controller's event loop, and an exception from a callback
becomes a controller failure, so :class:`RecordingCallback` never writes in a hook: it hands the
events to a :class:`BackgroundWriter`. The writer's thread drains what is waiting, appends each run
of consecutive events of one stream as one batch (global order is kept), and retries a database
that is down or slow with exponential backoff. Every event carries its id from the moment it is
submitted, so a retry after a lost reply writes nothing twice (the store's idempotent append).

Failures are reported in the log of the process (the Ray Train controller's log), never raised
into the caller unless it asked (``strict``): :meth:`BackgroundWriter.check` raises
:class:`RecordingError` once a batch could not be written within ``retry_limit_s``.

With ``read_models_interval_s`` the thread also brings the SQL read models up to date after it
writes (at most that often, a bounded amount each time, and once more at close), as an executor
does for the groups it runs: the pages of ``wgstore serve``, ``wgstore runs`` and ``/metrics``
then read a recorded run from the read models instead of folding the log.
No Ray here: the writer is tested without it.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from uuid_utils import uuid7

from wgstore.events.errors import (
    ConcurrencyError,
    DuplicateEventError,
    EventEncodeError,
    FencedError,
    UnknownEventTypeError,
    WgstoreError,
)
from wgstore.events.records import ANY, NO_STREAM, Fence, NewEvent
from wgstore.events.run import RunCreated

__all__ = ["BackgroundWriter", "RecordingError", "WriterStats"]


def _new_id() -> uuid.UUID:
    """A time-ordered event id (UUID version 7), as the store makes them."""
    return uuid.UUID(bytes=uuid7().bytes)


logger = logging.getLogger("wgstore.ray_train")

_PERMANENT = (
    ConcurrencyError,
    DuplicateEventError,
    EventEncodeError,
    UnknownEventTypeError,
    TypeError,
    ValueError,
)
"""Errors a retry cannot fix (the events themselves are wrong): the batch is dropped, reported."""

_CLOSE_GRACE_S = 5.0
"""How long close() waits past its deadline for a write still in the database."""

READ_MODEL_BATCHES = 4
"""Batches of 500 events one read-model catch-up of the writer applies at most: a log whose read
models are far behind (nobody projected it) is caught up a little at a time, never in one long
stretch of the controller's CPU; ``wgstore projections catch-up`` does the rest at once."""


class RecordingError(WgstoreError):
    """Recording a Ray Train run into wgstore failed (raised into Ray Train only when strict)."""


@dataclass(slots=True)
class WriterStats:
    """What the writer did: counts, the time it spent failing, and what it could not write."""

    submitted: int = 0
    written: int = 0
    batches: int = 0
    retries: int = 0
    dropped: int = 0
    """Events given up on: a permanent error, a full queue, or the flush bound at close."""
    outage_s: float = 0.0
    """Seconds between a first failed append and the next one that succeeded, summed."""
    problems: list[str] = field(default_factory=list)
    """One line per outage, recovery or drop, in order (the same text as the log)."""


@dataclass(slots=True)
class _Item:
    stream_id: str
    event: NewEvent
    blobs: tuple[bytes, ...] = ()
    """Bytes the event names by hash: put in ``wg_blobs`` before the event is appended."""


def _expected(batch: Sequence[_Item]) -> Any:
    """``NO_STREAM`` for the batch that begins a run stream (``RunCreated``), else ``ANY``."""
    return NO_STREAM if isinstance(batch[0].event.event, RunCreated) else ANY


class BackgroundWriter:
    """Appends submitted events from a background thread, in batches, retrying failures.

    Args:
        open_store: makes the store (called in the thread, again after a failure, so a store
            that cannot even be opened is retried like a failed append).
        url: the database URL, for messages (its password is masked).
        retry_limit_s: a batch still failing after this long is a failure :meth:`check`
            raises (the writer itself keeps retrying until :meth:`close`).
        max_batch: at most this many events in one append.
        max_pending: events kept while the database is away; past it new events are dropped
            (and counted), so a long outage cannot exhaust the controller's memory.
        backoff_s: first wait after a failure, doubled up to ``max_backoff_s``.
        linger_s: how long the thread waits after the first new event for more to batch
            (:meth:`flush` and :meth:`close` cut it short).
        hold_s: how long the thread keeps what is submitted before it first opens the store,
            unless :meth:`release`, :meth:`flush` or :meth:`close` comes first. Opening a store
            loads SQLAlchemy and the driver (~0.3 s of CPU in the caller's process, under its
            GIL): held while the caller is busy (a Ray Train controller starting its workers),
            it runs when the caller is mostly waiting. Events are queued meanwhile, not lost.
        read_models_interval_s: after writing, bring the SQL read models up to date at most
            this often (:data:`READ_MODEL_BATCHES` batches a time), and once more at close;
            None leaves them to others. A failure is logged, never retried into the writes.
    """

    def __init__(
        self,
        open_store: Callable[[], Any],
        *,
        url: str = "",
        retry_limit_s: float = 30.0,
        max_batch: int = 500,
        max_pending: int = 100_000,
        backoff_s: float = 0.05,
        max_backoff_s: float = 2.0,
        linger_s: float = 0.2,
        hold_s: float = 0.0,
        read_models_interval_s: float | None = None,
    ) -> None:
        self._open_store = open_store
        self._raw_url = url
        self._retry_limit_s = retry_limit_s
        self._max_batch = max_batch
        self._max_pending = max_pending
        self._backoff_s = backoff_s
        self._max_backoff_s = max_backoff_s
        self._linger_s = linger_s
        self._hold_until: float | None = time.monotonic() + hold_s if hold_s > 0 else None
        self._flushing = 0
        self._queue: deque[_Item] = deque()
        self._cond = threading.Condition()
        self._closing = False
        self._closed_at = 0.0
        self._close_deadline: float | None = None
        self._busy = 0
        self._batch_started: float | None = None
        self._store: Any = None
        self.fence: Fence | None = None
        """The run's lease as a fencing token, carried by every append once set (the recorder
        sets it when it takes the lease, in this thread, before the first append)."""
        self._fenced_off: str | None = None
        self._failing_since: float | None = None
        self._failure: RecordingError | None = None
        self._first_error = ""
        self._read_models_interval_s = read_models_interval_s
        self._read_models_due = 0.0
        self._unprojected = False
        """Whether events were written since the read models were last caught up."""
        self._read_models_failing = False
        self.stats = WriterStats()
        self._thread = threading.Thread(target=self._run, name="wgstore-ray-train-writer")
        self._thread.daemon = True
        self._thread.start()

    # ------------------------------------------------------------------ the caller's side

    def submit(
        self, stream_id: str, events: Sequence[NewEvent], *, blobs: Sequence[bytes] = ()
    ) -> None:
        """Queue ``events`` for ``stream_id``; returns at once (never raises for the database).

        ``blobs`` are stored in ``wg_blobs`` (:func:`~wgstore.events.blobs.put_blobs`) before
        the events are appended, in the same retried step, so no event names missing bytes.
        """
        with self._cond:
            self.stats.submitted += len(events)
            if self._closing:
                self._drop(len(events), "submitted after close()")
                return
            if self._fenced_off is not None:  # said once, when it happened
                self.stats.dropped += len(events)
                return
            room = self._max_pending - len(self._queue)
            if room < len(events):
                self._drop(len(events), f"more than {self._max_pending} events waiting")
                return
            was_empty = not self._queue
            extra = tuple(blobs)
            for event in events:
                if event.event_id is None:  # fixed now, so a retry is idempotent
                    event = NewEvent(event.event, event_id=_new_id(), metadata=event.metadata)
                self._queue.append(_Item(stream_id, event, extra))
                extra = ()
            if was_empty or len(self._queue) >= self._max_batch:
                self._cond.notify()  # wake the thread only when it has work to start

    def release(self) -> None:
        """End the hold (``hold_s``): the thread opens the store and writes what is waiting."""
        with self._cond:
            if self._hold_until is not None:
                self._hold_until = None
                self._cond.notify_all()

    def check(self) -> None:
        """Raise :class:`RecordingError` once a batch has failed, or hung in the database, for
        longer than the retry limit (or was dropped)."""
        failure = self._failure
        since = self._failing_since or self._batch_started
        if failure is None and since is not None and time.monotonic() - since > self._retry_limit_s:
            failure = self._failure = RecordingError(self._failing_text(since))
        if failure is not None:
            raise failure

    @property
    def failure(self) -> RecordingError | None:
        """The failure :meth:`check` raises, if any (``None`` while everything is written)."""
        try:
            self.check()
        except RecordingError as error:
            return error
        return None

    @property
    def pending(self) -> int:
        """Events submitted and not yet written (nor dropped)."""
        with self._cond:
            return len(self._queue) + self._busy

    def flush(self, timeout_s: float) -> bool:
        """Wait until everything submitted is written, at most ``timeout_s``; True if it was."""
        deadline = time.monotonic() + timeout_s
        with self._cond:
            self._flushing += 1
            self._cond.notify_all()
        try:
            return self._wait_written(deadline)
        finally:
            with self._cond:
                self._flushing -= 1

    def _wait_written(self, deadline: float) -> bool:
        with self._cond:
            while self._queue or self._busy:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._cond.wait(min(left, 0.05))
        return True

    def close(self, timeout_s: float) -> bool:
        """Flush (waiting at most ``timeout_s``), stop the thread and close the store.

        A store first opened after close was called (held until then: a Ray Train run that
        ended before training started) has the time its open took added to ``timeout_s``: the
        bound is for writing, and on a loaded machine the open alone can take longer (a hung
        open adds nothing). Returns True when everything submitted was written; what could
        not be is counted in ``stats.dropped`` and reported in the log.
        """
        with self._cond:
            self._closing = True
            self._closed_at = time.monotonic()
            self._close_deadline = self._closed_at + timeout_s
            self._cond.notify_all()
        while self._thread.is_alive():
            with self._cond:
                deadline = self._close_deadline
            assert deadline is not None  # set above; the thread only moves it later
            wait_s = deadline + _CLOSE_GRACE_S - time.monotonic()
            if wait_s <= 0:
                break
            self._thread.join(wait_s)
        with self._cond:
            left = len(self._queue)
            if left:
                self._queue.clear()
                self._drop(left, f"the database was still failing after the {timeout_s:g} s flush")
            if self._thread.is_alive() and self._busy:
                self._drop(
                    self._busy,
                    f"an append still hung in the database after the {timeout_s:g} s flush",
                )
        return self.stats.dropped == 0

    # ------------------------------------------------------------------ the thread

    def _run(self) -> None:
        while True:
            with self._cond:
                self._hold()
                self._wait_for_work()
                if not self._queue and self._closing:
                    break
                batch: list[_Item] = []
                if self._queue:
                    self._linger()
                    batch = self._take_batch()
                    self._busy = len(batch)
            if batch:
                try:
                    self._write(batch)
                finally:
                    with self._cond:
                        self._busy = 0
                        self._batch_started = None
                        self._cond.notify_all()
            if self._past_close_deadline():
                break
            self._catch_up_read_models(final=False)
        if not self._past_close_deadline():
            self._catch_up_read_models(final=True)
        self._close_store()

    def _wait_for_work(self) -> None:
        """Wait (lock held) for events to write, for close, or for a read-model catch-up
        that has come due."""
        while not self._queue and not self._closing:
            due_in = self._read_models_due_in()
            if due_in is not None and due_in <= 0:
                return
            self._cond.wait(due_in)

    def _read_models_due_in(self) -> float | None:
        """Seconds until the read models should be caught up (None: nothing to catch up)."""
        if self._read_models_interval_s is None or not self._unprojected or self._store is None:
            return None
        return self._read_models_due - time.monotonic()

    def _catch_up_read_models(self, *, final: bool) -> None:
        """Bring the read models up to date with what this writer wrote, if due (or ``final``).

        A bounded amount of work (:data:`READ_MODEL_BATCHES`); a failure is logged once per
        spell and tried again at the next interval, never raised (the record is the log)."""
        due_in = self._read_models_due_in()
        if due_in is None or (due_in > 0 and not final):
            return
        self._read_models_due = time.monotonic() + (self._read_models_interval_s or 0.0)
        self._unprojected = False
        try:
            from wgstore.projections.projector import catch_up_read_models

            catch_up_read_models(self._store, max_batches=READ_MODEL_BATCHES)
        except Exception as error:  # noqa: BLE001 - derived data: the log is already written
            self._unprojected = True
            if not self._read_models_failing:
                self._read_models_failing = True
                logger.warning(
                    "wgstore: the read models of %s were not caught up (%s: %s); the log is "
                    "complete, `wgstore projections catch-up` brings them up to date",
                    self._url,
                    type(error).__name__,
                    error,
                )
            return
        self._read_models_failing = False

    def _hold(self) -> None:
        """Wait (lock held) until the hold ends: :meth:`release`, ``hold_s`` passed, a flush,
        or close. Once over, it is over (the store is open from then on)."""
        while self._hold_until is not None and not self._closing and not self._flushing:
            left = self._hold_until - time.monotonic()
            if left <= 0:
                break
            self._cond.wait(left)
        self._hold_until = None

    def _linger(self) -> None:
        """Wait up to ``linger_s`` for more events (lock held), so a burst is one append and
        the thread (which shares the GIL with the controller) wakes a few times a second."""
        deadline = time.monotonic() + self._linger_s
        while not self._closing and not self._flushing and len(self._queue) < self._max_batch:
            left = deadline - time.monotonic()
            if left <= 0:
                return
            self._cond.wait(left)

    def _take_batch(self) -> list[_Item]:
        first = self._queue.popleft()
        batch = [first]
        while (
            self._queue
            and len(batch) < self._max_batch
            and self._queue[0].stream_id == first.stream_id
        ):
            batch.append(self._queue.popleft())
        return batch

    def _past_close_deadline(self) -> bool:
        deadline = self._close_deadline
        return deadline is not None and time.monotonic() >= deadline

    def fenced_off(self, why: str) -> None:
        """Another process records the run now: drop what is queued and every later event.

        Called when the lease is held by another live holder, and by the writer itself when the
        database refuses an append's fence. Nothing this process still has is written after it.
        """
        with self._cond:
            if self._fenced_off is None:
                self._fenced_off = why
                left = len(self._queue)
                self._queue.clear()
                if left:
                    self._drop(left, why)
                else:
                    self._note(why)
            self._cond.notify_all()

    def _write(self, batch: list[_Item]) -> None:
        backoff = self._backoff_s
        self._batch_started = time.monotonic()
        while True:
            if self._fenced_off is not None:
                with self._cond:
                    self.stats.dropped += len(batch)
                return
            try:
                if self._store is None:
                    opening = time.monotonic()
                    self._store = self._open_store()
                    self._opened(opening)
                    if self._fenced_off is not None:  # opening found the run held by another
                        continue
                blobs = [blob for item in batch for blob in item.blobs]
                if blobs:
                    from wgstore.events.blobs import put_blobs

                    put_blobs(self._store, blobs)
                self._store.append(
                    batch[0].stream_id,
                    [item.event for item in batch],
                    fence=self.fence,
                    expected_version=_expected(batch),
                )
            except ConcurrencyError:
                # the stream a RunCreated begins exists: `wgstore ingest ray-export` recorded
                # the run from Ray's export events first; writing on would break its fold
                self.fenced_off(
                    f"{batch[0].stream_id} was already recorded (from Ray's export events, by "
                    "`wgstore ingest ray-export`): this callback does not write into it"
                )
                continue
            except FencedError as error:
                self.fenced_off(
                    f"run {error.lease}'s lease passed to {error.now_holder!r}: another "
                    "process records this run now, this one stops"
                )
                continue
            except _PERMANENT as error:
                with self._cond:
                    self._drop(len(batch), f"{type(error).__name__}: {error}", error=True)
                return
            except Exception as error:  # noqa: BLE001 - any other failure: retry
                self._on_failure(error, len(batch))
                if self._past_close_deadline():
                    with self._cond:  # close() gives up: the batch is lost
                        self._drop(len(batch), "the flush bound at close() ran out")
                    return
                self._sleep(backoff)
                backoff = min(backoff * 2, self._max_backoff_s)
                continue
            self._on_success(len(batch))
            return

    def _opened(self, opening: float) -> None:
        """The store is open, after an open that began at ``opening``: what of its time fell
        after close() was called is added to the close deadline (see :meth:`close`)."""
        with self._cond:
            if self._close_deadline is not None:
                after_close = time.monotonic() - max(opening, self._closed_at)
                self._close_deadline += max(0.0, after_close)

    @property
    def _url(self) -> str:
        """The URL for messages, password masked (SQLAlchemy loads here, not at import)."""
        if not self._raw_url:
            return "the store"
        from wgstore.events.engine import mask_url

        return mask_url(self._raw_url)

    def _sleep(self, seconds: float) -> None:
        with self._cond:
            deadline = self._close_deadline
            if deadline is not None:
                seconds = max(0.0, min(seconds, deadline - time.monotonic()))
            self._cond.wait(seconds)

    @property
    def failing(self) -> bool:
        """True while appends fail (from a first failure to the next append that succeeds)."""
        return self._failing_since is not None

    def outage_so_far_s(self) -> float:
        """:attr:`WriterStats.outage_s` and, while appends fail, the outage under way."""
        since = self._failing_since
        ongoing = 0.0 if since is None else time.monotonic() - since
        return self.stats.outage_s + ongoing

    def _on_failure(self, error: BaseException, size: int) -> None:
        self.stats.retries += 1
        self._close_store()  # a fresh connection on the next try
        if self._failing_since is None:
            self._failing_since = time.monotonic()
            self._first_error = f"{type(error).__name__}: {error}"
            text = (
                f"wgstore: appending {size} event(s) to {self._url} failed "
                f"({self._first_error}); retrying with backoff, training goes on"
            )
            self.stats.problems.append(text)
            logger.warning(text)

    def _on_success(self, size: int) -> None:
        self.stats.written += size
        self.stats.batches += 1
        self._unprojected = True
        if self._failing_since is not None:
            outage = time.monotonic() - self._failing_since
            self.stats.outage_s += outage
            self._failing_since = None
            self._first_error = ""
            text = (
                f"wgstore: {self._url} is writable again after {outage:.1f} s; "
                "the delayed events are written (nothing lost)"
            )
            self.stats.problems.append(text)
            logger.warning(text)

    def _failing_text(self, since: float) -> str:
        how = f"failed ({self._first_error})" if self._first_error else "not completed"
        return (
            f"cannot record the Ray Train run in {self._url}: appends have {how} for "
            f"{time.monotonic() - since:.1f} s; "
            "check that the database is reachable and writable, or pass strict=False to "
            "let training go on without the record"
        )

    def _note(self, text: str) -> None:
        text = f"wgstore: {text}"
        self.stats.problems.append(text)
        logger.error(text)

    def _drop(self, count: int, why: str, *, error: bool = False) -> None:
        self.stats.dropped += count
        text = f"wgstore: {count} event(s) not recorded in {self._url}: {why}"
        self.stats.problems.append(text)
        logger.error(text)
        if error and self._failure is None:
            self._failure = RecordingError(text)

    def _close_store(self) -> None:
        store, self._store = self._store, None
        if store is not None:
            try:
                store.close()
            except Exception:  # closing a broken connection may fail too
                logger.debug("closing the store failed", exc_info=True)
