"""Commands that act on an existing store never create one (issue 41, item 6).

``gc``, ``supervise --once`` and ``resume``, pointed at another application's database or a
mistyped SQLite path, created wgstore's tables there (15 on SQLite, 14 on Postgres) and said
"no orphaned runs", exit 0, where ``runs`` refused the same database. Only ``wgstore db upgrade``
and ``wgstore run`` (which records a new run) create a schema; every other command refuses in
the one line ``runs`` prints and leaves the database as it was. None of these commands reaches
Ray: the store is opened first.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from wgstore.events.engine import create_store_engine

# Commands that act on a store (writable, most of them) and so used to migrate it.
ACTING = [
    ["gc"],
    ["gc", "--dry-run"],
    ["supervise", "--once"],
    ["supervise", "--once", "--dry-run"],
    ["resume", "run-1"],
    ["projections", "catch-up"],
    ["projections", "rebuild"],
    ["ingest", "ray-export", str(Path(__file__).parents[1] / "ingest" / "fixtures")],
]
_IDS = [" ".join(command) for command in ACTING]


@pytest.fixture
def another_application(empty_store_url: str) -> str:
    """A database (schema) holding another application's table, and no wgstore tables."""
    engine = create_store_engine(empty_store_url)
    try:
        with engine.begin() as connection:
            connection.exec_driver_sql("CREATE TABLE customers (id INTEGER PRIMARY KEY)")
    finally:
        engine.dispose()
    return empty_store_url


def _tables(url: str) -> set[str]:
    engine = create_store_engine(url, read_only=True)
    try:
        with engine.connect() as connection:
            inspector = sa.inspect(connection)
            return set(inspector.get_table_names()) | set(inspector.get_view_names())
    finally:
        engine.dispose()


@pytest.mark.parametrize("command", ACTING, ids=_IDS)
def test_a_command_on_another_applications_database_refuses_as_runs_does_and_creates_nothing(
    cli: Any, another_application: str, command: list[str]
) -> None:
    runs = cli("runs", "--url", another_application)
    result = cli(*command, "--url", another_application)
    assert result.exit_code == 1, (result.stdout, result.stderr)
    assert result.stderr == runs.stderr  # the one line `runs` prints
    assert "has no wgstore tables" in result.stderr and "wgstore db upgrade" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert "no orphaned runs" not in result.stdout
    assert _tables(another_application) == {"customers"}


@pytest.mark.parametrize("command", ACTING, ids=_IDS)
def test_a_command_on_a_mistyped_sqlite_path_refuses_and_creates_no_file(
    cli: Any, tmp_path: Path, command: list[str]
) -> None:
    typo = tmp_path / "wgstroe.db"
    result = cli(*command, "--url", f"sqlite:///{typo}")
    assert result.exit_code == 1, (result.stdout, result.stderr)
    assert f"no wgstore database at {typo}" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert list(tmp_path.iterdir()) == []


def test_db_upgrade_still_creates_the_schema_where_the_others_refused(
    cli: Any, another_application: str
) -> None:
    assert cli("gc", "--url", another_application).exit_code == 1
    assert cli("db", "upgrade", "--url", another_application).exit_code == 0
    assert {"customers", "wg_events", "wg_runs"} <= _tables(another_application)
    done = cli("gc", "--dry-run", "--url", another_application)
    assert done.exit_code == 0, done.stderr
    assert "no orphaned runs" in done.stdout
