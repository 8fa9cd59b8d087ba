"""``wgstore sql``: read-only queries, and every way of sneaking in a write, refused by the database."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from wgstore.events.engine import create_store_engine


def _scalar(url: str, sql: str) -> Any:
    engine = create_store_engine(url)
    try:
        with engine.connect() as connection:
            return connection.exec_driver_sql(sql).scalar()
    finally:
        engine.dispose()


def _tables(url: str) -> set[str]:
    engine = create_store_engine(url)
    try:
        return set(sa.inspect(engine).get_table_names())
    finally:
        engine.dispose()


def test_a_select_prints_a_table_and_counts_the_rows(cli: Any, recorded: Any) -> None:
    result = cli(
        "sql",
        "SELECT event_type, count(*) AS n FROM wg_events GROUP BY event_type ORDER BY n DESC",
        "--url",
        recorded.url,
    )
    assert result.exit_code == 0, result.stderr
    assert "WorkerReported" in result.stdout
    assert "12" in result.stdout
    assert "rows" in result.stderr


def test_json_gives_one_object_per_row_with_the_column_names(cli: Any, recorded: Any) -> None:
    result = cli(
        "sql",
        "SELECT position, stream_id, event_type FROM wg_events WHERE stream_id LIKE 'run-%' ORDER BY position",
        "--url",
        recorded.url,
        "--json",
    )
    assert result.exit_code == 0, result.stderr
    rows = [json.loads(line) for line in result.stdout.splitlines()]
    assert [row["event_type"] for row in rows] == ["RunCreated", "RunErrored"]
    assert set(rows[0]) == {"position", "stream_id", "event_type"}


def test_limit_stops_early_and_says_so(cli: Any, recorded: Any) -> None:
    result = cli(
        "sql", "SELECT position FROM wg_events", "--url", recorded.url, "--json", "--limit", "3"
    )
    assert result.exit_code == 0
    assert len(result.stdout.splitlines()) == 3
    assert "--limit 0 shows all" in result.stderr


def test_a_syntax_error_exits_1_with_the_database_message(cli: Any, recorded: Any) -> None:
    result = cli("sql", "SELEC nothing", "--url", recorded.url)
    assert result.exit_code == 1
    assert "SQL error" in result.stderr
    assert "Traceback" not in result.stderr


def test_an_empty_query_is_a_usage_error(cli: Any, recorded_sqlite: Any) -> None:
    assert cli("sql", "  ", "--url", recorded_sqlite.url).exit_code == 2


WRITES = [
    "DELETE FROM wg_subscriptions",
    "UPDATE wg_subscriptions SET checkpoint = 0",
    "INSERT INTO wg_subscriptions (name, checkpoint, updated_at) VALUES ('evil', 0, CURRENT_TIMESTAMP)",
    "SELECT 1; DELETE FROM wg_subscriptions",
    "SELECT 1; DROP TABLE wg_subscriptions",
    "WITH gone AS (DELETE FROM wg_subscriptions RETURNING *) SELECT * FROM gone",
    "SELECT * INTO stolen FROM wg_subscriptions",
    "CREATE TABLE stolen (x integer)",
    "DROP TABLE wg_subscriptions",
    "CREATE TEMP TABLE stolen AS SELECT * FROM wg_events",
]


@pytest.mark.parametrize("statement", WRITES)
def test_writes_are_refused_and_change_nothing(cli: Any, recorded: Any, statement: str) -> None:
    engine = create_store_engine(recorded.url)
    with engine.begin() as connection:
        connection.execute(
            sa.text(
                "INSERT INTO wg_subscriptions (name, checkpoint, updated_at) "
                "VALUES ('keep', 7, CURRENT_TIMESTAMP)"
            )
        )
    engine.dispose()
    tables = _tables(recorded.url)
    result = cli("sql", statement, "--url", recorded.url)
    assert result.exit_code == 1, result.stdout
    assert "Traceback" not in result.stderr
    assert _scalar(recorded.url, "SELECT checkpoint FROM wg_subscriptions WHERE name = 'keep'") == 7
    assert _scalar(recorded.url, "SELECT count(*) FROM wg_subscriptions") == 1
    assert _tables(recorded.url) == tables


def test_a_second_statement_is_refused_by_the_database_itself(cli: Any, recorded: Any) -> None:
    result = cli("sql", "SELECT 1; SELECT 2", "--url", recorded.url)
    assert result.exit_code == 1
    assert "exactly one statement" in result.stderr


def test_a_trailing_semicolon_and_comment_are_still_one_statement(cli: Any, recorded: Any) -> None:
    result = cli("sql", "SELECT 41 + 1 AS answer; -- done", "--url", recorded.url, "--json")
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout) == {"answer": 42}


@pytest.mark.parametrize(
    "statement",
    [
        "ATTACH DATABASE '{folder}/evil.db' AS evil",
        "PRAGMA query_only = OFF",
        "VACUUM INTO '{folder}/copy.db'",
    ],
)
def test_sqlite_attach_pragma_and_vacuum_are_refused(
    cli: Any, recorded_sqlite: Any, tmp_path: Path, statement: str
) -> None:
    result = cli("sql", statement.format(folder=tmp_path), "--url", recorded_sqlite.url)
    assert result.exit_code == 1
    assert "refused" in result.stderr
    assert not (tmp_path / "evil.db").exists()
    assert not (tmp_path / "copy.db").exists()


@pytest.mark.parametrize(
    "statement",
    [
        "SELECT set_config('transaction_read_only', 'off', true)",
        "COPY wg_subscriptions TO '/tmp/wgstore-sql-copy.txt'",
        "SELECT pg_terminate_backend(pg_backend_pid())",
        "SET transaction_read_only = off",
    ],
)
def test_postgres_tricks_are_refused(cli: Any, pg_url: str, history: Any, statement: str) -> None:
    history.fill(pg_url)
    result = cli("sql", statement, "--url", pg_url)
    assert result.exit_code == 1, result.stdout
    assert "Traceback" not in result.stderr
    assert not Path("/tmp/wgstore-sql-copy.txt").exists()
    assert _scalar(pg_url, "SELECT count(*) FROM pg_largeobject_metadata") == 0


def test_sql_on_a_missing_sqlite_file_exits_1_and_creates_nothing(cli: Any, tmp_path: Path) -> None:
    result = cli("sql", "SELECT 1", "--url", f"sqlite:///{tmp_path / 'missing.db'}")
    assert result.exit_code == 1
    assert "no wgstore database" in result.stderr
    assert not (tmp_path / "missing.db").exists()


def test_a_long_query_is_stopped_by_the_timeout(cli: Any, recorded: Any) -> None:
    slow = (
        "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 100000000) "
        "SELECT count(*) FROM n"
    )
    result = cli("sql", slow, "--url", recorded.url, "--timeout", "300ms")
    assert result.exit_code == 1
    assert "--timeout" in result.stderr


@pytest.mark.parametrize(
    "statement",
    [
        "SELECT lo_from_bytea(0, 'x'::bytea)",
        "SELECT set_config('default_transaction_read_only', 'off', false)",
    ],
)
def test_postgres_side_effects_a_read_only_transaction_lets_through_are_rolled_back(
    cli: Any, pg_url: str, history: Any, statement: str
) -> None:
    history.fill(pg_url)
    assert cli("sql", statement, "--url", pg_url).exit_code == 0
    assert _scalar(pg_url, "SELECT count(*) FROM pg_largeobject_metadata") == 0
    after = cli("sql", "SELECT 1; DELETE FROM wg_subscriptions", "--url", pg_url)
    assert after.exit_code == 1
