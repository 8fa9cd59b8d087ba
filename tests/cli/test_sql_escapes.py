"""``wgstore sql`` cannot write, read server files, run programs or signal other sessions.

Every escape of issue 9 §1, run through the command on both backends. On PostgreSQL the query
runs as a login role that cannot do any of it (``wgstore.events.sql_reader``), so a role switch
inside the query (``set_config('role', ...)``) gets nowhere. Each case names the effect it would
have, and the test checks that effect is absent afterwards, not only the exit code.

dblink: PostgreSQL's contrib extension. The tests create it (as the admin) in ``public`` when the
server has it; when the server does not ship it the Postgres cases FAIL with that reason (they are
never skipped), so a server without contrib is noticed.
"""

from __future__ import annotations

import secrets
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.cli.conftest import make_reader
from wgstore.events.engine import create_store_engine

_PREFIX = "SELECT set_config('role', '{admin}', true) AS become, "


@dataclass(frozen=True)
class Target:
    """What a test needs to aim an escape at one store, and to check its effect afterwards."""

    url: str
    backend: str
    admin: str
    schema: str
    dsn: str
    file: str
    pid: int
    bystander: Any = None
    oid: int = field(default_factory=lambda: secrets.randbelow(10**9) + 10**9)

    def bystander_alive(self) -> bool:
        if self.bystander is None:
            return True
        try:
            return self.bystander.execute("SELECT 1").fetchone() == (1,)
        except Exception:  # noqa: BLE001 - any failure means it was killed
            return False

    def sql(self, template: str) -> str:
        return template.format(
            admin=self.admin,
            schema=self.schema,
            dsn=self.dsn,
            file=self.file,
            pid=self.pid,
            oid=self.oid,
        )


def _pg_admin(url: str) -> Any:
    import psycopg

    engine = create_store_engine(url)
    raw = engine.raw_connection()
    params = raw.driver_connection.info.get_parameters()
    raw.close()
    engine.dispose()
    params.pop("options", None)
    return psycopg.connect(psycopg.conninfo.make_conninfo(**params), autocommit=True), params


def _ensure_dblink(connection: Any) -> None:
    import psycopg

    available = connection.execute(
        "SELECT 1 FROM pg_available_extensions WHERE name = 'dblink'"
    ).fetchone()
    if available is None:
        pytest.fail(
            "this PostgreSQL server does not ship the dblink extension (contrib), so the dblink "
            "escapes cannot be shown here; install postgresql-contrib to run them",
            pytrace=False,
        )
    for _ in range(5):  # another test may be creating it at the same moment
        try:
            connection.execute("CREATE EXTENSION IF NOT EXISTS dblink SCHEMA public")
            return
        except psycopg.errors.UniqueViolation:
            continue
        except psycopg.errors.DuplicateObject:
            return


@pytest.fixture
def target(recorded: Any, tmp_path: Path) -> Iterator[Target]:
    """The recorded store on each backend, with a bystander session on Postgres to aim at."""
    file = f"/tmp/wgstore-escape-{uuid.uuid4().hex}"
    if recorded.url.startswith("sqlite"):
        yield Target(recorded.url, "sqlite", "", "main", "", str(tmp_path / "escaped"), 0)
        return
    make_reader(recorded.url)  # `wgstore db reader`: the escapes are tried as its role
    admin, params = _pg_admin(recorded.url)
    bystander, _ = _pg_admin(recorded.url)
    try:
        _ensure_dblink(admin)
        schema = recorded.url.rsplit("search_path%3D", 1)[1]
        dsn = " ".join(f"{k}={v}" for k, v in params.items() if k in ("host", "port", "dbname"))
        dsn += f" user={params['user']} options=-csearch_path={schema}"
        pid = bystander.info.backend_pid
        yield Target(recorded.url, "postgres", params["user"], schema, dsn, file, pid, bystander)
    finally:
        bystander.close()
        admin.close()
        Path(file).unlink(missing_ok=True)


def _state(target: Target) -> tuple[Any, ...]:
    """Everything an escape could change: the log, the subscriptions, large objects."""
    engine = create_store_engine(target.url)
    try:
        with engine.connect() as connection:
            log = connection.exec_driver_sql(
                "SELECT count(*), max(position) FROM wg_events"
            ).fetchone()
            subscriptions = connection.exec_driver_sql(
                "SELECT name, checkpoint FROM wg_subscriptions ORDER BY name"
            ).fetchall()
            objects = (
                connection.exec_driver_sql("SELECT count(*) FROM pg_largeobject_metadata").scalar()
                if target.backend == "postgres"
                else 0
            )
            return (tuple(log or ()), tuple(map(tuple, subscriptions)), objects)
    finally:
        engine.dispose()


_FORGED = (
    "SELECT * FROM wg_append(''forged-stream'', -1, ARRAY[''"
    + str(uuid.UUID(int=7))
    + "'']::uuid[], ARRAY[''RunCreated''], ARRAY[1]::smallint[], "
    "ARRAY[''{{}}'']::jsonb[], ARRAY[''{{}}'']::jsonb[], ARRAY[NULL]::text[], true)"
)

