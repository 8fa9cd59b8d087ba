"""Run Alembic from code, on a connection the caller already has (Alembic cookbook recipe).

Alembic is imported only when a schema must change or be inspected: opening a store whose schema
is at :data:`HEAD_REVISION` reads the version row with one plain query (Alembic's import costs
~0.1 s and a process that opens a store once, a Ray Train controller say, pays it on its
critical path).
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING

import sqlalchemy as sa

from wgstore.events.engine import READ_ONLY_OPTION, mask_url
from wgstore.events.errors import SchemaVersionError
from wgstore.events.schema import ALEMBIC_VERSION_TABLE

if TYPE_CHECKING:
    from alembic.config import Config

__all__ = [
    "HEAD_REVISION",
    "alembic_config",
    "current_revision",
    "ensure_schema",
    "head_revision",
    "upgrade",
]

_HERE = Path(__file__).resolve().parent
_log = logging.getLogger(__name__)

HEAD_REVISION = "0010_committed_checkpoints"
"""The newest revision in ``versions/``; a new migration updates it (a test checks the two agree)."""


def alembic_config(connection: sa.Connection | None = None) -> Config:
    """An Alembic ``Config`` for wgstore's migrations, optionally bound to ``connection``."""
    from alembic.config import Config

    config = Config()
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
    (pyproject.toml), so ``events`` never imports the migrations. With ``migrate`` False a database that is not at head raises.

    Raises:
        SchemaVersionError: the schema is behind and ``migrate`` is False, or it is at a
            revision this wgstore does not know (migrated by a newer one).
    """
    # Only reads: on SQLite this must not wait for the write lock behind another writer.
    with engine.connect().execution_options(**{READ_ONLY_OPTION: True}) as connection:
        if _version_row(connection) == HEAD_REVISION:
            connection.rollback()
            return
        current = current_revision(connection)
        connection.rollback()
    head = head_revision()
    if current == head:
        return
    if not migrate:
        state = "has no wgstore tables" if current is None else f"is at revision {current}"
        raise SchemaVersionError(
            f"the database at {mask_url(url)} {state}, but this wgstore needs {head}: run "
            "`wgstore db upgrade --url ...` (or open the store with migrate=True)"
        )
    with engine.begin() as connection:
        if engine.dialect.name == "postgresql":
            # One migrator at a time; the others wait here, then find the schema at head.
            connection.exec_driver_sql("SELECT pg_advisory_xact_lock(7263524)")
        current = current_revision(connection)
        if current == head:
            return
        _check_known(current, url)
        if current is not None:  # an existing log: some upgrades copy it (0008 on SQLite)
            _log.warning(
                "upgrading the wgstore schema at %s from %s to %s (once; a large log takes a "
                "while: SQLite copies ~60,000 events/s to 0008)",
                mask_url(url),
                current,
                head,
            )
        upgrade(connection)


def _version_row(connection: sa.Connection) -> str | None:
    """The revision in the version table without Alembic (None: no table, no row, or more
    than one row, which Alembic itself then reads)."""
    if not sa.inspect(connection).has_table(ALEMBIC_VERSION_TABLE):
        return None
    rows = connection.exec_driver_sql(f"SELECT version_num FROM {ALEMBIC_VERSION_TABLE}").all()
    return str(rows[0][0]) if len(rows) == 1 else None


def _check_known(revision: str | None, url: str) -> None:
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
