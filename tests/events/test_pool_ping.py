"""The Postgres pool pings a connection at checkout only when it may have died: idle in the pool
past ``PING_AFTER_IDLE_S``, or its socket has something to read (the server ended the session,
or the connection was cut). A connection used a moment ago is handed out without a round trip;
a dead one is still replaced before anyone uses it, with every pooled connection made before it.

Whether a checkout pinged is read from the server: the backend's ``query_start`` in
``pg_stat_activity`` moves only when a statement reaches it.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import datetime

import psycopg
import pytest
import sqlalchemy as sa

from tests.conftest import PG_URL
from tests.relay import Relay
from tests.waiting import wait_until
from wgstore.events import engine as engine_module
from wgstore.events.engine import create_store_engine

pytestmark = pytest.mark.postgres

ADMIN = PG_URL.replace("postgresql+psycopg://", "postgresql://")


@pytest.fixture
def app_name() -> str:
    return f"wgping_{uuid.uuid4().hex[:10]}"


@pytest.fixture(autouse=True)
def long_idle_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    """No connection here sits in the pool past the idle limit, however slow the machine: what
    a test sees is the socket check's doing (a test that wants the limit sets it)."""
    monkeypatch.setattr(engine_module, "PING_AFTER_IDLE_S", 3600.0)


@pytest.fixture
def engine(pg_url: str, app_name: str) -> Iterator[sa.Engine]:
    made = create_store_engine(f"{pg_url}&application_name={app_name}")
    try:
        yield made
    finally:
        made.dispose()


def _backends(app_name: str) -> dict[int, datetime | None]:
    """Each backend of ``app_name``: its pid and when its last statement started."""
    with psycopg.connect(ADMIN, autocommit=True) as admin:
        rows = admin.execute(
            "SELECT pid, query_start FROM pg_stat_activity WHERE application_name = %s",
            (app_name,),
        ).fetchall()
    return {pid: started for pid, started in rows}


def _pid(connection: sa.Connection) -> int:
    return int(connection.exec_driver_sql("SELECT pg_backend_pid()").scalar_one())


def _use(engine: sa.Engine) -> int:
    """Check a connection out, run a statement, give it back; its backend's pid."""
    with engine.connect() as connection:
        pid = _pid(connection)
        connection.rollback()
    return pid


def _kill(app_name: str) -> int:
    """End every backend of ``app_name`` as a restart does; wait until they are gone."""
    with psycopg.connect(ADMIN, autocommit=True) as admin:
        pids = [
            row[0]
            for row in admin.execute(
                "SELECT pid FROM (SELECT pid FROM pg_stat_activity WHERE application_name = %s "
                "OFFSET 0) AS t WHERE pg_terminate_backend(pid)",
                (app_name,),
            )
        ]

        def gone() -> bool:
            row = admin.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE pid = ANY(%s)", (pids,)
            ).fetchone()
            return row is not None and row[0] == 0

        wait_until(gone, timeout_s=30, what="the ended backends to go away")
    return len(pids)


def test_a_connection_used_a_moment_ago_is_handed_out_without_a_ping(
    engine: sa.Engine, app_name: str
) -> None:
    pid = _use(engine)
    before = _backends(app_name)[pid]
    connection = engine.connect()
    try:
        assert _backends(app_name)[pid] == before  # checked out: nothing reached the server
        assert _pid(connection) == pid  # the same connection, and it works
    finally:
        connection.close()


def test_a_connection_idle_past_the_limit_is_pinged(
    engine: sa.Engine, app_name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    pid = _use(engine)
    before = _backends(app_name)[pid]
    monkeypatch.setattr(engine_module, "PING_AFTER_IDLE_S", 0.0)  # any idle time is too long
    with engine.connect() as connection:
        after = _backends(app_name)[pid]
        assert before is not None and after is not None and after > before  # the ping
        assert _pid(connection) == pid


def test_connections_the_server_ended_are_replaced_before_anyone_uses_them(
    engine: sa.Engine, app_name: str
) -> None:
    """Ended a moment after their last use (within the idle limit): each pooled connection has
    the server's goodbye to read, the first checkout's ping fails, and the pool replaces
    that connection and every other made before it. No caller sees an error."""
    held = [engine.connect() for _ in range(3)]
    old = {_pid(connection) for connection in held}
    for connection in held:
        connection.rollback()
        connection.close()
    assert _kill(app_name) == 3
    for _ in range(3):
        with engine.connect() as connection:
            assert _pid(connection) not in old
            connection.rollback()
    assert engine.pool.checkedout() == 0


def test_a_raw_connection_the_server_ended_is_replaced_too(
    engine: sa.Engine, app_name: str
) -> None:
    """What the recorders check out (``engine.raw_connection()``) goes through the same check."""
    raw = engine.raw_connection()
    cursor = raw.cursor()
    cursor.execute("SELECT pg_backend_pid()")
    old = cursor.fetchone()[0]
    cursor.close()
    raw.close()
    _kill(app_name)
    raw = engine.raw_connection()
    try:
        cursor = raw.cursor()
        cursor.execute("SELECT pg_backend_pid()")
        assert cursor.fetchone()[0] != old
        cursor.close()
    finally:
        raw.close()


def test_a_connection_cut_on_the_way_is_replaced_once_the_server_is_reachable_again(
    relayed: tuple[str, Relay],
) -> None:
    """The relay drops every connection through it (a restart as a client sees it) and listens
    again at once: the next checkout finds its pooled connection closed and makes a new one."""
    url, relay = relayed
    made = create_store_engine(url)
    try:
        with made.connect() as connection:
            old = _pid(connection)
            connection.rollback()
        relay.cut()
        relay.restore()
        with made.connect() as connection:
            assert _pid(connection) != old
            connection.rollback()
    finally:
        made.dispose()


def test_a_server_still_away_is_the_usual_error_at_checkout(
    relayed: tuple[str, Relay],
) -> None:
    url, relay = relayed
    made = create_store_engine(url)
    try:
        _use(made)
        relay.cut()
        with pytest.raises(sa.exc.OperationalError), made.connect():
            pass
        relay.restore()
        assert _use(made) > 0  # and back once it is
    finally:
        made.dispose()
