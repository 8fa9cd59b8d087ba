"""``wgstore sql`` on PostgreSQL cannot hurt the server or other readers (issue 21, items 8-10,
14), and changes nothing on it: ``wgstore db reader`` is the one step that does, and its
``--drop`` gives back what it took (issue 41, item 7).

Each test runs in a database of its own, made for it and dropped afterwards (``scratch``): what
``wgstore db reader`` changes is the database's privileges of PUBLIC, and a fresh database
starts with PostgreSQL's defaults, so each test sees the defect it is about (the functions every
role may run, ``CREATE`` on ``public`` for PUBLIC) and not what an earlier test fixed.
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
import sqlalchemy as sa

from tests.cli.conftest import fill
from tests.conftest import PG_URL, require_postgres
from wgstore.events import reader_role, sql_reader
from wgstore.events.sql_reader import (
    READER_CONNECTION_LIMIT,
    ReaderUnavailableError,
    SqlQueryError,
    SqlRefusedError,
    drop_reader,
    prepare_reader,
    reader_role_name,
    run_read_only,
)

_DEADLINE_S = 60.0  # generous under load; every wait below is for a condition


def _conninfo(database: str | None = None) -> str:
    url = sa.engine.make_url(PG_URL)
    if database is not None:
        url = url.set(database=database)
    return url.set(drivername="postgresql").render_as_string(hide_password=False)


def _admin(database: str | None = None) -> Any:
    import psycopg

    return psycopg.connect(_conninfo(database), autocommit=True)


@dataclass(frozen=True)
class Scratch:
    """A database made for one test: its name, the store URL in its ``public`` schema, the
    reader role ``wgstore sql`` makes for that store."""

    database: str
    url: str
    reader: str

    def admin(self) -> Any:
        return _admin(self.database)


@contextlib.contextmanager
def _scratch_database() -> Iterator[Scratch]:
    require_postgres()
    database = f"wgsqlh_{uuid.uuid4().hex[:12]}"
    with _admin() as admin:
        admin.execute(f"CREATE DATABASE {database}")
    url = sa.engine.make_url(PG_URL).set(database=database).render_as_string(hide_password=False)
    reader = reader_role_name(database, "public")
    try:
        yield Scratch(database, url, reader)
    finally:
        with _admin(database) as admin:
            if admin.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (reader,)).fetchone():
                admin.execute(f"DROP OWNED BY {reader}")
        with _admin() as admin:
            admin.execute(f"DROP DATABASE {database} WITH (FORCE)")
            admin.execute(f"DROP ROLE IF EXISTS {reader}")


@pytest.fixture
def scratch() -> Iterator[Scratch]:
    """A fresh database with PostgreSQL's default privileges, dropped with its reader role."""
    with _scratch_database() as made:
        yield made


@pytest.fixture(scope="module")
def filled_scratch() -> Iterator[Scratch]:
    """One such database with a store in it and its reader, for the tests that only query it."""
    with _scratch_database() as made:
        fill(made.url)
        prepare_reader(made.url)
        yield made


def _ready(scratch: Scratch) -> None:
    """A store in the scratch database, and its reader role (`wgstore db reader`)."""
    fill(scratch.url)
    prepare_reader(scratch.url)


def _one(url: str, query: str, timeout_s: float = 30.0) -> Any:
    result = run_read_only(url, query, timeout_s=timeout_s)
    rows = list(result.rows)
    assert len(rows) == 1, rows
    return rows[0]


def _wait_for(condition: Any, what: str) -> Any:
    deadline = time.monotonic() + _DEADLINE_S
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.05)  # polling a condition with a deadline
    raise AssertionError(f"timed out waiting for {what}")


# ---------------------------------------------------------------------- item 9: functions


