"""``store.watch_streams``: a waiter is woken for its own streams only, and never misses an event.

On both backends, with the events appended through another store object (another process's
writes: on Postgres they arrive by NOTIFY, on SQLite by the follower's polling), so nothing but
the follower can wake the watch.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from tests.waiting import wait_until
from wgstore.events import EventStore, event_type


@event_type("StreamWatchNoted", version=1)
@dataclass(frozen=True, slots=True, kw_only=True)
class Noted:
    text: str


@event_type("StreamWatchQuiet", version=1)
@dataclass(frozen=True, slots=True, kw_only=True)
class Quiet:
    text: str


def _followers() -> set[threading.Thread]:
    return {t for t in threading.enumerate() if t.name == "wgstore-streams"}


@pytest.fixture
def other(store_url: str) -> Iterator[EventStore]:
    """Another store object on the same database: its appends reach ``store`` as another
    process's would."""
    writer = EventStore.open(store_url)
    try:
        yield writer
    finally:
        writer.close()


def _caught_up(store: EventStore, watch_position: object) -> None:
    """Wait until the follower has handed over everything in the log."""
    head = store.head()
    wait_until(
        lambda: watch_position() >= head,  # type: ignore[operator]
        timeout_s=60,
        what=f"the follower to pass position {head}",
    )


def test_an_event_landing_between_the_read_and_the_wait_wakes_the_waiter(
    store: EventStore, other: EventStore
) -> None:
    other.append("s-1", [Noted(text="before")])
    with store.watch_streams(["s-1"]) as watch:
        token = watch.position()  # 1. the token, then 2. the read
        assert [r.event.text for r in store.read_stream("s-1")] == ["before"]
        other.append("s-1", [Noted(text="between")])  # lands after the read, before the wait
        started = time.monotonic()
        assert watch.wait(token, timeout_s=120)  # 3. returns for it, not at the timeout
        assert time.monotonic() - started < 60


def test_a_waiter_blocked_in_wait_is_woken_by_an_append_to_its_stream(
    store: EventStore, other: EventStore
) -> None:
    with store.watch_streams(["s-1"]) as watch:
        token = watch.position()
        woke: list[bool] = []
        waiter = threading.Thread(target=lambda: woke.append(watch.wait(token, timeout_s=120)))
        waiter.start()
        other.append("s-1", [Noted(text="a")])
        waiter.join(timeout=90)
        assert not waiter.is_alive() and woke == [True]


def test_other_streams_and_ignored_types_do_not_wake_it(
    store: EventStore, other: EventStore
) -> None:
    with store.watch_streams(["s-1"], ignore_types=["StreamWatchQuiet"]) as watch:
        token = watch.position()
        other.append("s-2", [Noted(text="another stream")])
        other.append("s-1", [Quiet(text="a report, say")])
        _caught_up(store, watch.position)  # the follower saw both and woke no one
        assert not watch.moved_after(token)
        assert not watch.wait(token, timeout_s=0)
        other.append("s-1", [Noted(text="this one")])
        assert watch.wait(token, timeout_s=120)


def test_a_stream_added_after_the_token_wakes_at_once_then_only_for_new_events(
    store: EventStore, other: EventStore
) -> None:
    with store.watch_streams(["s-1"]) as watch:
        token = watch.position()
        other.append("s-3", [Noted(text="went by before the watch knew s-3")])
        _caught_up(store, watch.position)
        watch.add("s-3")
        assert watch.streams == {"s-1", "s-3"}
        assert watch.moved_after(token)  # it may have moved: the waiter re-reads
        fresh = watch.position()
        assert not watch.moved_after(fresh)
        other.append("s-3", [Noted(text="new")])
        assert watch.wait(fresh, timeout_s=120)


def test_many_watches_each_woken_by_its_own_stream_only(
    store: EventStore, other: EventStore
) -> None:
    watches = [store.watch_streams([f"job-{k}"]) for k in range(20)]
    try:
        tokens = [w.position() for w in watches]
        for k in range(0, 20, 2):
            other.append(f"job-{k}", [Noted(text=str(k))])
        _caught_up(store, watches[0].position)
        moved = [w.moved_after(t) for w, t in zip(watches, tokens, strict=True)]
        assert moved == [k % 2 == 0 for k in range(20)]
    finally:
        for watch in watches:
            watch.close()


def test_closing_the_watch_or_the_store_ends_the_wait_and_the_follower(
    store: EventStore,
) -> None:
    before = _followers()
    watch = store.watch_streams(["s-1"])
    token = watch.position()
    ended: list[bool] = []
    waiter = threading.Thread(target=lambda: ended.append(watch.wait(token, timeout_s=120)))
    waiter.start()
    watch.close()
    waiter.join(timeout=90)
    assert ended == [False]
    wait_until(lambda: _followers() <= before, timeout_s=60, what="the idle follower to stop")

    again = store.watch_streams(["s-1"])  # a new watch starts it again
    fresh = again.position()
    waiter = threading.Thread(target=lambda: ended.append(again.wait(fresh, timeout_s=120)))
    waiter.start()
    store.close()
    waiter.join(timeout=90)
    assert ended == [False, False] and again.closed
    wait_until(lambda: _followers() <= before, timeout_s=60, what="the follower to stop")
