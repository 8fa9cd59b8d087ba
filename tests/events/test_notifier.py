"""Postgres: the notifier's LISTEN thread wakes this process for other processes' appends, and
closing the store ends it and gives back everything it held (its connection, its thread, the
pipe that tells it to stop) without waiting for a timeout."""

from __future__ import annotations

import functools
import os
import threading
from dataclasses import dataclass

from tests.waiting import wait_until
from wgstore.events import EventStore, event_type


@event_type("NotifierNoted", version=1)
@dataclass(frozen=True, slots=True, kw_only=True)
class Noted:
    text: str


def _listeners() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "wgstore-listen"]


def _open_files() -> set[str]:
    """What this process's descriptors point at (``pipe:[inode]``, ``socket:[inode]``, paths)."""
    links = set()
    for name in os.listdir("/proc/self/fd"):
        try:
            links.add(os.readlink(f"/proc/self/fd/{name}"))
        except FileNotFoundError:
            continue  # closed while listed (the listing's own descriptor, say)
    return links


def test_another_writers_append_wakes_a_waiter_and_close_gives_everything_back(
    pg_url: str,
) -> None:
    listeners_before = set(_listeners())
    store = EventStore.open(pg_url)
    other = EventStore.open(pg_url)
    notifier = store.notifier
    try:
        started = notifier.generation
        notifier.ensure_listening()
        # The listener moves the generation once its LISTEN is in place.
        wait_until(lambda: notifier.generation > started, timeout_s=60, what="the LISTEN")
        (listener,) = set(_listeners()) - listeners_before
        pipe = notifier._close_pipe
        assert pipe is not None
        pipe_files = {os.readlink(f"/proc/self/fd/{fd}") for fd in pipe}
        generation = notifier.generation
        other.append("noted-1", [Noted(text="from another process, as it were")])
        # Only a NOTIFY can move it now: `store` itself appends nothing (and the channel is
        # this schema's: other tests' appends elsewhere in the database do not reach it).
        assert notifier.wait_for_wake(generation, timeout_s=60) > generation
    finally:
        other.close()
        store.close()
    # Ended by close(), not by a timeout of its wait: the thread is gone as close() returns,
    # its connection closed by its own `with`, and the stop pipe closed.
    assert not listener.is_alive()
    assert not pipe_files & _open_files()
    assert notifier._close_pipe is None


def test_appends_in_another_schema_of_the_database_do_not_wake_this_store(
    pg_url: str, pg_url_2: str
) -> None:
    """Each schema's appends notify a channel of its own (migration 0014): a store's listener
    is not woken by another store's appends in the same database, as it was on the one
    ``wg_events`` channel every store shared before (each woke, and read, on every append)."""
    import psycopg

    from wgstore.events.postgres_functions import NOTIFY_CHANNEL_SQL

    with EventStore.open(pg_url_2) as elsewhere, EventStore.open(pg_url) as here:
        # the connection the notifier's listener makes (its URL's options: this schema first)
        args, kwargs = here.engine.dialect.create_connect_args(here.engine.url)
        connect = functools.partial(psycopg.connect, *args, **kwargs, autocommit=True)
        with connect() as listener:
            row = listener.execute(f"SELECT {NOTIFY_CHANNEL_SQL}").fetchone()
            assert row is not None
            ours = row[0]
            # wg_events: the channel every store of a database notified until 0014
            for channel in (ours, "wg_events", "wgtest_done"):
                listener.execute(f'LISTEN "{channel}"')
            for k in range(5):
                elsewhere.append(f"elsewhere-{k}", [Noted(text="another store's append")])
            here.append("here", [Noted(text="this store's append")])
            with connect() as last:
                last.execute("NOTIFY wgtest_done")
            # Postgres delivers notifications in commit order: whatever the six appends
            # notified on a channel listened to here came before the last one.
            heard = []
            for notify in listener.notifies(timeout=60):
                heard.append(notify.channel)
                if notify.channel == "wgtest_done":
                    break
    assert heard == [ours, "wgtest_done"]


def test_a_store_closed_before_it_listened_starts_no_listener(pg_url: str) -> None:
    store = EventStore.open(pg_url)
    notifier = store.notifier  # held, as a thread that was waiting on it holds it
    store.close()
    before = set(_listeners())
    notifier.ensure_listening()
    assert set(_listeners()) == before
