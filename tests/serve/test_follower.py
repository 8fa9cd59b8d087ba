"""The follower of ``wgstore serve`` on its own (no HTTP): its counters stay exact while a burst
of appends goes out as fewer messages than appends, an append after a quiet spell is sent at
once, and it stops at once while it waits out its interval between messages."""

from __future__ import annotations

import asyncio
import json
import time
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest
import sqlalchemy as sa
from serve_scenarios import live_run, new_run, report

from tests.waiting import wait_until
from wgstore.events import EventStore
from wgstore.events.schema import wg_events
from wgstore.events.streams import group_stream
from wgstore.events.worker_group import WorkerReported
from wgstore.serve.follower import Follower, Message

BURST = 50  # under the subscriber queue's 64: a follower sending one message each loses none


@pytest.fixture
def reader(store_url: str) -> Iterator[EventStore]:
    """The store opened as the server opens it (read-only)."""
    store = EventStore.open(store_url, read_only=True, migrate=False)
    try:
        yield store
    finally:
        store.close()


def _log_counts(store: EventStore) -> tuple[Counter[str], int]:
    """The appends per type and the reports with a checkpoint, from the whole log."""
    with store.engine.connect() as connection:
        counts = Counter(
            {
                event_type: int(count)
                for event_type, count in connection.execute(
                    sa.select(wg_events.c.event_type, sa.func.count()).group_by(
                        wg_events.c.event_type
                    )
                )
            }
        )
    checkpoints = sum(
        1
        for record in store.read_all(types=["WorkerReported"])
        if getattr(record.event, "checkpoint", None) is not None
    )
    return counts, checkpoints


def _burst(writer: EventStore, group_id: str) -> None:
    """``BURST`` single appends as fast as they go: reports (every third with a checkpoint)
    and, every tenth, a new run (events of other types)."""
    for i in range(BURST):
        if i % 10 == 9:
            new_run(writer, f"run-burst-new{i}", "new")
            continue
        checkpoint = f"/ckpt/{i}" if i % 3 == 0 else None
        writer.append(
            group_stream(group_id),
            [WorkerReported(world_rank=i % 2, index=100 + i, metrics={}, checkpoint=checkpoint)],
        )


def _stopped(follower: Follower) -> None:
    follower.stop()
    assert follower._thread is not None
    assert not follower._thread.is_alive(), "the follower did not stop"


async def _started(follower: Follower, head: int) -> None:
    """Start ``follower`` and wait until it has primed itself at the log's ``head``."""
    follower.start()
    await asyncio.to_thread(
        wait_until, lambda: follower.head == head, timeout_s=60, what="the follower primed"
    )


async def _next_append(queue: asyncio.Queue[Message]) -> Message:
    """The next ``append`` message of a page's queue (status messages skipped)."""
    while True:
        message = await asyncio.wait_for(queue.get(), timeout=60)
        if message["kind"] == "append":
            return message


def test_a_burst_is_counted_exactly_and_sent_as_fewer_messages_than_appends(
    writer: EventStore, reader: EventStore
) -> None:
    group_id = live_run(writer, "run-burst1")
    writer.append(
        group_stream(group_id),
        [WorkerReported(world_rank=0, index=50, metrics={}, checkpoint="/ckpt/start")],
    )
    start = writer.head()
    follower = Follower(reader, wait_s=0.5, message_interval_s=0.5)

    async def follow() -> tuple[list[dict[str, Any]], int, float]:
        queue = follower.subscribe()
        await _started(follower, start)
        assert (follower.type_counts, follower.checkpoints) == _log_counts(writer)
        started = time.monotonic()
        await asyncio.to_thread(_burst, writer, group_id)
        took = time.monotonic() - started
        end = writer.head()
        messages: list[dict[str, Any]] = []
        while not messages or messages[-1]["head"] < end:
            messages.append(await _next_append(queue))
        return messages, end, took

    try:
        messages, end, took = asyncio.run(follow())
    finally:
        _stopped(follower)
    appended = end - start
    assert appended >= BURST
    # every event listed once, in order, none left out (each message lists up to 200)
    listed = [event["position"] for message in messages for event in message["events"]]
    assert listed == list(range(start + 1, end + 1))
    assert all(message["more"] == 0 for message in messages)
    assert 1 <= len(messages) < appended
    # messages 0.5 s apart at least: one at once, then one per interval until the burst ended
    assert len(messages) <= took / 0.5 + 2
    assert follower.head == end
    counts, checkpoints = _log_counts(writer)
    assert checkpoints == 1 + sum(1 for i in range(BURST) if i % 10 != 9 and i % 3 == 0)
    assert (follower.type_counts, follower.checkpoints) == (counts, checkpoints)
    # and a follower that starts now (one GROUP BY) agrees with the one that counted the burst
    fresh = Follower(reader)
    fresh._prime()
    assert (fresh.type_counts, fresh.checkpoints, fresh.head) == (counts, checkpoints, end)


def test_an_append_after_a_quiet_spell_is_sent_at_once_and_stop_is_prompt(
    writer: EventStore, reader: EventStore
) -> None:
    group_id = live_run(writer, "run-quiet1")
    follower = Follower(reader, wait_s=0.5, message_interval_s=600)

    async def follow() -> list[dict[str, Any]]:
        queue = follower.subscribe()
        await _started(follower, writer.head())
        report(writer, group_id, 0, 7, loss=0.5)
        # well within the 600 s interval: the first message is not held back
        return [await _next_append(queue)]

    (message,) = asyncio.run(follow())
    assert [event["type"] for event in message["events"]] == ["WorkerReported"]
    # the follower now waits out its 600 s interval; stop ends that wait
    started = time.monotonic()
    _stopped(follower)
    assert time.monotonic() - started < 5


def test_every_page_gets_the_same_message_encoded_once(
    writer: EventStore, reader: EventStore
) -> None:
    group_id = live_run(writer, "run-shared1")
    follower = Follower(reader, wait_s=0.5)

    async def follow() -> tuple[Message, Message]:
        pages = [follower.subscribe(), follower.subscribe()]
        await _started(follower, writer.head())
        report(writer, group_id, 0, 3, loss=0.25)
        return await _next_append(pages[0]), await _next_append(pages[1])

    try:
        first, second = asyncio.run(follow())
    finally:
        _stopped(follower)
    assert first is second  # one object for both pages, so one encoding
    assert json.loads(first.json) == dict(first)
    assert [event["type"] for event in first["events"]] == ["WorkerReported"]
