"""The suite's fresh stores are copies of a template (tests/templates.py): a copy must be exactly
the database ``EventStore.open`` makes of an empty one, or every test that uses one tests
something else. (That store equals one every migration made: tests/migrations/test_catalog.py.)"""

from __future__ import annotations

import shutil
import sqlite3
import subprocess
import uuid
from pathlib import Path

import pytest

from tests import templates
from tests.conftest import PG_URL, _admin_execute, make_pg_schema_url, require_postgres


def _sqlite_schema(path: Path) -> dict[str, object]:
    with sqlite3.connect(path) as conn:
        return {
            "objects": sorted(conn.execute("SELECT type, name, tbl_name, sql FROM sqlite_master")),
            "journal_mode": conn.execute("PRAGMA journal_mode").fetchone(),
            "user_version": conn.execute("PRAGMA user_version").fetchone(),
            "revision": conn.execute("SELECT * FROM wg_alembic_version").fetchall(),
            "events": conn.execute("SELECT count(*) FROM wg_events").fetchone(),
        }


def test_a_sqlite_copy_is_the_database_a_migration_makes(tmp_path: Path) -> None:
    from wgstore.events import EventStore

    migrated, copied = tmp_path / "migrated.db", tmp_path / "copied.db"
    EventStore.open(f"sqlite:///{migrated}").close()
    templates.copy_sqlite(copied)
    assert _sqlite_schema(copied) == _sqlite_schema(migrated)
    with EventStore.open(f"sqlite:///{copied}") as store:  # usable as it is
        assert store.head() == 0


def _pg_dump(schema: str) -> str:
    conninfo = PG_URL.split("?", 1)[0].replace("postgresql+psycopg://", "postgresql://")
    dumped = subprocess.run(
        ["pg_dump", "--inserts", f"--schema={schema}", conninfo],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    ).stdout
    lines = [line for line in dumped.splitlines() if not line.startswith("\\")]  # random keys
    return "\n".join(lines).replace(schema, "SCHEMA")


@pytest.mark.skipif(shutil.which("pg_dump") is None, reason="copies are made by migrating")
def test_a_postgres_copy_is_the_schema_a_migration_makes() -> None:
    from wgstore.events import EventStore

    require_postgres()
    assert templates.postgres_script(PG_URL), "pg_dump is here: the template must be usable"
    migrated, copied = (f"wgtest_{uuid.uuid4().hex[:12]}" for _ in range(2))
    _admin_execute(f"CREATE SCHEMA {migrated}")
    try:
        EventStore.open(make_pg_schema_url(migrated)).close()
        templates.restore_postgres(PG_URL, copied)
        try:
            assert _pg_dump(copied) == _pg_dump(migrated)
            with EventStore.open(make_pg_schema_url(copied)) as store:  # usable as it is
                assert store.head() == 0
        finally:
            _admin_execute(f"DROP SCHEMA {copied} CASCADE")
    finally:
        _admin_execute(f"DROP SCHEMA {migrated} CASCADE")
