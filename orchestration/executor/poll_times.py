"""``PollTimes``: which groups a loop turn of the executor has to look at for polls.

:func:`~wgstore.orchestration.executor.step.schedule_polls` and
:func:`~wgstore.orchestration.executor.step.next_wake_s` are the rules, over every book. An
executor serving hundreds of groups turned its loop hundreds of times a second (a wake for each
append), and every turn scanned every book three times (issue 25's fleet profile: ~9 % of a
fleet process's CPU). ``PollTimes`` gives the same answers from the books that changed since the
last turn and those whose next poll time has come, kept in a heap: a turn costs what changed,
not what is served.

It holds, between calls, that every book not marked :meth:`changed` whose group
``schedule_polls`` could find due later, or ``next_wake_s`` would count, has its
``next_poll_at`` in the heap; so the caller must mark every book it creates or replaces. No
clock, no I/O, no threads: the executor calls it under its lock with the ``now`` it read
(``tests/orchestration/test_poll_times.py`` checks it against the full scan, step by step).
"""

from __future__ import annotations

import heapq
from collections.abc import Mapping

from wgstore.orchestration.executor.step import (
    GroupBook,
    PollSchedule,
    next_wake_s,
    pollable,
    schedule_polls,
)

__all__ = ["PollTimes"]


class PollTimes:
    """The next poll time of each served group, and the groups changed since the last turn."""

    def __init__(self) -> None:
        self._heap: list[tuple[float, str]] = []
        self._at: dict[str, float] = {}  # the heap entry that counts, per group
        self._changed: set[str] = set()

    def changed(self, group_id: str) -> None:
        """``group_id``'s book was created, replaced or removed: look at it next turn."""
        self._changed.add(group_id)
        self._at.pop(group_id, None)  # its heap entry, if any, no longer counts

    def schedule(self, books: Mapping[str, GroupBook], now: float) -> PollSchedule:
        """What ``schedule_polls(books, now)`` decides, looking only at the groups that changed
        or whose poll time has come. An ended group is reported once; mark it changed again
        to have it reported again (its book could not be dropped yet)."""
        candidates = self._changed
        self._changed = set()
        while self._heap and self._heap[0][0] <= now:
            at, group_id = heapq.heappop(self._heap)
            if self._at.get(group_id) == at:
                del self._at[group_id]
                candidates.add(group_id)
        looked_at = {g: books[g] for g in candidates if g in books}
        schedule = schedule_polls(looked_at, now)
        for group_id, book in looked_at.items():
            self._track(group_id, schedule.books.get(group_id, book), now)
        return schedule

    def next_wake_s(self, books: Mapping[str, GroupBook], now: float) -> float:
        """What ``next_wake_s(books.values(), now)`` says (its default bounds)."""
        heap = self._heap
        while heap:
            at, group_id = heap[0]
            if self._at.get(group_id) == at:
                book = books.get(group_id)
                if at > now or (book is not None and not book.poll_queued):
                    break
                del self._at[group_id]  # overdue with its poll still queued: not counted
            heapq.heappop(heap)  # (or a stale entry: the group changed since)
        changed = [books[g] for g in self._changed if g in books]
        wait = next_wake_s(changed, now)
        if heap:
            wait = min(wait, next_wake_s((), now, longest_s=heap[0][0] - now))
        return wait

    def _track(self, group_id: str, book: GroupBook, now: float) -> None:
        """Keep ``book``'s next poll time in the heap while a turn may find it due or
        ``next_wake_s`` counts it; forget it otherwise (until it changes)."""
        due_later = pollable(book) and not (book.poll_queued and book.next_poll_at <= now)
        if not due_later:  # (an ended group is not pollable)
            self._at.pop(group_id, None)
            return
        if self._at.get(group_id) != book.next_poll_at:
            self._at[group_id] = book.next_poll_at
            heapq.heappush(self._heap, (book.next_poll_at, group_id))