@pytest.mark.parametrize(
    "query",
    [
        # 187 MB of WAL in 1.5 s, surviving the rollback
        "SELECT pg_logical_emit_message(false, 'wg', repeat('x', 1000000))",
        "SELECT pg_logical_emit_message(true, 'wg', 'x'::bytea)",
        # each subtransaction that creates a large object burns a transaction id
        "DO $$ BEGIN FOR i IN 1..100 LOOP BEGIN PERFORM lo_create(0); "
        "RAISE EXCEPTION 'again'; EXCEPTION WHEN raise_exception THEN NULL; END; END LOOP; END $$",
        "SELECT lo_creat(-1)",
        "SELECT lo_from_bytea(0, 'x')",
        # locks other sessions (and every other `wgstore sql`) wait on; fills the lock table
        "SELECT pg_advisory_lock(1)",
        "SELECT pg_try_advisory_xact_lock_shared(1, 2)",
        "SELECT pg_advisory_xact_lock(hashtext(current_user))",
        "SELECT pg_cancel_backend(pg_backend_pid())",
    ],
)
def test_the_reader_may_not_run_functions_that_write_lock_or_signal(
    filled_scratch: Scratch, query: str
) -> None:
    scratch = filled_scratch
    with pytest.raises(SqlRefusedError, match="permission denied for function"):
        list(run_read_only(scratch.url, query).rows)
    # what the reader is still given: its reads, and functions that touch only its session
    assert _one(scratch.url, "SELECT count(*) > 0, pg_notify('wg', 'x') IS NULL FROM wg_events")
    with scratch.admin() as admin:
        assert admin.execute("SELECT count(*) FROM pg_largeobject_metadata").fetchone() == (0,)


def test_the_database_changes_are_said_and_other_roles_keep_what_they_need(
    scratch: Scratch,
) -> None:
    fill(scratch.url)
    role = prepare_reader(scratch.url)
    assert any("revoked EXECUTE from PUBLIC" in change for change in role.changes), role.changes
    assert prepare_reader(scratch.url).changes == ()  # nothing left to change: nothing said
    owner = f"wgtest_{uuid.uuid4().hex[:10]}"
    with scratch.admin() as admin:
        admin.execute(f"CREATE ROLE {owner} NOLOGIN")
        try:
            admin.execute("ALTER TABLE wg_events OWNER TO " + owner)
            prepare_reader(scratch.url)
            keeps = admin.execute(
                "SELECT has_function_privilege(%s, 'pg_advisory_xact_lock(bigint)', 'EXECUTE'), "
                "has_function_privilege('pg_signal_backend', "
                "'pg_terminate_backend(integer, bigint)', 'EXECUTE'), "
                "has_function_privilege(%s, 'pg_advisory_xact_lock(bigint)', 'EXECUTE')",
                (owner, scratch.reader),
            ).fetchone()
            assert keeps == (True, True, False)
        finally:
            admin.execute("ALTER TABLE wg_events OWNER TO CURRENT_USER")
            admin.execute(f"DROP OWNED BY {owner}")
            admin.execute(f"DROP ROLE {owner}")


def test_a_url_user_that_cannot_take_the_functions_away_is_told_to_run_db_reader(
    scratch: Scratch, cli: Any
) -> None:
    fill(scratch.url)
    maker = f"wgtest_{uuid.uuid4().hex[:10]}"
    with scratch.admin() as admin:
        admin.execute(f"CREATE ROLE {maker} LOGIN CREATEROLE")
        admin.execute(f"ALTER TABLE wg_events OWNER TO {maker}")
        admin.execute(f"GRANT ALL ON ALL TABLES IN SCHEMA public TO {maker}")
    try:
        as_maker = sa.engine.make_url(scratch.url).set(username=maker)
        made_by = as_maker.render_as_string(hide_password=False)
        result = cli("db", "reader", "--url", made_by)
        assert result.exit_code == 1
        assert len(result.stderr.strip().splitlines()) == 1, result.stderr
        assert "wgstore db reader" in result.stderr
        assert "superuser" in result.stderr
        reader = cli("db", "reader", "--url", scratch.url)
        assert reader.exit_code == 0, reader.stderr
        assert "changed: revoked EXECUTE from PUBLIC" in reader.stdout
    finally:
        with scratch.admin() as admin:
            admin.execute("ALTER TABLE wg_events OWNER TO CURRENT_USER")
            admin.execute(f"DROP OWNED BY {maker}")
        with _admin() as admin:
            admin.execute(f"DROP ROLE {maker}")


# ---------------------------------------------------------------------- item 9: settings


