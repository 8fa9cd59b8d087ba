"""Run Alembic from code, on a connection the caller already has (Alembic cookbook recipe)."""

from __future__ import annotations

from pathlib import Path

import sqlalchemy as sa
from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory

from wgstore.events.engine import READ_ONLY_OPTION, mask_url
from wgstore.events.errors import SchemaVersionError
from wgstore.events.schema import ALEMBIC_VERSION_TABLE

__all__ = ["alembic_config", "current_revision", "ensure_schema", "head_revision", "upgrade"]

_HERE = Path(__file__).resolve().parent


def alembic_config(connection: sa.Connection | None = None) -> Config:
    """An Alembic ``Config`` for wgstore's migrations, optionally bound to ``connection``."""
    config = Config()
    config.set_main_option("path_separator", "os")
    config.set_main_option("script_location", str(_HERE))
    config.set_main_option("version_locations", str(_HERE / "versions"))
    if connection is not None:
        config.attributes["connection"] = connection
    return config


def head_revision() -> str:
    """The newest revision this code knows."""
    head = ScriptDirectory.from_config(alembic_config()).get_current_head()
    assert head is not None
    return head


def current_revision(connection: sa.Connection) -> str | None:
    """The revision the database is at, or None when it was never migrated."""
    context = MigrationContext.configure(connection, opts={"version_table": ALEMBIC_VERSION_TABLE})
    return context.get_current_revision()


def upgrade(connection: sa.Connection, revision: str = "head") -> None:
    """Upgrade the database behind ``connection`` to ``revision`` (default: head)."""
    command.upgrade(alembic_config(connection), revision)


def downgrade(connection: sa.Connection, revision: str) -> None:
    """Downgrade the database behind ``connection`` to ``revision`` (``base`` removes all)."""
    command.downgrade(alembic_config(connection), revision)


def ensure_schema(engine: sa.Engine, url: str, migrate: bool) -> None:
    """Bring the store behind ``engine`` to head, the step ``EventStore.open`` runs.

    Found by :mod:`wgstore.events.store` through the ``wgstore.schema_guard`` entry point
    (pyproject.toml), so ``events`` never imports the migrations. With ``migrate`` False a database that is not at head raises.

    Raises:
        SchemaVersionError: the schema is behind and ``migrate`` is False, or it is at a
            revision this wgstore does not know (migrated by a newer one).
    """
    head = head_revision()
    # Only reads: on SQLite this must not wait for the write lock behind another writer.
    with engine.connect().execution_options(**{READ_ONLY_OPTION: True}) as connection:
        current = current_revision(connection)
        connection.rollback()
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
        upgrade(connection)


def _check_known(revision: str | None, url: str) -> None:
    if revision is None:
        return
    try:
        ScriptDirectory.from_config(alembic_config()).get_revision(revision)
    except Exception:  # noqa: BLE001 - alembic raises several kinds for an unknown id
        raise SchemaVersionError(
            f"the database at {mask_url(url)} is at revision {revision!r}, which this wgstore "
            "does not know: it was migrated by a newer wgstore; upgrade wgstore"
        ) from None
