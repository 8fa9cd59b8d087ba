"""The group-commit queue on its own, no database: threads and a ``write`` that records groups.

The writer is held busy with its own lock (what a long append does to a real store), so the
appends that arrive meanwhile are known to be waiting when it is let go.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor

import pytest

from tests.waiting import wait_until
from wgstore.events.append_queue import AppendQueue, Queued

Group = list[Queued[str, str]]


class Writer:
    """Records every group it is given; each item's result is ``"<item> written"``, unless
    ``fail`` says otherwise."""

    def __init__(
        self, fail: Callable[[Queued[str, str]], BaseException | None] = lambda q: None
    ) -> None:
        self.groups: list[list[tuple[str, bool]]] = []
        self.lock = threading.Lock()
        self.fail = fail

    def __call__(self, group: Group) -> None:
        self.groups.append([(q.item, q.retry) for q in group])
        for queued in group:
            error = self.fail(queued)
            if isinstance(error, Exception):
                queued.error = error
            elif error is not None:
                raise error  # the whole group's write interrupted
            else:
                queued.result = f"{queued.item} written"


def submit_while_busy(
    queue: AppendQueue[str, str], writer: Writer, items: list[str], pool: ThreadPoolExecutor
) -> list[Future[str]]:
    """Submit ``items`` from threads while the writer is held busy; let it go once all wait."""
    with writer.lock:
        futures = [pool.submit(queue.submit, item) for item in items]
        wait_until(lambda: len(queue) == len(items), timeout_s=30, what="every append queued")
    return futures


def test_an_append_that_waits_for_no_one_is_written_alone_at_once() -> None:
    writer = Writer()
    queue = AppendQueue(writer, writer.lock)

    assert queue.submit("a") == "a written"
    assert queue.submit("b") == "b written"
    assert writer.groups == [[("a", False)], [("b", False)]]
    assert (len(queue), queue.groups, queue.appends) == (0, 2, 2)


def test_appends_that_wait_for_the_writer_are_written_together_each_with_its_own_result() -> None:
    writer = Writer()
    queue = AppendQueue(writer, writer.lock)
    items = [f"e{i}" for i in range(12)]

    with ThreadPoolExecutor(len(items)) as pool:
        futures = submit_while_busy(queue, writer, items, pool)
        results = [future.result(timeout=30) for future in futures]

    assert results == [f"{item} written" for item in items]
    assert len(writer.groups) == 1  # the first waited for the writer too: one group of all
    assert sorted(item for item, _ in writer.groups[0]) == sorted(items)
    assert (len(queue), queue.groups, queue.appends) == (0, 1, 12)


def test_a_group_holds_at_most_limit_appends() -> None:
    writer = Writer()
    queue = AppendQueue(writer, writer.lock, limit=4)
    items = [f"e{i}" for i in range(10)]

    with ThreadPoolExecutor(len(items)) as pool:
        futures = submit_while_busy(queue, writer, items, pool)
        results = [future.result(timeout=30) for future in futures]

    assert results == [f"{item} written" for item in items]
    assert [len(group) for group in writer.groups] == [4, 4, 2]
    assert sorted(item for group in writer.groups for item, _ in group) == sorted(items)


def test_an_append_s_error_is_raised_in_its_own_thread_only() -> None:
    writer = Writer(fail=lambda q: ValueError(f"{q.item} refused") if q.item == "bad" else None)
    queue = AppendQueue(writer, writer.lock)
    items = ["a", "bad", "c", "d"]

    with ThreadPoolExecutor(len(items)) as pool:
        futures = submit_while_busy(queue, writer, items, pool)
        done = dict(zip(items, futures, strict=True))
        outcomes = {item: future.exception(timeout=30) for item, future in done.items()}
        results = {item: future.result() for item, future in done.items() if item != "bad"}

    assert str(outcomes["bad"]) == "bad refused"
    assert results == {"a": "a written", "c": "c written", "d": "d written"}


def test_an_interrupted_leader_raises_and_the_others_are_written_next_checked_by_their_ids() -> (
    None
):
    interrupted: list[str] = []

    def fail(queued: Queued[str, str]) -> BaseException | None:
        if not interrupted:  # the first group's write is cut short, its outcome unknown
            interrupted.append(queued.item)
            return KeyboardInterrupt()
        return None

    writer = Writer(fail=fail)
    queue = AppendQueue(writer, writer.lock)
    items = [f"e{i}" for i in range(5)]

    with ThreadPoolExecutor(len(items)) as pool:
        futures = submit_while_busy(queue, writer, items, pool)
        outcomes = [future.exception(timeout=30) for future in futures]

    leader = interrupted[0]
    assert isinstance(outcomes[items.index(leader)], KeyboardInterrupt)
    rest = [item for item in items if item != leader]
    assert [futures[items.index(item)].result() for item in rest] == [
        f"{item} written" for item in rest
    ]
    first, second = writer.groups
    assert len(first) == len(items)
    assert sorted(second) == sorted((item, True) for item in rest)  # retry: may be stored
    assert len(queue) == 0


def test_a_group_limit_below_one_is_refused() -> None:
    with pytest.raises(ValueError, match="limit must be at least 1, got 0"):
        AppendQueue(Writer(), threading.Lock(), limit=0)
