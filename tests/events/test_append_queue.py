"""The group-commit queue on its own, no database: threads and a ``write`` that records groups.

The writer is held busy with its own lock (what a long append does to a real store), so the
appends that arrive meanwhile are known to be waiting when it is let go.
"""

from __future__ import annotations

import threading
import types
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor

import pytest

from tests.waiting import wait_until
from wgstore.events import append_queue
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


class _Interrupted(threading.Event):
    """The event of the ``n``-th waiter: its wait ends in a KeyboardInterrupt (``after`` the
    event was set, or at once), as Ctrl-C in that thread would."""

    created = 0

    def __init__(self, n: int, after: bool) -> None:
        super().__init__()
        type(self).created += 1
        self.interrupted = type(self).created == n
        self.after = after

    def wait(self, timeout: float | None = None) -> bool:
        if self.interrupted:
            if self.after:
                super().wait(timeout)
            raise KeyboardInterrupt
        return super().wait(timeout)


@pytest.mark.parametrize("where", ["waiting in the queue", "just handed the lead"])
def test_an_append_interrupted_while_it_waits_leaves_the_queue_and_no_one_waits_for_it(
    monkeypatch: pytest.MonkeyPatch, where: str
) -> None:
    after = where == "just handed the lead"
    _Interrupted.created = 0
    events = types.SimpleNamespace(
        Lock=threading.Lock, Event=lambda: _Interrupted(n=1, after=after)
    )
    monkeypatch.setattr(append_queue, "threading", events)
    writer = Writer()
    # a limit of 1 hands the lead on after each append: "b" is handed it, then interrupted
    queue = AppendQueue(writer, writer.lock, limit=1 if after else 64)

    with ThreadPoolExecutor(3) as pool, writer.lock:
        futures = {"a": pool.submit(queue.submit, "a")}
        wait_until(lambda: len(queue) == 1, timeout_s=30, what="a queued")
        futures["b"] = pool.submit(queue.submit, "b")  # the first to wait with an event
        if after:
            wait_until(lambda: len(queue) == 2, timeout_s=30, what="b queued")
        else:  # interrupted in the queue, before the writer is let go: out of it at once
            assert isinstance(futures["b"].exception(timeout=30), KeyboardInterrupt)
            assert len(queue) == 1
        futures["c"] = pool.submit(queue.submit, "c")
        wait_until(lambda: len(queue) == (3 if after else 2), timeout_s=30, what="c queued")
    assert isinstance(futures["b"].exception(timeout=30), KeyboardInterrupt)
    assert futures["a"].result(timeout=30) == "a written"
    assert futures["c"].result(timeout=30) == "c written"
    assert [item for group in writer.groups for item, _ in group] == ["a", "c"]
    assert len(queue) == 0
