"""A real PostgreSQL stop and start, on a private server this module starts for itself
(bench/private_postgres.py: a temporary folder, a free port, removed afterwards). The shared
server on 5432 is never touched. Skipped where there is no PostgreSQL installation to start or
no root to switch users.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TypeVar

import pytest

from bench.private_postgres import PrivateServer, private_server, unavailable
from wgstore.events import EventStore, NewEvent, StoreUnavailableError, event_type

T = TypeVar("T")


@event_type("PrivateServerProbe", version=1)
@dataclass(frozen=True)
class Probe:
    n: int


@pytest.fixture(scope="module")
def server() -> Iterator[PrivateServer]:
    problem = unavailable()
    if problem is not None:
        pytest.skip(problem)
    with private_server({"fsync": "off"}) as private:
        yield private


@pytest.fixture
def quiet_logs(caplog: pytest.LogCaptureFixture) -> Iterator[None]:
    caplog.set_level(logging.WARNING)
    yield
    noisy = [f"{r.name}: {r.getMessage()}" for r in caplog.records if r.levelno >= logging.WARNING]
    assert not noisy, noisy


@pytest.fixture
def fresh_store(server: PrivateServer) -> Iterator[EventStore]:
    schema = f"wg_{uuid.uuid4().hex[:10]}"
    import psycopg

    with psycopg.connect(server.conninfo) as admin:
        admin.execute(f"CREATE SCHEMA {schema}")
    store = EventStore.open(f"{server.url}&options=-csearch_path%3D{schema}")
    try:
        yield store
    finally:
        store.close()


@pytest.mark.usefixtures("quiet_logs")
def test_a_server_that_stays_down_is_one_clear_error_and_a_restart_needs_nothing(
    server: PrivateServer, fresh_store: EventStore
) -> None:
    store = fresh_store
    store.append("s-1", [Probe(n=0)])
    held = [store.engine.raw_connection() for _ in range(5)]  # a pool of live connections
    for connection in held:
        connection.close()
    assert store.stream_version("s-1") == 1

    server.stop()
    try:
        with pytest.raises(StoreUnavailableError, match="cannot reach the database") as raised:
            store.append("s-1", [Probe(n=1)], expected_version=1)
        assert "\n" not in str(raised.value)
        with pytest.raises(StoreUnavailableError, match="cannot reach the database"):
            store.stream_version("s-1")
    finally:
        server.start()

    store.append("s-1", [Probe(n=1)], expected_version=1)  # first try, no retry by the caller
    assert [r.event.n for r in store.read_stream("s-1")] == [0, 1]
    assert store.verify().ok


@pytest.mark.usefixtures("quiet_logs")
def test_appends_and_reads_across_two_restarts_lose_nothing_and_duplicate_nothing(
    server: PrivateServer, fresh_store: EventStore
) -> None:
    """A writer appends and reads back in a loop (retrying a refused batch unchanged).

    The server restarts twice: once while the writer pauses between appends (every pooled
    connection is dead when it resumes: its next calls must simply work), once in the middle of
    the traffic (calls fail while it is down, and work again as soon as it is back).

    A refusal counts against the store only if the server was up from the call's start to its
    end: a call in flight when a stop begins may fail with the server, and under load the
    writer's thread can be held between starting a call and its round trip for as long as the
    whole stop takes (issue 41, item 17: it was counted then, as refused while up).
    """
    store = fresh_store
    ids: list[uuid.UUID] = []
    refused_while_up = 0
    moves = 0  # the server's stops and starts so far: even while it is up
    pause, paused, resume = threading.Event(), threading.Event(), threading.Event()
    stop = threading.Event()
    failure: list[BaseException] = []

    def retried(call: Callable[[], T]) -> T:
        nonlocal refused_while_up
        while True:  # a caller's retry: the same call, the same event ids
            before = moves
            try:
                return call()
            except StoreUnavailableError:
                refused_while_up += before % 2 == 0 and moves == before  # up all along
                time.sleep(0.05)

    def restart() -> None:
        nonlocal moves
        moves += 1  # before the stop begins: a call in flight from now on may fail
        server.stop()
        server.start()  # returns once the server accepts connections (pg_ctl -w)
        moves += 1

    def write() -> None:
        try:
            n = 0
            while not stop.is_set():
                if pause.is_set():
                    paused.set()
                    resume.wait()
                    pause.clear()
                batch = [NewEvent(Probe(n=n), event_id=uuid.uuid4())]
                retried(lambda batch=batch: store.append("s-1", batch))
                ids.append(batch[0].event_id)
                reads = retried(
                    lambda n=n: [r.event.n for r in store.read_stream("s-1", from_version=n + 1)]
                )
                assert reads == [n], reads
                n += 1
        except BaseException as error:  # noqa: BLE001 - reported below
            failure.append(error)

    def wait_for_events(count: int) -> None:
        deadline = time.monotonic() + 60
        while len(ids) < count:
            assert time.monotonic() < deadline and not failure, failure
            time.sleep(0.01)

    writer = threading.Thread(target=write, daemon=True)
    writer.start()
    wait_for_events(20)
    pause.set()
    assert paused.wait(timeout=60), failure
    held = [store.engine.raw_connection() for _ in range(4)]  # idle pooled connections too
    for connection in held:
        connection.close()
    restart()
    resume.set()
    wait_for_events(40)

    restart()
    wait_for_events(len(ids) + 20)
    stop.set()
    writer.join(timeout=60)
    assert not writer.is_alive() and not failure, failure
    assert refused_while_up == 0  # a call made while the server was up worked at once

    stored = list(store.read_all())
    assert [r.event_id for r in stored] == ids  # nothing lost, nothing twice, in order
    assert [r.version for r in stored] == list(range(1, len(ids) + 1))
    assert [r.event.n for r in stored] == list(range(len(ids)))
    assert store.verify().ok