def test_the_reader_role_has_the_settings_of_a_reporting_role(scratch: Scratch) -> None:
    _ready(scratch)
    row = _one(
        scratch.url,
        "SELECT current_setting('temp_file_limit'), "
        "current_setting('idle_in_transaction_session_timeout'), "
        "current_setting('lock_timeout'), "
        "(SELECT setconfig FROM pg_db_role_setting WHERE setrole = "
        "(SELECT oid FROM pg_roles WHERE rolname = current_user))",
    )
    assert row[0] == "1GB"
    assert row[1] == "10s"
    assert row[2] == "10s"
    assert "default_transaction_read_only=on" in row[3]
    assert "statement_timeout=3600000" in row[3]
    assert "work_mem=32MB" in row[3]
    with scratch.admin() as admin:
        limit = admin.execute(
            "SELECT rolconnlimit FROM pg_roles WHERE rolname = %s", (scratch.reader,)
        ).fetchone()
    assert limit == (READER_CONNECTION_LIMIT,)


def test_temp_files_past_the_readers_limit_stop_the_query(
    scratch: Scratch, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A limit the test can reach cheaply; the role gets whatever READER_SETTINGS says.
    monkeypatch.setitem(sql_reader.READER_SETTINGS, "temp_file_limit", "1024")
    _ready(scratch)
    with pytest.raises(SqlQueryError, match="temporary files"):
        list(
            run_read_only(
                scratch.url,
                "SELECT count(*) FROM (SELECT g FROM generate_series(1, 2000000) AS g "
                "ORDER BY g DESC OFFSET 1) AS sorted",
            ).rows
        )


def test_the_rows_are_read_after_the_transaction_ended(scratch: Scratch) -> None:
    """A caller printing slowly (a pager) holds no snapshot and no lock on the store."""
    _ready(scratch)
    result = run_read_only(
        scratch.url, "SELECT pg_backend_pid(), g FROM generate_series(1, 1200) AS g"
    )
    first = next(result.rows)
    with scratch.admin() as admin:
        state = admin.execute(
            "SELECT state, backend_xmin IS NULL FROM pg_stat_activity WHERE pid = %s", (first[0],)
        ).fetchone()
    assert state in (None, ("idle", True))  # the session has ended (or is leaving, idle)
    assert len(list(result.rows)) == 1199


@pytest.mark.parametrize("timeout", ["2h", "61m"])
def test_the_timeout_is_at_most_an_hour(cli: Any, recorded_sqlite: Any, timeout: str) -> None:
    result = cli("sql", "SELECT 1", "--url", recorded_sqlite.url, "--timeout", timeout)
    assert result.exit_code == 2
    assert "at most 1h" in result.stderr
    assert cli("sql", "SELECT 1", "--url", recorded_sqlite.url, "--timeout", "1h").exit_code == 0


# ---------------------------------------------------------------------- item 8


def test_one_reader_session_cannot_end_or_cancel_another(scratch: Scratch) -> None:
    _ready(scratch)
    outcome: dict[str, Any] = {}

    def sleeper() -> None:
        try:
            outcome["rows"] = list(
                run_read_only(scratch.url, "SELECT 'slept' FROM pg_sleep(60)", timeout_s=90).rows
            )
        except Exception as error:  # noqa: BLE001 - recorded and asserted below
            outcome["error"] = error

    thread = threading.Thread(target=sleeper, daemon=True)
    thread.start()
    with scratch.admin() as admin:

        def sleeping_pid() -> Any:
            row = admin.execute(
                "SELECT pid FROM pg_stat_activity WHERE usename = %s AND query LIKE %s",
                (scratch.reader, "%pg_sleep(60)%"),
            ).fetchone()
            return row and row[0]

        pid = _wait_for(sleeping_pid, "the first reader's query")
        for function in ("pg_terminate_backend", "pg_cancel_backend"):
            with pytest.raises(SqlRefusedError, match="permission denied"):
                list(run_read_only(scratch.url, f"SELECT {function}({pid})").rows)
        alive = admin.execute(
            "SELECT state FROM pg_stat_activity WHERE pid = %s", (pid,)
        ).fetchone()
        assert alive == ("active",)
        admin.execute("SELECT pg_cancel_backend(%s)", (pid,))  # end the test sooner
    thread.join(_DEADLINE_S)
    assert not thread.is_alive()
    assert "rows" not in outcome  # it was cancelled by the admin, not finished


def test_preparing_the_reader_gives_up_soon_when_its_lock_is_held(
    scratch: Scratch, monkeypatch: pytest.MonkeyPatch
) -> None:
    _ready(scratch)
    monkeypatch.setattr(reader_role, "_PREPARE_TIMEOUT_S", 1.0)
    outcome: dict[str, Any] = {}

    def query() -> None:
        try:
            list(run_read_only(scratch.url, "SELECT 1", timeout_s=3).rows)
            outcome["ran"] = True
        except Exception as error:  # noqa: BLE001 - asserted below
            outcome["error"] = error

    with scratch.admin() as holder:  # what a reader's query could do before item 8
        holder.execute("SELECT pg_advisory_lock(hashtext(%s))", (scratch.reader,))
        thread = threading.Thread(target=query, daemon=True)
        thread.start()
        # bounded by the preparation's own timeout (1 s here), not by the holder
        thread.join(30)
        finished = not thread.is_alive()
    thread.join(_DEADLINE_S)
    assert finished, "preparing the reader waited for the lock as long as it was held"
    assert isinstance(outcome.get("error"), ReaderUnavailableError), outcome
    assert "waited 1 s for a lock" in str(outcome["error"])
    list(run_read_only(scratch.url, "SELECT 1").rows)  # and works once the lock is gone


def test_readers_of_stores_in_different_schemas_are_prepared_at_once(scratch: Scratch) -> None:
    """Preparing a reader grants on the database and revokes on its built-in functions: rows
    every reader of the database shares. Before the preparers of a database were serialized,
    two at once (two `wgstore serve` starting) failed with "tuple concurrently updated"."""
    schemas = [f"wgs_{uuid.uuid4().hex[:8]}" for _ in range(4)]
    base = sa.engine.make_url(scratch.url).render_as_string(hide_password=False)
    urls = [f"{base}?options=-csearch_path%3D{schema}" for schema in schemas]
    with scratch.admin() as admin:
        for schema in schemas:
            admin.execute(f"CREATE SCHEMA {schema}")
    for url in urls:
        fill(url)
    start = threading.Barrier(len(urls))
    outcomes: dict[str, Any] = {}

    def prepare(url: str) -> None:
        start.wait(_DEADLINE_S)
        try:
            outcomes[url] = sql_reader.prepare_reader(url)
        except Exception as error:  # noqa: BLE001 - asserted below
            outcomes[url] = error

    threads = [threading.Thread(target=prepare, args=(url,), daemon=True) for url in urls]
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(_DEADLINE_S)
        assert all(not thread.is_alive() for thread in threads), "a preparation never ended"
        failed = {url: error for url, error in outcomes.items() if isinstance(error, Exception)}
        assert not failed, failed
        assert sorted(role.schema for role in outcomes.values()) == sorted(schemas)
    finally:
        with scratch.admin() as admin:
            for schema in schemas:
                role = reader_role_name(scratch.database, schema)
                if admin.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (role,)).fetchone():
                    admin.execute(f"DROP OWNED BY {role}")
                    admin.execute(f"DROP ROLE {role}")


