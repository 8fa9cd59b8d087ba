"""``wgstore sql``: read-only queries, and every way of sneaking in a write, refused by the database."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from tests.cli.conftest import make_reader
from tests.conftest import PG_URL
from wgstore.events import EventStore
from wgstore.events.engine import create_store_engine
from wgstore.events.sql_reader import READER_CONNECTION_LIMIT, reader_role_name
from wgstore.projections import catch_up_read_models

_DATABASE = sa.engine.make_url(PG_URL).database or ""


@pytest.fixture(autouse=True)
def _reader_made(request: pytest.FixtureRequest) -> None:
    """`wgstore sql` on PostgreSQL reads as the role `wgstore db reader` makes once: made here
    for the ``recorded`` store (tests on ``pg_url`` make it once they filled the store)."""
    if "recorded" in request.fixturenames:
        make_reader(request.getfixturevalue("recorded").url)


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
    make_reader(pg_url)
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
    ("statement", "exit_code"),
    [
        ("SELECT lo_from_bytea(0, 'x'::bytea)", 1),  # the reader may not create large objects
        ("SELECT set_config('default_transaction_read_only', 'off', false)", 0),
    ],
)
def test_postgres_side_effects_a_read_only_transaction_lets_through_are_rolled_back(
    cli: Any, pg_url: str, history: Any, statement: str, exit_code: int
) -> None:
    history.fill(pg_url)
    make_reader(pg_url)
    assert cli("sql", statement, "--url", pg_url).exit_code == exit_code
    assert _scalar(pg_url, "SELECT count(*) FROM pg_largeobject_metadata") == 0
    after = cli("sql", "SELECT 1; DELETE FROM wg_subscriptions", "--url", pg_url)
    assert after.exit_code == 1


# ---------------------------------------------------------------------- the reader role (Postgres)


def _pg_admin() -> Any:
    import psycopg

    from tests.conftest import PG_URL

    return psycopg.connect(
        PG_URL.replace("postgresql+psycopg://", "postgresql://"), autocommit=True
    )


def _schema_of(url: str) -> str:
    return url.rsplit("search_path%3D", 1)[1]


def _url_as(url: str, user: str, password: str | None = None) -> str:
    from sqlalchemy.engine import make_url

    return make_url(url).set(username=user, password=password).render_as_string(hide_password=False)


@pytest.fixture
def login_role(pg_url: str) -> Iterator[Callable[[str], str]]:
    """Make throwaway login roles (``make(attributes)`` returns the name); dropped afterwards."""
    made: list[str] = []

    def make(attributes: str) -> str:
        name = f"wgtest_{uuid.uuid4().hex[:10]}"
        with _pg_admin() as admin:
            admin.execute(f"CREATE ROLE {name} LOGIN {attributes}")
        made.append(name)
        return name

    yield make
    with _pg_admin() as admin:
        for name in made:
            admin.execute(f"DROP OWNED BY {name}")
            admin.execute(f"DROP ROLE {name}")


def test_the_query_runs_as_a_login_role_that_can_only_read_the_stores_tables(
    cli: Any, pg_url: str, history: Any
) -> None:
    history.fill(pg_url)
    make_reader(pg_url)
    result = cli(
        "sql",
        "SELECT session_user AS login, current_user AS now, "
        "pg_has_role(session_user, 'pg_read_all_data', 'MEMBER') AS reads_everything",
        "--url",
        pg_url,
        "--json",
    )
    assert result.exit_code == 0, result.stderr
    row = json.loads(result.stdout)
    assert row["login"] == row["now"] == reader_role_name(_DATABASE, _schema_of(pg_url))
    assert row["reads_everything"] is False
    with _pg_admin() as admin:
        attributes = admin.execute(
            "SELECT rolcanlogin, rolsuper, rolcreatedb, rolcreaterole, rolinherit, "
            "rolreplication, rolbypassrls FROM pg_roles WHERE rolname = %s",
            (row["login"],),
        ).fetchone()
        memberships = admin.execute(
            "SELECT count(*) FROM pg_auth_members m JOIN pg_roles r ON r.oid = m.member "
            "WHERE r.rolname = %s",
            (row["login"],),
        ).fetchone()
        privileges = admin.execute(
            "SELECT DISTINCT privilege_type FROM information_schema.role_table_grants "
            "WHERE grantee = %s",
            (row["login"],),
        ).fetchall()
        schemas = admin.execute(
            "SELECT DISTINCT table_schema FROM information_schema.role_table_grants "
            "WHERE grantee = %s",
            (row["login"],),
        ).fetchall()
        secret = admin.execute(
            "SELECT rolpassword LIKE 'SCRAM-SHA-256$%%', "
            "rolvaliduntil BETWEEN now() AND now() + interval '3 minutes' "
            "FROM pg_authid WHERE rolname = %s",
            (row["login"],),
        ).fetchone()
    assert attributes == (True, False, False, False, False, False, False)
    assert secret == (True, True)  # a fresh password, sent hashed, valid for minutes only
    assert memberships == (0,)
    assert privileges == [("SELECT",)]
    assert schemas == [(_schema_of(pg_url),)]


def test_each_store_has_its_own_reader_that_cannot_read_another_store(
    cli: Any, pg_url: str, history: Any
) -> None:
    from tests.conftest import make_pg_schema_url

    history.fill(pg_url)
    make_reader(pg_url)
    other = f"wgtest_{uuid.uuid4().hex[:12]}"
    with _pg_admin() as admin:
        admin.execute(f"CREATE SCHEMA {other}")
    try:
        history.fill(make_pg_schema_url(other))
        make_reader(make_pg_schema_url(other))
        assert cli("sql", "SELECT 1", "--url", make_pg_schema_url(other)).exit_code == 0
        result = cli("sql", f"SELECT count(*) FROM {other}.wg_events", "--url", pg_url)
        assert result.exit_code == 1
        assert "permission denied" in result.stderr
    finally:
        with _pg_admin() as admin:
            admin.execute(f"DROP SCHEMA {other} CASCADE")
            role = reader_role_name(_DATABASE, other)
            admin.execute(f"DROP OWNED BY {role}")
            admin.execute(f"DROP ROLE {role}")


def test_concurrent_queries_on_one_store_each_log_in_as_the_reader(
    pg_url: str, history: Any
) -> None:
    from concurrent.futures import ThreadPoolExecutor

    from wgstore.cli.sql import run_query

    history.fill(pg_url)
    make_reader(pg_url)

    def count(_: int) -> Any:
        result = run_query(pg_url, "SELECT session_user, count(*) FROM wg_events")
        (row,) = result.rows
        return row

    # no more at once than the role's CONNECTION LIMIT (a fifth is refused: test_sql_hardening)
    with ThreadPoolExecutor(max_workers=READER_CONNECTION_LIMIT) as pool:
        rows = list(pool.map(count, range(12)))
    assert {row[0] for row in rows} == {reader_role_name(_DATABASE, _schema_of(pg_url))}
    assert {row[1] for row in rows} == {28}


def test_a_query_that_turns_its_own_statement_timeout_off_is_still_stopped(
    cli: Any, pg_url: str, history: Any
) -> None:
    history.fill(pg_url)
    make_reader(pg_url)
    started = time.monotonic()
    result = cli(
        "sql",
        "SELECT set_config('statement_timeout', '0', false), pg_sleep(120)",
        "--url",
        pg_url,
        "--timeout",
        "500ms",
    )
    assert result.exit_code == 1
    assert "--timeout" in result.stderr
    assert time.monotonic() - started < 60  # not the query's 120 s: the 500 ms timeout stopped it


def test_db_reader_prepares_the_role_and_says_what_it_may_read(
    cli: Any, pg_url: str, history: Any
) -> None:
    history.fill(pg_url)
    result = cli("db", "reader", "--url", pg_url)
    assert result.exit_code == 0, result.stderr
    assert reader_role_name(_DATABASE, _schema_of(pg_url)) in result.stdout
    assert "wg_events" in result.stdout


def test_db_reader_on_sqlite_says_it_is_for_postgres(cli: Any, recorded_sqlite: Any) -> None:
    result = cli("db", "reader", "--url", recorded_sqlite.url)
    assert result.exit_code == 1
    assert "PostgreSQL" in result.stderr


def test_a_reader_url_that_could_write_is_refused_before_the_query_runs(
    cli: Any, pg_url: str, history: Any, login_role: Callable[[str], str]
) -> None:
    history.fill(pg_url)
    writer = login_role("")
    with _pg_admin() as admin:
        schema = _schema_of(pg_url)
        admin.execute(f"GRANT USAGE ON SCHEMA {schema} TO {writer}")
        admin.execute(f"GRANT SELECT, INSERT ON ALL TABLES IN SCHEMA {schema} TO {writer}")
    for reader_url, why in ((pg_url, "superuser"), (_url_as(pg_url, writer), "write")):
        result = cli(
            "sql",
            "DELETE FROM wg_subscriptions",
            "--url",
            pg_url,
            "--reader-url",
            reader_url,
        )
        assert result.exit_code == 1
        assert why in result.stderr
        assert "refused to run the query" in result.stderr
        assert len(result.stderr.strip().splitlines()) == 1


def test_a_reader_url_that_can_only_read_is_used_as_given(
    cli: Any, pg_url: str, history: Any, login_role: Callable[[str], str]
) -> None:
    history.fill(pg_url)
    # `db reader` takes the dangerous functions away from PUBLIC in the database; a reporting
    # login made by hand needs its temp_file_limit (docs/sql.md).
    assert cli("db", "reader", "--url", pg_url).exit_code == 0
    reader = login_role("NOINHERIT")
    with _pg_admin() as admin:
        schema = _schema_of(pg_url)
        admin.execute(f"GRANT USAGE ON SCHEMA {schema} TO {reader}")
        admin.execute(f"GRANT SELECT ON ALL TABLES IN SCHEMA {schema} TO {reader}")
        admin.execute(f"ALTER ROLE {reader} SET temp_file_limit = '1GB'")
    result = cli(
        "sql",
        "SELECT session_user AS login, count(*) AS n FROM wg_events",
        "--url",
        "postgresql+psycopg://nobody@127.0.0.1:1/none",
        "--reader-url",
        _url_as(pg_url, reader),
        "--json",
    )
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout)["login"] == reader


def test_a_url_user_that_cannot_prepare_the_reader_is_refused_in_one_line(
    cli: Any, pg_url: str, history: Any, login_role: Callable[[str], str]
) -> None:
    history.fill(pg_url)
    make_reader(pg_url)  # made: this user may still not ready it (nor read the store)
    nobody = login_role("NOCREATEROLE")
    with _pg_admin() as admin:
        admin.execute(f"GRANT USAGE ON SCHEMA {_schema_of(pg_url)} TO {nobody}")
    result = cli("sql", "SELECT 1", "--url", _url_as(pg_url, nobody))
    assert result.exit_code == 1
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert "wgstore db reader" in result.stderr
    assert "--reader-url" in result.stderr


def test_an_owner_that_cannot_create_roles_reads_through_a_reader_a_superuser_made(
    cli: Any, pg_url: str, login_role: Callable[[str], str], history: Any
) -> None:
    from tests.conftest import make_pg_schema_url

    owner = login_role("NOCREATEROLE")
    schema = f"wgtest_{uuid.uuid4().hex[:12]}"
    with _pg_admin() as admin:
        admin.execute(f"CREATE SCHEMA {schema} AUTHORIZATION {owner}")
    owner_url = _url_as(make_pg_schema_url(schema), owner)
    try:
        history.fill(owner_url)
        assert cli("db", "reader", "--url", make_pg_schema_url(schema)).exit_code == 0
        result = cli("sql", "SELECT count(*) AS n FROM wg_events", "--url", owner_url, "--json")
        assert result.exit_code == 0, result.stderr
        assert json.loads(result.stdout)["n"] > 0
    finally:
        with _pg_admin() as admin:
            admin.execute(f"DROP SCHEMA {schema} CASCADE")
            role = reader_role_name(_DATABASE, schema)
            admin.execute(f"DROP OWNED BY {role}")
            admin.execute(f"DROP ROLE {role}")


# ---------------------------------------------------------------------- bad input: one line


@pytest.mark.parametrize("timeout", ["999999999w", "100000000000000000000d", "25h", "0s", "soon"])
def test_a_timeout_out_of_range_is_one_line_and_exit_2(
    cli: Any, recorded_sqlite: Any, timeout: str
) -> None:
    result = cli("sql", "SELECT 1", "--url", recorded_sqlite.url, "--timeout", timeout)
    assert result.exit_code == 2
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize(
    "url",
    [
        "postgresql+psycopg://postgres:s3cret@127.0.0.1:1/test",
        "postgresql+psycopg://postgres:s3cret@127.0.0.1:5432/no_such_database_here",
        "postgresql+psycopg://no_such_user:s3cret@127.0.0.1:5432/test",
    ],
    ids=["nothing-listening", "no-such-database", "no-such-user"],
)
def test_a_postgres_connection_failure_is_one_masked_line(cli: Any, url: str) -> None:
    from tests.conftest import require_postgres

    require_postgres()
    result = cli("sql", "SELECT 1", "--url", url)
    assert result.exit_code == 1
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert "s3cret" not in result.stderr
    assert "***" in result.stderr


def test_a_folder_as_the_sqlite_path_is_one_line(cli: Any, tmp_path: Path) -> None:
    result = cli("sql", "SELECT 1", "--url", f"sqlite:///{tmp_path}")
    assert result.exit_code == 1
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert "folder" in result.stderr


def test_copy_to_stdout_is_refused_in_one_line(cli: Any, recorded: Any) -> None:
    result = cli("sql", "COPY wg_events TO STDOUT", "--url", recorded.url)
    assert result.exit_code == 1
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert result.stdout == ""


# ---------------------------------------------------------------------- read models behind


def test_sql_says_on_stderr_how_many_events_the_read_models_are_behind(
    cli: Any, recorded: Any
) -> None:
    head = _scalar(recorded.url, "SELECT count(*) FROM wg_events")
    result = cli(
        "sql", "SELECT count(*) AS n FROM wg_worker_groups", "--url", recorded.url, "--json"
    )
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout) == {"n": 0}  # stdout is only the rows
    assert f"read models are {head} events behind the log" in result.stderr
    with EventStore.open(recorded.url) as store:
        catch_up_read_models(store)
    caught_up = cli("sql", "SELECT count(*) AS n FROM wg_worker_groups", "--url", recorded.url)
    assert caught_up.exit_code == 0
    assert "behind" not in caught_up.stderr


def test_sql_on_a_postgres_schema_without_wgstore_tables_says_to_upgrade(
    cli: Any, pg_url: str
) -> None:
    result = cli("sql", "SELECT 1", "--url", pg_url)
    assert result.exit_code == 1
    assert "wgstore db upgrade" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr


def test_a_reader_role_given_more_privileges_is_reset_before_the_next_query(
    cli: Any, pg_url: str, history: Any
) -> None:
    history.fill(pg_url)
    make_reader(pg_url)
    assert cli("sql", "SELECT 1", "--url", pg_url).exit_code == 0
    reader = reader_role_name(_DATABASE, _schema_of(pg_url))
    with _pg_admin() as admin:
        admin.execute(f"GRANT pg_execute_server_program, pg_write_all_data TO {reader}")
        admin.execute(f"GRANT INSERT, DELETE ON {_schema_of(pg_url)}.wg_subscriptions TO {reader}")
        admin.execute(f"GRANT CREATE ON SCHEMA {_schema_of(pg_url)} TO {reader}")
        admin.execute(f"ALTER ROLE {reader} CREATEDB INHERIT")
    result = cli(
        "sql",
        "SELECT pg_has_role('pg_write_all_data', 'MEMBER') AS writes_all, "
        "has_table_privilege('wg_subscriptions', 'INSERT') AS inserts, "
        "(SELECT rolcreatedb FROM pg_roles WHERE rolname = current_user) AS creates_dbs",
        "--url",
        pg_url,
        "--json",
    )
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout) == {
        "writes_all": False,
        "inserts": False,
        "creates_dbs": False,
    }


def test_a_store_whose_tables_everyone_may_write_is_refused_rather_than_queried(
    cli: Any, pg_url: str, history: Any
) -> None:
    history.fill(pg_url)
    make_reader(pg_url)
    with _pg_admin() as admin:
        admin.execute(f"GRANT INSERT ON {_schema_of(pg_url)}.wg_subscriptions TO PUBLIC")
    result = cli("sql", "SELECT 1", "--url", pg_url)
    assert result.exit_code == 1
    assert "may write wgstore tables" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr


# ---------------------------------------------------------------------- what a query returns


def _many(url: str, rows: int, width: int) -> str:
    """A query of ``rows`` rows of ``width`` characters each, on the store's backend."""
    if url.startswith("sqlite"):
        return (
            f"WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < {rows}) "
            f"SELECT substr(hex(zeroblob({width})), 1, {width}) AS x FROM n"
        )
    return f"SELECT repeat('x', {width}) AS x FROM generate_series(1, {rows})"


