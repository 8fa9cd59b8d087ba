"""An empty database is built in one step, under the lock migrators take.

(That the result is the migrated schema: tests/migrations/test_catalog.py; that no Alembic
module is imported for it: test_migrations.py.)
"""

from __future__ import annotations

import threading
from typing import Any

from tests.migrations.conftest import WAITING_FOR_THE_MIGRATION_LOCK
from tests.waiting import wait_until
from wgstore.events import EventStore
from wgstore.events.engine import create_store_engine
from wgstore.migrations import runner
from wgstore.migrations.fresh import create_fresh_store, is_empty

_DEADLINE_S = 60.0


def test_a_database_with_an_empty_version_table_is_migrated_by_alembic(
    empty_store_url: str,
) -> None:
    """All revisions downgraded leaves the version table, empty: not a fresh database (the
    one-step build would make that table again), so Alembic upgrades it as before."""
    EventStore.open(empty_store_url).close()
    engine = create_store_engine(empty_store_url)
    try:
        with engine.begin() as connection:
            runner.downgrade(connection, "base")
        with engine.connect() as connection:
            assert not is_empty(connection)
            connection.rollback()
        runner.ensure_schema(engine, empty_store_url, migrate=True)
        with engine.connect() as connection:
            assert runner.current_revision(connection) == runner.HEAD_REVISION
    finally:
        engine.dispose()


def test_a_second_opener_of_an_empty_schema_waits_and_finds_it_built(pg_url: str) -> None:
    """Two processes open one empty Postgres schema: the second waits for the first's lock,
    then finds the store at head and builds nothing (building it again would fail: its tables
    exist)."""
    engine = create_store_engine(pg_url)
    monitor = engine.connect()
    holder = engine.connect()
    outcome: dict[str, Any] = {}

    def second() -> None:
        try:
            runner.ensure_schema(create_store_engine(pg_url), pg_url, migrate=True)
            outcome["done"] = True
        except Exception as error:  # noqa: BLE001 - asserted below
            outcome["error"] = error

    opener = threading.Thread(target=second, daemon=True)
    try:
        holder.begin()
        runner._take_migration_lock(holder)  # the first opener, about to build
        opener.start()

        def waits_for_the_lock() -> bool:
            return bool(monitor.exec_driver_sql(WAITING_FOR_THE_MIGRATION_LOCK).first())

        wait_until(
            lambda: waits_for_the_lock() or not opener.is_alive(),
            timeout_s=_DEADLINE_S,
            what="the second opener to wait for the migration lock",
        )
        assert opener.is_alive(), f"the second opener did not wait: {outcome}"
        create_fresh_store(holder)
        holder.commit()
    finally:
        if holder.in_transaction():
            holder.rollback()
        holder.close()
    opener.join(_DEADLINE_S)
    assert outcome == {"done": True}, outcome
    with engine.connect() as connection:
        assert runner.current_revision(connection) == runner.HEAD_REVISION
    monitor.close()
    engine.dispose()