# ---------------------------------------------------------------------- item 10


def test_a_public_schema_everyone_may_create_in_is_fixed_by_db_reader(
    scratch: Scratch, cli: Any
) -> None:
    fill(scratch.url)
    with scratch.admin() as admin:  # PostgreSQL 14 and older: the default
        admin.execute("GRANT CREATE ON SCHEMA public TO PUBLIC")
    reader = cli("db", "reader", "--url", scratch.url)
    assert reader.exit_code == 0, reader.stderr
    assert "revoked CREATE on schema public from PUBLIC" in reader.stdout
    result = cli(
        "sql",
        "SELECT has_schema_privilege('public', 'CREATE') AS creates",
        "--url",
        scratch.url,
        "--json",
    )
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout) == {"creates": False}


def test_wgstore_sql_refuses_a_public_schema_everyone_may_create_in_and_changes_nothing(
    scratch: Scratch, cli: Any
) -> None:
    _ready(scratch)
    with scratch.admin() as admin:
        admin.execute("GRANT CREATE ON SCHEMA public TO PUBLIC")
    result = cli("sql", "SELECT count(*) AS n FROM wg_events", "--url", scratch.url, "--json")
    assert result.exit_code == 1, result.stdout
    assert "may create objects in the store's schema" in result.stderr
    assert "wgstore db reader" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    with scratch.admin() as admin:
        (creates,) = admin.execute(
            "SELECT has_schema_privilege('public', 'public', 'CREATE')"
        ).fetchone()
    assert creates  # wgstore sql took nothing from PUBLIC: `wgstore db reader` does


