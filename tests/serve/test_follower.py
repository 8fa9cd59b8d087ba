"""The follower of ``wgstore serve`` on its own (no HTTP): its counters stay exact while a burst
of appends goes out as fewer messages than appends, an append after a quiet spell is sent at
once, it stops at once while it waits out its interval between messages, and each subscriber is
sent what concerns its interest and, else, the head at most once an interval."""

from __future__ import annotations

import asyncio
import json
import time
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest
import sqlalchemy as sa
from serve_scenarios import live_run, new_run, next_attempt, ray_train_run, report

from tests.waiting import wait_until
from wgstore.events import EventStore
from wgstore.events.schema import wg_events
from wgstore.events.streams import group_stream
from wgstore.events.worker_group import WorkerReported
from wgstore.serve.follower import Follower, Message
from wgstore.serve.interest import Interest

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


async def _until_head(queue: asyncio.Queue[Message], head: int) -> list[Message]:
    """Every message of a page's queue until one carries ``head`` (or later)."""
    messages: list[Message] = []
    while not messages or int(messages[-1].get("head", 0)) < head:
        messages.append(await asyncio.wait_for(queue.get(), timeout=60))
    return messages


def test_each_subscriber_is_sent_what_concerns_it_and_the_others_only_the_head(
    writer: EventStore, reader: EventStore
) -> None:
    live_group = live_run(writer, "run-mine1")
    other_group = live_run(writer, "run-other1")
    recorded = ray_train_run(writer, "run-ray1")
    follower = Follower(reader, wait_s=0.5)
    interests = {
        "group": Interest.of([f"group:{live_group}"]),
        "other": Interest.of([f"group:{other_group}"]),
        "run": Interest.of(["run:run-ray1", "group:run-ray1-g1"]),
        "all": Interest.of(["all"]),
    }

    async def follow() -> tuple[dict[str, list[Message]], int, int]:
        queues = {name: follower.subscribe(interest) for name, interest in interests.items()}
        await _started(follower, writer.head())
        start = writer.head()
        report(writer, live_group, 0, 3, loss=0.25)
        await asyncio.to_thread(next_attempt, writer, recorded, "ray_train")
        end = writer.head()
        got = {name: await _until_head(queue, end) for name, queue in queues.items()}
        return got, start, end

    try:
        got, start, end = asyncio.run(follow())
    finally:
        _stopped(follower)

    def listed(name: str) -> list[dict[str, Any]]:
        return [e for m in got[name] if m["kind"] == "append" for e in m["events"]]

    assert got["all"][0]["kind"] == "status"  # each subscriber's first message
    assert [e["position"] for e in listed("all")] == list(range(start + 1, end + 1))
    assert {e["stream_id"] for e in listed("group")} == {group_stream(live_group)}
    # the run's page: its run stream, its group, and the new attempt's request (it names the
    # run); not the new group's other events (the page watches that group once it has seen it)
    assert {(e["stream_id"], e["type"]) for e in listed("run")} == {
        ("run-run-ray1", "ControllerStateChanged"),
        ("worker-group-run-ray1-g2", "WorkerGroupStartRequested"),
    }
    (request,) = [e for e in listed("run") if e["type"] == "WorkerGroupStartRequested"]
    assert request["run_id"] == "run-ray1"
    # a page no append concerned: no append message, the head in head messages
    assert {m["kind"] for m in got["other"]} == {"status", "head"}
    assert got["other"][-1] == {"kind": "head", "head": end}


def test_a_page_no_append_concerns_gets_the_head_at_most_once_an_interval(
    writer: EventStore, reader: EventStore
) -> None:
    live_group = live_run(writer, "run-busy1")
    quiet_group = live_run(writer, "run-quiet2")
    follower = Follower(reader, wait_s=0.5, message_interval_s=0, head_interval_s=0.5)

    async def follow() -> tuple[list[Message], list[Message], float]:
        quiet = follower.subscribe(Interest.of([f"group:{quiet_group}"]))
        busy = follower.subscribe(Interest.of([f"group:{live_group}"]))
        await _started(follower, writer.head())
        started = time.monotonic()
        await asyncio.to_thread(_burst, writer, live_group)
        end = writer.head()
        quiet_messages = await _until_head(quiet, end)
        # the heads went out from the burst's start until the quiet page had the last one (on
        # a loaded machine the follower may send that one well after the burst ended)
        window = time.monotonic() - started
        return quiet_messages, await _until_head(busy, end), window

    try:
        quiet, busy, window = asyncio.run(follow())
    finally:
        _stopped(follower)
    assert {m["kind"] for m in quiet} == {"status", "head"}
    heads = [m for m in quiet if m["kind"] == "head"]
    assert 1 <= len(heads) <= window / 0.5 + 2
    # the busy page's own events: every report of the burst, no new run of it (other streams)
    reports = [e for m in busy if m["kind"] == "append" for e in m["events"]]
    assert len(reports) == sum(1 for i in range(BURST) if i % 10 != 9)
    assert {e["stream_id"] for e in reports} == {group_stream(live_group)}


def test_a_scrape_before_the_follower_first_read_counts_the_log_itself(
    writer: EventStore, reader: EventStore
) -> None:
    """/metrics right after the server starts (the follower thread not yet primed) reports
    the log's counters, not empty ones a Prometheus would take for a reset."""
    from prometheus_client import CollectorRegistry
    from prometheus_client.exposition import generate_latest
    from prometheus_client.parser import text_string_to_metric_families

    from wgstore.serve.metrics import StoreCollector

    group_id = live_run(writer, "run-early1")
    writer.append(
        group_stream(group_id),
        [WorkerReported(world_rank=0, index=9, metrics={}, checkpoint="/ckpt/early")],
    )
    follower = Follower(reader)  # never started: not primed
    assert not follower.primed
    registry = CollectorRegistry()
    registry.register(StoreCollector(reader, follower))
    samples = {
        (sample.name, tuple(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(generate_latest(registry).decode())
        for sample in family.samples
    }
    counts, checkpoints = _log_counts(writer)
    assert counts["WorkerReported"] == 2 * 2 + 1  # live_run reports twice from two ranks
    for event_type, count in counts.items():
        assert samples[("wgstore_events_appended_total", (("type", event_type),))] == count
    assert samples[("wgstore_checkpoints_reported_total", ())] == checkpoints == 1