def test_a_result_past_the_byte_bound_is_refused_and_the_query_stopped(recorded: Any) -> None:
    """Issue 41, item 7: the whole result was read into this process (three 600 MB values held
    ~1.8 GB); now rows arrive one at a time, and reading stops at the bound: 10 GB asked, 1 MB
    read, the rest never sent."""
    from wgstore.events.sql_reader import ResultTooLargeError, run_read_only

    started = time.monotonic()
    with pytest.raises(ResultTooLargeError, match=r"more than 1 MB \(past row 1048\)"):
        run_read_only(recorded.url, _many(recorded.url, 10_000_000, 1000), max_bytes=2**20)
    assert time.monotonic() - started < 50  # stopped, not read to the end (or the 60 s timeout)
    if recorded.url.startswith("postgresql"):
        with _pg_admin() as admin:

            def still_running() -> Any:
                return admin.execute(
                    "SELECT count(*) FROM pg_stat_activity WHERE query LIKE %s AND pid <> "
                    "pg_backend_pid()",
                    ("%generate_series(1, 10000000)%",),
                ).fetchone()[0]

            deadline = time.monotonic() + 30
            while still_running() and time.monotonic() < deadline:
                time.sleep(0.05)  # polling a condition with a deadline
            assert still_running() == 0, "the query went on after the bound was reached"