# ---------------------------------------------------------------------- item 14


@pytest.mark.parametrize("query", ["SELECT $1", "SELECT %s"])
def test_a_parameter_placeholder_is_an_sql_error_not_a_lost_connection(
    cli: Any, scratch: Scratch, query: str
) -> None:
    _ready(scratch)
    result = cli("sql", query, "--url", scratch.url)
    assert result.exit_code == 1
    assert "connection was lost" not in result.stderr
    assert "write the values into the query" in result.stderr or "SQL error" in result.stderr


# ---------------------------------------------------------------------- issue 41, item 7


def _public_may_run(scratch: Scratch) -> set[str]:
    """The functions a reader must not run that PUBLIC may run in the scratch database."""
    with scratch.admin() as admin:
        rows = admin.execute(
            reader_role.DANGEROUS_FUNCTIONS_SQL,
            {"names": list(reader_role.DANGEROUS_FUNCTIONS), "role": "public"},
        ).fetchall()
    return {str(signature) for signature, _ in rows}


def _role_exists(name: str) -> bool:
    with _admin() as admin:
        return (
            admin.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (name,)).fetchone()
            is not None
        )


def _explicit_grants_to(scratch: Scratch, grantee: str) -> int:
    with scratch.admin() as admin:
        (count,) = admin.execute(
            "SELECT count(*) FROM pg_proc p, aclexplode(p.proacl) a "
            "WHERE a.grantee = to_regrole(%s)",
            (grantee,),
        ).fetchone()
    return int(count)


def test_wgstore_sql_and_serve_change_nothing_on_the_server_and_say_how_to_make_the_reader(
    scratch: Scratch, cli: Any
) -> None:
    """`wgstore sql` revoked EXECUTE on 28 functions from PUBLIC and made a cluster-wide LOGIN
    role, by itself; `wgstore serve` (as_reader_session) likewise."""
    fill(scratch.url)
    public = _public_may_run(scratch)
    assert len(public) >= 28  # a fresh database: PostgreSQL's defaults
    result = cli("sql", "SELECT 1", "--url", scratch.url)
    assert result.exit_code == 1, result.stdout
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert "no read-only role for this store" in result.stderr
    assert "wgstore db reader --url URL" in result.stderr
    with pytest.raises(ReaderUnavailableError, match="wgstore db reader"):
        sql_reader.as_reader_session(scratch.url)
    assert not _role_exists(scratch.reader)
    assert _public_may_run(scratch) == public


def test_db_reader_drop_removes_the_role_and_gives_back_what_it_took(
    scratch: Scratch, cli: Any
) -> None:
    fill(scratch.url)
    public = _public_may_run(scratch)
    made = cli("db", "reader", "--url", scratch.url)
    assert made.exit_code == 0, made.stderr
    assert _role_exists(scratch.reader)
    assert _public_may_run(scratch) == set()
    assert _explicit_grants_to(scratch, "pg_signal_backend") == 2
    assert cli("sql", "SELECT 1", "--url", scratch.url).exit_code == 0
    dropped = cli("db", "reader", "--drop", "--url", scratch.url)
    assert dropped.exit_code == 0, dropped.stderr
    assert f"dropped {scratch.reader}" in dropped.stdout
    assert f"gave EXECUTE back to PUBLIC on {len(public)} functions" in dropped.stdout
    assert not _role_exists(scratch.reader)
    assert _public_may_run(scratch) == public
    assert _explicit_grants_to(scratch, "pg_signal_backend") == 0
    after = cli("sql", "SELECT 1", "--url", scratch.url)
    assert after.exit_code == 1 and "wgstore db reader" in after.stderr
    again = cli("db", "reader", "--drop", "--url", scratch.url)
    assert again.exit_code == 0 and "nothing to drop" in again.stdout


