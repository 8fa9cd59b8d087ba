"""Another application's ``wg_events`` is recognised and left alone (issue 21, item 13).

A wgstore schema is one with ``wg_events`` *and* a wgstore revision in ``wg_alembic_version``.
Before, read commands advised ``wgstore db upgrade``, which failed with "relation wg_events
already exists", and ``wgstore sql`` made a reader role and returned the other application's
rows.
"""

from __future__ import annotations

from typing import Any

import pytest

from wgstore.events.engine import create_store_engine
from wgstore.events.sql_reader import reader_role_name

_NOT_OURS = "not wgstore's"


@pytest.fixture
def foreign(empty_store_url: str) -> str:
    """A database (schema) holding someone else's ``wg_events`` with one row."""
    engine = create_store_engine(empty_store_url)
    try:
        with engine.begin() as connection:
            connection.exec_driver_sql(
                "CREATE TABLE wg_events (id INTEGER PRIMARY KEY, secret TEXT NOT NULL)"
            )
            connection.exec_driver_sql("INSERT INTO wg_events VALUES (1, 'their-secret')")
    finally:
        engine.dispose()
    return empty_store_url


def _their_tables(url: str) -> set[str]:
    import sqlalchemy as sa

    engine = create_store_engine(url)
    try:
        with engine.connect() as connection:
            return {name for name in sa.inspect(connection).get_table_names()}
    finally:
        engine.dispose()


@pytest.mark.parametrize(
    "command",
    [
        ["events"],
        ["groups"],
        ["db", "current"],
        ["db", "check"],
        ["db", "upgrade"],
        ["sql", "SELECT secret FROM wg_events"],
    ],
    ids=lambda command: " ".join(command[:2]),
)
def test_every_command_says_the_tables_are_not_wgstores_and_changes_nothing(
    cli: Any, foreign: str, command: list[str]
) -> None:
    result = cli(*command, "--url", foreign)
    assert result.exit_code == 1, result.stdout
    assert _NOT_OURS in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert "already exists" not in result.stderr
    assert "their-secret" not in result.stdout
    assert _their_tables(foreign) == {"wg_events"}
    if foreign.startswith("postgresql"):
        from sqlalchemy.engine import make_url

        from tests.cli.test_sql import _pg_admin, _schema_of

        database = make_url(foreign).database or ""
        with _pg_admin() as admin:
            made = admin.execute(
                "SELECT 1 FROM pg_roles WHERE rolname = %s",
                (reader_role_name(database, _schema_of(foreign)),),
            ).fetchone()
        assert made is None, "wgstore sql made a reader role for another application's table"
