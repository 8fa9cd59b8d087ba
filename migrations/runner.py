"""Bring a store's schema to head when it is opened: build an empty one in one step, migrate one
that exists with Alembic (run from code, on a connection the caller already has: Alembic's
cookbook recipe).

Alembic is imported only when an existing schema must change or be inspected: opening a store
whose schema is at :data:`HEAD_REVISION` reads the version row with one plain query, and an
empty database gets the head schema at once, stamped (:mod:`wgstore.migrations.fresh`), without
running a revision (Alembic's import costs ~0.1 s, its steps 0.5-0.9 s on Postgres, and a
process that opens a store once, a Ray Train controller or a test, pays them on its critical
path). Either way under the same lock and in one transaction.
"""

from __future__ import annotations

import logging
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

import sqlalchemy as sa
import sqlalchemy.exc as sa_exc

from wgstore.events.engine import READ_ONLY_OPTION, mask_url
from wgstore.events.errors import SchemaVersionError, StoreUnavailableError
from wgstore.events.schema import ALEMBIC_VERSION_TABLE
from wgstore.migrations.fresh import HEAD_REVISION, create_fresh_store, is_empty

if TYPE_CHECKING:
    from alembic.config import Config

__all__ = [
    "HEAD_REVISION",
    "alembic_config",
    "check_known",
    "check_wgstore_schema",
    "current_revision",
    "ensure_schema",
    "head_revision",
    "upgrade",
]

_HERE = Path(__file__).resolve().parent
_log = logging.getLogger(__name__)

UPGRADE_LOCK_TIMEOUT_S = 1.0
"""PostgreSQL: how long one try of an upgrade waits for a lock. A schema change waits for an
``ACCESS EXCLUSIVE`` lock behind every open transaction on the table, and every later writer
and reader queues behind *it*; so a try gives up soon, lets them through, and tries again."""
UPGRADE_PATIENCE_S = 300.0
"""PostgreSQL: how long an upgrade keeps trying before it says which transaction to end."""
MIGRATION_LOCK_CLASS = 7263524
"""PostgreSQL: the first key of the advisory lock an upgrade holds; the second is the schema's
``hashtext``, so one store's migrators queue while stores in other schemas migrate at once."""


def alembic_config(connection: sa.Connection | None = None) -> Config:
    """An Alembic ``Config`` for wgstore's migrations, optionally bound to ``connection``."""
    from alembic.config import Config

    # Alembic's default ``stdout`` is the sys.stdout of when alembic was imported, which a test
    # runner's capture (or a redirect) may since have closed: its messages go to today's.
    config = Config(stdout=sys.stdout)
    config.set_main_option("path_separator", "os")
    config.set_main_option("script_location", str(_HERE))
    config.set_main_option("version_locations", str(_HERE / "versions"))
    if connection is not None:
        config.attributes["connection"] = connection
    return config


def head_revision() -> str:
    """The newest revision this code knows, as Alembic reads it from ``versions/``."""
    from alembic.script import ScriptDirectory

    head = ScriptDirectory.from_config(alembic_config()).get_current_head()
    assert head is not None
    return head


def current_revision(connection: sa.Connection) -> str | None:
    """The revision the database is at, or None when it was never migrated."""
    from alembic.runtime.migration import MigrationContext

    context = MigrationContext.configure(connection, opts={"version_table": ALEMBIC_VERSION_TABLE})
    return context.get_current_revision()


def upgrade(connection: sa.Connection, revision: str = "head") -> None:
    """Upgrade the database behind ``connection`` to ``revision`` (default: head)."""
    from alembic import command

    command.upgrade(alembic_config(connection), revision)


def downgrade(connection: sa.Connection, revision: str) -> None:
    """Downgrade the database behind ``connection`` to ``revision`` (``base`` removes all)."""
    from alembic import command

    command.downgrade(alembic_config(connection), revision)


def ensure_schema(engine: sa.Engine, url: str, migrate: bool) -> None:
    """Bring the store behind ``engine`` to head, the step ``EventStore.open`` runs.

    Found by :mod:`wgstore.events.store` through the ``wgstore.schema_guard`` entry point
    (pyproject.toml), so ``events`` never imports the migrations. An empty database is built
    in one step (:func:`wgstore.migrations.fresh.create_fresh_store`), an existing schema behind
    head is upgraded by Alembic; with ``migrate`` False a database that is not at head raises.

    Raises:
        SchemaVersionError: the schema is behind and ``migrate`` is False, or it is at a
            revision this wgstore does not know (migrated by a newer one).
    """
    # Only reads: on SQLite this must not wait for the write lock behind another writer.
    with engine.connect().execution_options(**{READ_ONLY_OPTION: True}) as connection:
        if _version_row(connection) == HEAD_REVISION:
            connection.rollback()
            return
        empty = is_empty(connection)
        current = None if empty else current_revision(connection)
        if current is None and not empty:
            check_wgstore_schema(connection, url)
        connection.rollback()
    head = HEAD_REVISION if empty else head_revision()
    if current == head:  # a version table with several rows, which only Alembic reads
        return
    if not migrate:
        check_known(current, url)  # newer than this wgstore: upgrading the database cannot help
        state = "has no wgstore tables" if current is None else f"is at revision {current}"
        raise SchemaVersionError(
            f"the database at {mask_url(url)} {state}, but this wgstore needs {head}: run "
            "`wgstore db upgrade --url ...` (or open the store with migrate=True)"
        )
    if engine.dialect.name != "postgresql":
        with engine.begin() as connection:
            _migrate(connection, url)
        return
    deadline = time.monotonic() + UPGRADE_PATIENCE_S
    tries = 0
    while True:
        tries += 1
        try:
            with engine.begin() as connection:
                connection.exec_driver_sql(
                    f"SET LOCAL lock_timeout = {max(1, int(UPGRADE_LOCK_TIMEOUT_S * 1000))}"
                )
                _take_migration_lock(connection)
                _migrate(connection, url)
            return
        except sa_exc.OperationalError as error:
            if getattr(error.orig, "sqlstate", None) != "55P03":
                raise
            if time.monotonic() > deadline:
                raise StoreUnavailableError(
                    f"the upgrade of {mask_url(url)} could not take the locks it needs in "
                    f"{UPGRADE_PATIENCE_S:g} s ({tries} tries): a long transaction keeps "
                    "wgstore's tables locked (SELECT pid, xact_start, query FROM "
                    "pg_stat_activity WHERE state <> 'idle' shows it); end it, then run "
                    "`wgstore db upgrade` again"
                ) from None
        pause = min(0.5 * tries, 5.0)
        _log.warning(
            "the upgrade of %s waited %g s for a lock that a long transaction on wgstore's "
            "tables holds, and gave way so writers are not kept waiting behind it; trying "
            "again in %g s (try %d)",
            mask_url(url),
            UPGRADE_LOCK_TIMEOUT_S,
            pause,
            tries + 1,
        )
        time.sleep(pause)  # a backoff between tries, not a wait for a condition