def test_drop_leaves_what_another_reader_of_the_database_needs_until_the_last_goes(
    scratch: Scratch,
) -> None:
    schemas = [f"wgs_{uuid.uuid4().hex[:8]}" for _ in range(2)]
    base = sa.engine.make_url(scratch.url).render_as_string(hide_password=False)
    urls = [f"{base}?options=-csearch_path%3D{schema}" for schema in schemas]
    with scratch.admin() as admin:
        for schema in schemas:
            admin.execute(f"CREATE SCHEMA {schema}")
    for url in urls:
        fill(url)
    public = _public_may_run(scratch)
    try:
        for url in urls:
            prepare_reader(url)
        first = drop_reader(urls[0])
        assert first.existed and any("still needs it" in c for c in first.changes), first
        assert _public_may_run(scratch) == set()  # the second reader is still safe
        assert _one(urls[1], "SELECT count(*) > 0 FROM wg_events") == (True,)
        last = drop_reader(urls[1])
        assert any("gave EXECUTE back to PUBLIC" in c for c in last.changes), last
        assert _public_may_run(scratch) == public
    finally:
        for schema in schemas:
            role = reader_role_name(scratch.database, schema)
            if _role_exists(role):
                with scratch.admin() as admin:
                    admin.execute(f"DROP OWNED BY {role}")
                    admin.execute(f"DROP ROLE {role}")


def test_a_forged_record_cannot_make_drop_give_public_what_it_never_had(scratch: Scratch) -> None:
    """The record is the role's comment: text that whoever may alter the role could edit.
    Drop gives PUBLIC only what PostgreSQL's own defaults give it, and runs no text of it."""
    _ready(scratch)
    with scratch.admin() as admin:
        (comment,) = admin.execute(
            "SELECT shobj_description(oid, 'pg_authid') FROM pg_roles WHERE rolname = %s",
            (scratch.reader,),
        ).fetchone()
        sentence, data = comment.split("\n", 1)
        record = json.loads(data)
        record["undo"]["public_execute"] += [
            "lo_import(text)",  # server files: PUBLIC never had it
            "pg_read_file(text)",
            "lo_create(oid) TO PUBLIC; DROP TABLE wg_events; --",
        ]
        record["undo"]["granted_execute"] += [["x; DROP TABLE wg_events", "lo_create(oid)"]]
        forged = sentence + "\n" + json.dumps(record)
        admin.execute(f"COMMENT ON ROLE {scratch.reader} IS '{forged}'")
    dropped = drop_reader(scratch.url)
    assert dropped.existed
    with scratch.admin() as admin:
        row = admin.execute(
            "SELECT has_function_privilege('public', 'lo_import(text)', 'EXECUTE'), "
            "has_function_privilege('public', 'pg_read_file(text)', 'EXECUTE'), "
            "has_function_privilege('public', 'lo_create(oid)', 'EXECUTE'), "
            "to_regclass('wg_events') IS NOT NULL"
        ).fetchone()
    assert row == (False, False, True, True)


def test_a_query_past_the_roles_connection_limit_is_refused_in_one_line(
    filled_scratch: Scratch,
) -> None:
    scratch = filled_scratch
    errors: list[BaseException] = []

    def sleep() -> None:
        try:
            list(run_read_only(scratch.url, "SELECT pg_sleep(60)", timeout_s=90).rows)
        except SqlQueryError:
            pass  # cancelled below
        except BaseException as error:  # noqa: BLE001 - asserted below
            errors.append(error)

    sleepers = [threading.Thread(target=sleep, daemon=True) for _ in range(READER_CONNECTION_LIMIT)]
    for thread in sleepers:
        thread.start()
    with scratch.admin() as admin:

        def sleeping() -> list[int]:
            rows = admin.execute(
                "SELECT pid FROM pg_stat_activity WHERE usename = %s AND query LIKE %s",
                (scratch.reader, "%pg_sleep(60)%"),
            ).fetchall()
            return [pid for (pid,) in rows] if len(rows) == READER_CONNECTION_LIMIT else []

        pids = _wait_for(sleeping, f"{READER_CONNECTION_LIMIT} sleeping queries")
        try:
            with pytest.raises(ReaderUnavailableError, match="CONNECTION LIMIT") as refused:
                run_read_only(scratch.url, "SELECT 1")
            assert f"{READER_CONNECTION_LIMIT} queries of wgstore sql" in str(refused.value)
        finally:
            for pid in pids:
                admin.execute("SELECT pg_cancel_backend(%s)", (pid,))
    for thread in sleepers:
        thread.join(_DEADLINE_S)
    assert not errors, errors
    assert _one(scratch.url, "SELECT 1") == (1,)  # the limit counts sessions, not queries
