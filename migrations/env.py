"""Alembic environment for wgstore.

Two ways in: from code (``wgstore.migrations.runner``), which passes an open connection in
``config.attributes["connection"]``; or the plain ``alembic`` command, which connects to
``-x url=...``, else ``WGSTORE_URL``, else ``sqlalchemy.url`` from the config.
"""

from __future__ import annotations

import os

import sqlalchemy as sa
from alembic import context

from wgstore.events.schema import ALEMBIC_VERSION_TABLE, metadata

config = context.config
target_metadata = metadata


def _include_object(
    obj: object, name: str | None, type_: str, reflected: bool, compare_to: object
) -> bool:
    # Only wgstore's own tables: the store may share a database with other software.
    if type_ == "table":
        return bool(name and name.startswith("wg_")) and name != ALEMBIC_VERSION_TABLE
    return True


def _configure(connection: sa.Connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=target_metadata,
        version_table=ALEMBIC_VERSION_TABLE,
        render_as_batch=True,
        include_object=_include_object,
        compare_type=True,
    )


def _url() -> str:
    url = context.get_x_argument(as_dictionary=True).get("url") or os.environ.get("WGSTORE_URL")
    url = url or config.get_main_option("sqlalchemy.url")
    if not url:
        raise SystemExit("no database URL: pass -x url=... or set WGSTORE_URL")
    return url


def run_migrations_offline() -> None:
    """Emit SQL for a URL without connecting (``alembic upgrade head --sql``)."""
    context.configure(
        url=_url(),
        target_metadata=target_metadata,
        version_table=ALEMBIC_VERSION_TABLE,
        render_as_batch=True,
        literal_binds=True,
    )
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    """Migrate through a live connection: the caller's, or one made from the URL."""
    connection = config.attributes.get("connection")
    if connection is not None:
        _configure(connection)
        with context.begin_transaction():
            context.run_migrations()
        return
    from wgstore.events.engine import create_store_engine

    engine = create_store_engine(_url())
    try:
        with engine.connect() as conn:
            _configure(conn)
            with context.begin_transaction():
                context.run_migrations()
            conn.commit()
    finally:
        engine.dispose()


if context.is_offline_mode():
    run_migrations_offline()
else:
    run_migrations_online()