# (id, PostgreSQL statement, SQLite statement). {admin} is the URL's user, {dsn} a libpq
# connection string to the same database as that user, {file} a fresh path on the server host,
# {pid} a bystander session. The SQLite versions are the nearest thing SQLite has, or the same
# text (which SQLite must refuse too).
ESCAPES = [
    pytest.param(
        _PREFIX + "current_user AS now_running_as",
        "PRAGMA query_only = OFF",
        id="set_config-role-back-to-the-admin",
    ),
    pytest.param(
        _PREFIX + "public.dblink_exec('{dsn}', 'INSERT INTO wg_subscriptions (name, checkpoint, "
        "updated_at) VALUES (''evil'', 0, now())')",
        "INSERT INTO wg_subscriptions (name, checkpoint, updated_at) "
        "VALUES ('evil', 0, CURRENT_TIMESTAMP)",
        id="dblink_exec-insert-into-wg_subscriptions",
    ),
    pytest.param(
        "SELECT public.dblink_exec('{dsn}', 'INSERT INTO wg_subscriptions (name, checkpoint, "
        "updated_at) VALUES (''evil'', 0, now())')",
        "SELECT 1 FROM wg_events; INSERT INTO wg_subscriptions (name, checkpoint, updated_at) "
        "VALUES ('evil', 0, CURRENT_TIMESTAMP)",
        id="dblink_exec-insert-without-a-role-switch",
    ),
    pytest.param(
        "SELECT t.* FROM (SELECT set_config('role', '{admin}', true) AS r) AS become, "
        "LATERAL public.dblink('{dsn}' || left(become.r, 0), '"
        + _FORGED
        + "') AS t(p bigint, v integer, r timestamptz, h text, e boolean)",
        "INSERT INTO wg_events SELECT * FROM wg_events LIMIT 1",
        id="dblink-forged-event-through-wg_append",
    ),
    pytest.param(
        _PREFIX + "public.dblink_exec('{dsn}', 'COPY (SELECT 1) TO PROGRAM ''touch {file}'' ')",
        "VACUUM INTO '{file}'",
        id="copy-to-program-through-dblink",
    ),
    pytest.param(
        _PREFIX + "query_to_xml('SELECT pg_read_file(''PG_VERSION'')', true, false, '')",
        "ATTACH DATABASE '{file}' AS escaped",
        id="query_to_xml-pg_read_file",
    ),
    pytest.param(
        "SELECT query_to_xml('SELECT pg_read_file(''PG_VERSION'')', true, false, '')",
        "SELECT load_extension('{file}')",
        id="query_to_xml-pg_read_file-without-a-role-switch",
    ),
    pytest.param(
        _PREFIX + "pg_terminate_backend({pid}) AS killed",
        "PRAGMA writable_schema = ON",
        id="pg_terminate_backend-of-another-session",
    ),
    pytest.param(
        "SELECT pg_terminate_backend({pid}) AS killed",
        "SELECT * FROM wg_events, pragma_table_info('wg_events') LIMIT 0; SELECT 1",
        id="pg_terminate_backend-without-a-role-switch",
    ),
    pytest.param(
        _PREFIX
        + "public.dblink_exec('{dsn}', 'DO $x$ BEGIN PERFORM lo_from_bytea({oid}, ''x''::bytea); "
        "PERFORM lo_export({oid}, ''{file}''); PERFORM lo_unlink({oid}); END $x$')",
        "SELECT writefile('{file}', 'x')",
        id="lo_export-writes-a-server-file",
    ),
    pytest.param(
        "SELECT t.* FROM (SELECT set_config('role', '{admin}', true) AS r) AS become, "
        "LATERAL (SELECT public.dblink_exec('{dsn}' || left(become.r, 0), 'DO $x$ BEGIN "
        "PERFORM lo_import(''/etc/hostname'', {oid}); END $x$')) AS imported(x), "
        "LATERAL public.dblink('{dsn}' || left(imported.x, 0), 'SELECT convert_from(lo_get({oid}), "
        "''UTF8''), lo_unlink({oid})') AS t(h text, u int)",
        "SELECT readfile('/etc/hostname')",
        id="lo_import-reads-a-server-file",
    ),
    pytest.param("DELETE FROM wg_subscriptions", "DELETE FROM wg_subscriptions", id="delete"),
    pytest.param(
        "WITH gone AS (DELETE FROM wg_subscriptions RETURNING *) SELECT * FROM gone",
        "WITH gone AS (DELETE FROM wg_subscriptions RETURNING *) SELECT * FROM gone",
        id="delete-in-a-cte",
    ),
    pytest.param("DROP TABLE wg_subscriptions", "DROP TABLE wg_subscriptions", id="ddl-drop"),
    pytest.param(
        "CREATE TEMP TABLE stolen AS SELECT * FROM wg_events",
        "CREATE TEMP TABLE stolen AS SELECT * FROM wg_events",
        id="temp-table",
    ),
]


@pytest.mark.parametrize(("postgres", "sqlite"), ESCAPES)
def test_an_escape_from_read_only_sql_is_refused_and_has_no_effect(
    cli: Any, target: Target, postgres: str, sqlite: str
) -> None:
    before = _state(target)
    statement = target.sql(postgres if target.backend == "postgres" else sqlite)
    result = cli("sql", statement, "--url", target.url, "--json")
    assert result.exit_code == 1, f"ran: {result.stdout}"
    assert "no read-only role" not in result.stderr  # refused by the reader, not for lack of it
    assert "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert _state(target) == before
    assert not Path(target.file).exists()
    assert target.bystander_alive(), "another session was terminated"