def test_rows_past_the_row_bound_are_refused_and_limit_reads_only_what_it_shows(
    cli: Any, recorded: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from wgstore.events import sql_reader

    monkeypatch.setattr(sql_reader, "MAX_RESULT_ROWS", 100)
    query = _many(recorded.url, 1000, 3)
    everything = cli("sql", query, "--url", recorded.url, "--limit", "0", "--json")
    assert everything.exit_code == 1, everything.stdout
    assert everything.stdout == ""  # nothing printed of a result that is refused
    assert len(everything.stderr.strip().splitlines()) == 1, everything.stderr
    assert "more than 100 rows" in everything.stderr
    shown = cli("sql", query, "--url", recorded.url, "--limit", "5", "--json")
    assert shown.exit_code == 0, shown.stderr
    assert len(shown.stdout.splitlines()) == 5
    assert "showing the first 5 rows" in shown.stderr


def test_a_result_of_no_rows_keeps_its_column_names(cli: Any, recorded: Any) -> None:
    from wgstore.events.sql_reader import run_read_only

    result = run_read_only(recorded.url, "SELECT 1 AS a, 'x' AS b WHERE 1 = 0")
    assert result.columns == ["a", "b"]
    assert list(result.rows) == []
    shown = cli("sql", "SELECT stream_id FROM wg_events WHERE 1 = 0", "--url", recorded.url)
    assert shown.exit_code == 0, shown.stderr
    assert "stream_id" in shown.stdout
    assert "0 rows" in shown.stderr
