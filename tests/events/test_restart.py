"""PostgreSQL connections that die (a server restart): the store carries on, nothing is lost.

Every store connection is killed with ``pg_terminate_backend`` from an admin connection, which is
what a restart does to a client. Only this test's connections are killed: they carry their own
``application_name``. The shared server itself is never restarted here (see
``test_private_server.py`` for a real stop and start of a server the test owns).
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import psycopg
import pytest

from tests.conftest import PG_URL
from wgstore.events import EventStore, NewEvent, RecordedEvent, event_type

ADMIN = PG_URL.replace("postgresql+psycopg://", "postgresql://")


@event_type("RestartProbe", version=1)
@dataclass(frozen=True)
class Probe:
    n: int


@pytest.fixture
def app_name() -> str:
    return f"wgrestart_{uuid.uuid4().hex[:10]}"


@pytest.fixture
def pg_store(pg_url: str, app_name: str) -> Iterator[EventStore]:
    store = EventStore.open(f"{pg_url}&application_name={app_name}")
    try:
        yield store
    finally:
        store.close()


def _backends(app_name: str) -> int:
    with psycopg.connect(ADMIN, autocommit=True) as admin:
        row = admin.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s", (app_name,)
        ).fetchone()
    return int(row[0]) if row else 0


def _kill_every_connection(app_name: str) -> int:
    """Terminate every backend of ``app_name``; wait until those are gone; return how many.

    Waits for the terminated pids, not for no backend at all: a follower that reconnects at once
    (as it should) would otherwise make the wait race its reconnects.
    """
    with psycopg.connect(ADMIN, autocommit=True) as admin:
        pids = [
            row[0]
            for row in admin.execute(
                "SELECT pid FROM (SELECT pid FROM pg_stat_activity WHERE application_name = %s "
                "AND pid <> pg_backend_pid() OFFSET 0) AS t WHERE pg_terminate_backend(pid)",
                (app_name,),
            )
        ]

        def gone() -> bool:
            row = admin.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE pid = ANY(%s)", (pids,)
            ).fetchone()
            return row is not None and row[0] == 0

        _wait_for(gone, "the terminated backends to go away")
    return len(pids)


def _wait_for(condition: Callable[[], bool], what: str, timeout_s: float = 20.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


def _fill_the_pool(store: EventStore, connections: int) -> None:
    """Check out several pooled connections at once, so the pool holds that many."""
    held = [store.engine.raw_connection() for _ in range(connections)]
    for connection in held:
        connection.close()


@contextlib.contextmanager
def _following(follow: Callable[[threading.Event], None]) -> Iterator[list[BaseException]]:
    """Run ``follow(stop)`` in a thread; yield the list that gets what it raises; on the way out
    set ``stop`` and check that the thread ended."""
    stop = threading.Event()
    failure: list[BaseException] = []

    def target() -> None:
        try:
            follow(stop)
        except BaseException as error:  # noqa: BLE001 - reported by the test
            failure.append(error)

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    try:
        yield failure
    finally:
        stop.set()
        thread.join(timeout=30)
    assert not thread.is_alive(), "the follower did not stop"


@pytest.fixture
def no_reset_errors(caplog: pytest.LogCaptureFixture) -> Iterator[None]:
    caplog.set_level(logging.WARNING)
    yield
    # Every phase's records: ``caplog.records`` here would be the teardown's alone. A
    # subscription's own outage notes (it rides out the kills, and says so) are expected.
    records = [r for phase in ("setup", "call") for r in caplog.get_records(phase)]
    everything = [*records, *caplog.records]
    problems = [
        r
        for r in everything
        if r.levelno >= logging.WARNING and r.name != "wgstore.events.subscriptions"
    ]
    assert not problems, [f"{r.name}: {r.getMessage()}" for r in problems]
    assert not any("Exception during reset" in r.getMessage() for r in everything)


@pytest.mark.usefixtures("no_reset_errors")
def test_appends_and_reads_carry_on_after_every_connection_is_killed(
    pg_store: EventStore, app_name: str, capfd: pytest.CaptureFixture[str]
) -> None:
    pg_store.append("s-1", [Probe(n=0)])
    _fill_the_pool(pg_store, 6)
    assert [r.event.n for r in pg_store.read_stream("s-1")] == [0]
    assert _kill_every_connection(app_name) >= 6

    pg_store.append("s-1", [Probe(n=1)], expected_version=1)
    assert [r.event.n for r in pg_store.read_stream("s-1")] == [0, 1]
    assert pg_store.head() == 2 and pg_store.stream_version("s-1") == 2
    assert "Traceback" not in capfd.readouterr().err


@pytest.mark.usefixtures("no_reset_errors")
@pytest.mark.parametrize("first", ["append", "read"])
def test_the_writer_and_the_readers_each_come_back_on_their_own(
    pg_store: EventStore, app_name: str, first: str
) -> None:
    """The writer connection (held by the store) and the pooled readers die; either goes first."""
    for n in range(10):
        _fill_the_pool(pg_store, 3)
        _kill_every_connection(app_name)
        if first == "append":
            pg_store.append("s-1", [Probe(n=n)], expected_version=n)
            assert pg_store.stream_version("s-1") == n + 1
        else:
            assert pg_store.stream_version("s-1") == n
            pg_store.append("s-1", [Probe(n=n)], expected_version=n)
    assert [r.event.n for r in pg_store.read_stream("s-1")] == list(range(10))
    assert [r.version for r in pg_store.read_all()] == list(range(1, 11))
    assert pg_store.verify().ok


@pytest.mark.usefixtures("no_reset_errors")
def test_a_retried_batch_with_fixed_ids_is_stored_once(pg_store: EventStore, app_name: str) -> None:
    ids = [uuid.uuid4() for _ in range(3)]
    batch = [NewEvent(Probe(n=n), event_id=ids[n]) for n in range(3)]
    first = pg_store.append("s-1", batch)
    _kill_every_connection(app_name)
    again = pg_store.append("s-1", batch)  # a client retry after a lost reply
    assert [r.position for r in again] == [r.position for r in first]
    assert [r.event_id for r in pg_store.read_all()] == ids


@pytest.mark.usefixtures("no_reset_errors")
def test_a_subscription_follows_the_log_across_killed_connections(
    pg_store: EventStore, app_name: str, pg_url: str
) -> None:
    seen: list[int] = []
    lock = threading.Lock()

    def handle(batch: list[RecordedEvent]) -> None:
        with lock:
            seen.extend(r.event.n for r in batch)

    def follow(stop: threading.Event) -> None:
        pg_store.subscription("follower").run(handle, stop=stop, wait_s=0.2)

    # (the writer is another client: its connections live on)
    with _following(follow) as failure, EventStore.open(pg_url) as writer:
        for n in range(5):
            writer.append("s-1", [Probe(n=n)])
            _wait_for(lambda n=n: n in seen or bool(failure), f"event {n} to be followed")
            assert not failure, failure
            _wait_for(lambda: _backends(app_name) > 0, "the follower to reconnect")
            _kill_every_connection(app_name)  # the follower, its LISTEN connection, all
    assert not failure, failure
    assert seen == list(range(5))
    assert pg_store.subscription("follower").checkpoint() == 5


@pytest.mark.usefixtures("no_reset_errors")
def test_a_transactional_subscription_killed_mid_batch_applies_the_batch_once(
    pg_store: EventStore, app_name: str, caplog: pytest.LogCaptureFixture
) -> None:
    """The connection of the handler's transaction dies while it handles a batch: ``run`` rides
    out the outage, hands the batch over again, and its writes and the checkpoint land once."""
    import sqlalchemy as sa

    pg_store.append("s-1", [Probe(n=n) for n in range(3)])
    with pg_store.engine.begin() as connection:
        connection.exec_driver_sql("CREATE TABLE applied (n integer PRIMARY KEY)")
    handed: list[list[int]] = []
    in_handler = threading.Event()
    killed = threading.Event()

    def handle(connection: sa.Connection, batch: list[RecordedEvent]) -> None:
        handed.append([r.event.n for r in batch])
        for record in batch:
            connection.execute(sa.text("INSERT INTO applied VALUES (:n)"), {"n": record.event.n})
        if len(handed) == 1:  # the first time: its connection dies before it commits
            in_handler.set()
            killed.wait(60)

    def follow(stop: threading.Event) -> None:
        pg_store.subscription("applier").run(handle, stop=stop, transactional=True, wait_s=0.2)

    logs = caplog.at_level(logging.WARNING, logger="wgstore.events.subscriptions")
    with logs, _following(follow) as failure:
        try:
            _wait_for(in_handler.is_set, "the first batch to reach the handler")
            assert _kill_every_connection(app_name) >= 1
            killed.set()
            _wait_for(lambda: len(handed) >= 2 or bool(failure), "the batch to be handed again")
            _wait_for(
                lambda: pg_store.subscription("applier").checkpoint() == 3,
                "the checkpoint to reach the head",
            )
        finally:
            killed.set()
    assert not failure, failure
    assert handed[:2] == [[0, 1, 2], [0, 1, 2]]
    with pg_store.engine.connect() as connection:
        applied = connection.exec_driver_sql("SELECT n FROM applied ORDER BY n").scalars().all()
    assert applied == [0, 1, 2]  # once: the first try's inserts died with its transaction
    messages = [r.getMessage() for r in caplog.records]
    assert any("'applier': the database went away" in m for m in messages), messages
    assert any("'applier': the database answers again" in m for m in messages), messages


@pytest.mark.usefixtures("no_reset_errors")
def test_the_read_models_follower_rides_out_a_connection_killed_mid_batch(
    pg_store: EventStore, app_name: str, caplog: pytest.LogCaptureFixture, monkeypatch: Any
) -> None:
    """``follow_read_models`` ended when the connection of its batch's transaction died (it had
    no outage handling of its own, unlike ``Subscription.run``). It now rides the outage out,
    applies the batch again, and every group reaches the read models once."""
    from tests.orchestration.test_executor import _context
    from wgstore.events.streams import group_stream
    from wgstore.events.worker_group import WorkerGroupStartRequested
    from wgstore.projections import follow_read_models, projector

    for n in range(3):
        request = WorkerGroupStartRequested(
            group_id=f"g{n}", run_id="r1", attempt=1, context=_context()
        )
        pg_store.append(group_stream(f"g{n}"), [request])
    real_write = projector.write_read_model_batch
    applied: list[int] = []
    in_batch = threading.Event()
    killed = threading.Event()

    def write_after_the_kill(*args: Any) -> None:  # the real batch, its connection killed first
        applied.append(len(args[-1].events))
        if len(applied) == 1:
            in_batch.set()
            killed.wait(60)
        real_write(*args)

    monkeypatch.setattr(projector, "write_read_model_batch", write_after_the_kill)

    def groups() -> list[str]:
        with pg_store.engine.connect() as connection:
            rows = connection.exec_driver_sql("SELECT group_id FROM wg_worker_groups")
            return sorted(row[0] for row in rows)

    logs = caplog.at_level(logging.WARNING, logger="wgstore.events.subscriptions")
    with logs, _following(lambda stop: follow_read_models(pg_store, stop, wait_s=0.2)) as failure:
        try:
            _wait_for(in_batch.is_set, "the first batch to be applied")
            assert _kill_every_connection(app_name) >= 1
            killed.set()
            _wait_for(lambda: groups() == ["g0", "g1", "g2"] or bool(failure), "the groups")
        finally:
            killed.set()
    assert not failure, failure
    assert applied[:2] == [3, 3]  # the batch again, after its transaction died
    messages = [r.getMessage() for r in caplog.records]
    assert any("the read models: the database went away" in m for m in messages), messages
    assert any("the read models: the database answers again" in m for m in messages), messages


def test_the_pause_between_tries_grows_to_its_cap_and_stays_there() -> None:
    """A follower tries again every ``retry_wait_s(tries)`` while the database is away: a
    backoff that stops at MAX_RETRY_WAIT_S however many tries an outage takes (it computed
    ``0.1 * 2**tries`` as a float, which overflows after about 1,000 tries: 80 minutes)."""
    from wgstore.events.subscriptions import MAX_RETRY_WAIT_S, retry_wait_s

    assert [retry_wait_s(n) for n in (1, 2, 3)] == [0.2, 0.4, 0.8]
    assert retry_wait_s(6) == MAX_RETRY_WAIT_S == retry_wait_s(1_100) == retry_wait_s(10**6)
