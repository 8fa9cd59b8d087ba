"""Run Alembic from code, on a connection the caller already has (Alembic cookbook recipe)."""

from __future__ import annotations

from pathlib import Path

import sqlalchemy as sa
from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory

from wgstore.events.schema import ALEMBIC_VERSION_TABLE

__all__ = ["alembic_config", "current_revision", "head_revision", "upgrade"]

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
