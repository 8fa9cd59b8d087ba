"""Group commit: appends that threads of one process make at the same time, written together.

A store object has one writer connection, so its threads' appends take turns. While one is
being written, the others wait; :class:`AppendQueue` has the first of them write every append
that waited (up to ``limit``) in one transaction: one commit, one fsync on SQLite, one
notification of the followers, instead of one of each per append. An append that waited for no
one is written alone at once, so nothing waits for a group to fill (the LevelDB writer queue's
scheme: the front of the queue leads, the others sleep until their append is written or they
reach the front).

The queue only orders and hands over; what a group's write does, and what each append's outcome
is, is the ``write`` function's: :meth:`wgstore.events.pooled_recorder.PooledRecorder.append`.
"""

from __future__ import annotations

import threading
from _thread import LockType
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from itertools import islice
from typing import Generic, TypeVar

__all__ = ["AppendQueue", "Queued"]

T = TypeVar("T")
R = TypeVar("R")


@dataclass(eq=False, slots=True)
class Queued(Generic[T, R]):
    """One append in the queue. ``write`` sets its ``result`` or its ``error``."""

    item: T
    retry: bool = False
    """It may be stored already (a group it was in failed, or its leader was interrupted,
    with no outcome known): ``write`` must check it by its event ids."""
    result: R | None = None
    error: BaseException | None = None
    done: bool = False
    taken: bool = False
    """A group holding it is being written (by its leader, whatever becomes of this thread)."""
    wake: threading.Event | None = None
    """Set when the append is written or has reached the front (None: it was the front)."""


class AppendQueue(Generic[T, R]):
    """Hands concurrent appends to ``write`` in groups (see the module docstring).

    Args:
        write: writes a group (the oldest first) and sets the ``result`` or ``error`` of each
            of its appends; it runs holding ``writer_lock``, in the thread of the group's first.
        writer_lock: the writer's lock, which closing the writer takes too; a group is taken
            from the queue once it is held, so that what queued while another write held it
            goes in the group.
        limit: the most appends in one group.
    """

    def __init__(
        self,
        write: Callable[[list[Queued[T, R]]], None],
        writer_lock: LockType,
        limit: int = 64,
    ) -> None:
        if limit < 1:
            raise ValueError(f"limit must be at least 1, got {limit}")
        self._write = write
        self._writer_lock = writer_lock
        self.limit = limit
        """The most appends in one group (1: each alone)."""
        self._lock = threading.Lock()
        self._queue: deque[Queued[T, R]] = deque()
        self.groups = 0
        """Groups written so far (each one transaction, unless it failed and went alone)."""
        self.appends = 0
        """Appends written so far in those groups: ``appends / groups`` is the mean group."""

    def __len__(self) -> int:
        """The appends queued, the group being written included (not an append written
        alone because it found the writer free)."""
        with self._lock:
            return len(self._queue)

    def submit(self, item: T) -> R:
        """Queue ``item``, wait until it is written (by this thread or another), and return its
        result or raise its error."""
        request: Queued[T, R] = Queued(item)
        if not self._queue and self._writer_lock.acquire(blocking=False):
            # No one waits and the writer is free: write it alone, without the queue.
            try:
                self._write([request])
                self.groups += 1
                self.appends += 1
            finally:
                self._writer_lock.release()
            return _outcome(request)
        with self._lock:
            if self._queue:
                request.wake = threading.Event()
            self._queue.append(request)
        try:
            if request.wake is not None:
                request.wake.wait()
            if not request.done:
                self._lead(request)
        except BaseException:
            self._abandon(request)
            raise
        return _outcome(request)

    def _abandon(self, request: Queued[T, R]) -> None:
        """The thread of ``request`` was interrupted (Ctrl-C) while it waited: take it out of
        the queue unless a group holding it is being written, and if it was at the front, hand
        the lead to the next, so that no append waits for a thread that has gone."""
        with self._lock:
            if request.taken or request.done or request not in self._queue:
                return  # written, being written, or already out (its own lead's handler)
            front = self._queue[0] is request
            self._queue.remove(request)
            following = self._queue[0] if front and self._queue else None
        if following is not None:
            _wake(following)

    def _lead(self, leader: Queued[T, R]) -> None:
        """Write the group at the front (``leader`` is first), then wake its appends and the
        next front."""
        group: list[Queued[T, R]] = []
        try:
            with self._writer_lock:
                with self._lock:
                    queued = self._queue
                    group = [leader] if len(queued) == 1 else list(islice(queued, self.limit))
                    for taken in group:
                        taken.taken = True
                self._write(group)
                self.groups += 1
                self.appends += len(group)
        except BaseException:
            # Interrupted with no outcome: the leader raises; the others are written by the
            # next leader, checking their ids (they may be stored).
            with self._lock:
                self._queue.popleft()
                for other in group[1:]:
                    other.retry = True
                    other.taken = False
                following = self._queue[0] if self._queue else None
            if following is not None:
                _wake(following)
            raise
        with self._lock:
            for _ in group:
                self._queue.popleft()
            following = self._queue[0] if self._queue else None
        leader.done = True
        if len(group) > 1:
            for request in group[1:]:
                request.done = True
                _wake(request)
        if following is not None:
            _wake(following)


def _outcome(request: Queued[T, R]) -> R:
    """The result ``write`` set, or the error it set, raised."""
    if request.error is not None:
        raise request.error
    return request.result  # type: ignore[return-value]  # write set it


def _wake(request: Queued[T, R]) -> None:
    assert request.wake is not None  # only the first of an empty queue has none
    request.wake.set()