def _take_migration_lock(connection: sa.Connection) -> None:
    """PostgreSQL: hold, until ``connection``'s transaction ends, the lock one store's migrators
    queue on: one at a time per schema; the others wait here, then find the schema at head.
    Stores in other schemas of the database migrate meanwhile. (A role without EXECUTE on
    advisory locks, see docs/sql.md, migrates alone.)"""
    if connection.exec_driver_sql(
        "SELECT has_function_privilege('pg_advisory_xact_lock(integer, integer)', 'EXECUTE')"
    ).scalar():
        connection.exec_driver_sql(
            f"SELECT pg_advisory_xact_lock({MIGRATION_LOCK_CLASS}, hashtext(current_schema()))"
        )


def _migrate(connection: sa.Connection, url: str) -> None:
    """Inside the locked transaction, look again (another process may have gone first): build
    an empty database in one step, else migrate what is there with Alembic."""
    if _version_row(connection) == HEAD_REVISION:
        return
    if is_empty(connection):
        create_fresh_store(connection)
        return
    head = head_revision()
    current = current_revision(connection)
    if current == head:
        return
    if current is None:
        check_wgstore_schema(connection, url)
    check_known(current, url)
    if current is not None:  # an existing log: some upgrades copy it (0008 on SQLite)
        _log.warning(
            "upgrading the wgstore schema at %s from %s to %s (once; a large log takes a "
            "while: SQLite copies ~60,000 events/s to 0008)",
            mask_url(url),
            current,
            head,
        )
    upgrade(connection)


def check_wgstore_schema(connection: sa.Connection, url: str) -> None:
    """Refuse a database whose ``wg_events`` wgstore did not make (no revision row for it).

    A database with no wgstore revision is either empty of wgstore tables (``wgstore db
    upgrade`` creates them) or holds another application's tables of the same name, which
    wgstore must neither read nor try to create over.

    Raises:
        SchemaVersionError: ``wg_events`` exists and there is no wgstore revision.
    """
    inspector = sa.inspect(connection)
    if not inspector.has_table("wg_events"):
        return
    if (
        inspector.has_table(ALEMBIC_VERSION_TABLE)
        and connection.exec_driver_sql(f"SELECT count(*) FROM {ALEMBIC_VERSION_TABLE}").scalar()
    ):
        return
    where = (
        "this SQLite file"
        if connection.dialect.name == "sqlite"
        else "the schema the URL's search_path leads to"
    )
    raise SchemaVersionError(
        f"the database at {mask_url(url)} has a table wg_events that is not wgstore's (no "
        f"wgstore revision in {ALEMBIC_VERSION_TABLE}): it belongs to another application, so "
        f"wgstore neither reads nor upgrades {where}; give wgstore its own database, schema "
        "(PostgreSQL: ?options=-csearch_path%3Dwgstore) or file"
    )


def _version_row(connection: sa.Connection) -> str | None:
    """The revision in the version table without Alembic (None: no table, no row, or more
    than one row, which Alembic itself then reads)."""
    if not sa.inspect(connection).has_table(ALEMBIC_VERSION_TABLE):
        return None
    rows = connection.exec_driver_sql(f"SELECT version_num FROM {ALEMBIC_VERSION_TABLE}").all()
    return str(rows[0][0]) if len(rows) == 1 else None


def check_known(revision: str | None, url: str) -> None:
    """Refuse a revision this wgstore does not know: a newer wgstore migrated the database.

    Raises:
        SchemaVersionError: ``revision`` is not in ``versions/`` (saying to upgrade wgstore).
    """
    if revision is None:
        return
    from alembic.script import ScriptDirectory

    try:
        ScriptDirectory.from_config(alembic_config()).get_revision(revision)
    except Exception:  # noqa: BLE001 - alembic raises several kinds for an unknown id
        raise SchemaVersionError(
            f"the database at {mask_url(url)} is at revision {revision!r}, which this wgstore "
            "does not know: it was migrated by a newer wgstore; upgrade wgstore"
        ) from None
