"""``wgstore db upgrade | current | check`` on both backends."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest

from wgstore.events.engine import create_store_engine
from wgstore.migrations.runner import head_revision


def _create_empty(url: str) -> None:
    """Make the database exist with no tables (a Postgres schema already does)."""
    if url.startswith("sqlite:///"):
        sqlite3.connect(url.removeprefix("sqlite:///")).close()


def test_upgrade_creates_the_schema_and_check_then_passes(cli: Any, empty_store_url: str) -> None:
    _create_empty(empty_store_url)
    before = cli("db", "check", "--url", empty_store_url)
    assert before.exit_code == 1
    assert "not at head" in before.stderr

    upgraded = cli("db", "upgrade", "--url", empty_store_url)
    assert upgraded.exit_code == 0, upgraded.stderr
    assert f"to {head_revision()}" in upgraded.stdout

    after = cli("db", "check", "--url", empty_store_url)
    assert after.exit_code == 0, after.stderr
    assert "is at head" in after.stdout


def test_upgrade_twice_says_it_is_already_at_head(cli: Any, empty_store_url: str) -> None:
    assert cli("db", "upgrade", "--url", empty_store_url).exit_code == 0
    again = cli("db", "upgrade", "--url", empty_store_url)
    assert again.exit_code == 0
    assert "already at" in again.stdout


def test_current_shows_none_before_and_head_after_the_upgrade(
    cli: Any, empty_store_url: str
) -> None:
    _create_empty(empty_store_url)
    empty = cli("db", "current", "--url", empty_store_url)
    assert empty.exit_code == 0, empty.stderr
    assert "none (no wgstore tables)" in empty.stdout
    assert "behind" in empty.stdout

    cli("db", "upgrade", "--url", empty_store_url)
    current = cli("db", "current", "--url", empty_store_url)
    assert f"current: {head_revision()}" in current.stdout
    assert "at head" in current.stdout


def test_upgrade_reads_the_url_from_the_environment(cli: Any, sqlite_url: str) -> None:
    result = cli("db", "upgrade", env={"WGSTORE_URL": sqlite_url})
    assert result.exit_code == 0, result.stderr
    assert cli("db", "check", env={"WGSTORE_URL": sqlite_url}).exit_code == 0


def test_db_commands_default_to_wgstore_db_in_the_current_folder(
    cli: Any, in_tmp_folder: Path
) -> None:
    assert cli("db", "upgrade").exit_code == 0
    assert (in_tmp_folder / "wgstore.db").exists()


def test_check_on_a_missing_sqlite_file_exits_1_naming_the_path(cli: Any, tmp_path: Path) -> None:
    result = cli("db", "check", "--url", f"sqlite:///{tmp_path / 'typo.db'}")
    assert result.exit_code == 1
    assert "typo.db" in result.stderr


def test_current_on_a_missing_sqlite_file_names_the_path_and_creates_nothing(
    cli: Any, tmp_path: Path
) -> None:
    missing = tmp_path / "nope.db"
    result = cli("db", "current", "--url", f"sqlite:///{missing}")
    assert result.exit_code == 1
    assert "no wgstore database at" in result.stderr
    assert "Traceback" not in result.stderr + result.stdout
    assert not missing.exists()


def test_check_on_an_unrelated_sqlite_file_exits_1(cli: Any, tmp_path: Path) -> None:
    other = tmp_path / "other.db"
    sqlite3.connect(other).execute("CREATE TABLE t (x)").connection.close()
    result = cli("db", "check", "--url", f"sqlite:///{other}")
    assert result.exit_code == 1
    assert "wgstore db upgrade" in result.stderr


def test_a_url_that_is_not_a_database_url_exits_2(cli: Any) -> None:
    result = cli("db", "upgrade", "--url", "mysql://root@localhost/x")
    assert result.exit_code == 2
    assert "SQLite or PostgreSQL" in result.stderr


def test_an_unreachable_postgres_exits_1_with_one_line_and_the_password_masked(cli: Any) -> None:
    result = cli("db", "current", "--url", "postgresql+psycopg://bob:s3cret@127.0.0.1:1/nothing")
    assert result.exit_code == 1
    assert "s3cret" not in result.stderr
    assert "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize(
    "command",
    [["runs"], ["verify"], ["serve"], ["db", "check"], ["db", "current"], ["db", "upgrade"]],
    ids=lambda command: " ".join(command),
)
def test_a_database_a_newer_wgstore_migrated_is_told_to_upgrade_wgstore_at_once(
    cli: Any, store_url: str, command: list[str]
) -> None:
    """Issue 41, item 8: each command said "run `wgstore db upgrade`", which then said to
    upgrade wgstore."""
    engine = create_store_engine(store_url)
    try:
        with engine.begin() as connection:
            connection.exec_driver_sql(
                "UPDATE wg_alembic_version SET version_num = '9999_from_the_future'"
            )
    finally:
        engine.dispose()
    result = cli(*command, "--url", store_url)
    assert result.exit_code == 1, (result.stdout, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert "9999_from_the_future" in lines[-1]
    assert "migrated by a newer wgstore; upgrade wgstore" in lines[-1]
    assert "wgstore db upgrade" not in result.stderr + result.stdout
