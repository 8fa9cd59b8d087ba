"""Read-only SQL on a wgstore database: one statement, run where it cannot write.

The boundary is the database's, never a parse of the query:

- **PostgreSQL**: the statement runs in its own session, logged in as a *reader role* that can do
  nothing but read the store: ``LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOINHERIT
  NOREPLICATION NOBYPASSRLS``, a member of no role at all (so no ``pg_read_server_files``,
  ``pg_execute_server_program``, ``pg_signal_backend`` or ``pg_write_*``), with ``USAGE`` on the
  store's schema and ``SELECT`` on its ``wg_`` tables and views. ``set_config('role', ...)``
  inside the query cannot switch to anything else: the login role has nothing to switch to.
  The transaction is also ``READ ONLY`` and always rolled back, and the query goes through the
  extended protocol (one statement only).

  The URL the user already has (the *admin* URL) prepares the reader (:func:`prepare_reader`:
  the role, one per database and schema, its grants, and a fresh random password valid for two
  minutes, sent to the server already SCRAM-hashed) and then the query runs in a second
  connection as the reader. Where that cannot be arranged (the URL's user may not create or
  alter roles, the server refuses the reader's login) the query is refused with
  :class:`ReaderUnavailableError`, never run with the admin's privileges. A ready-made reader
  login can be given instead (``reader_url``); it is checked the same way before it is used.

- **SQLite**: the file is opened with ``mode=ro`` and ``PRAGMA query_only = ON``, and an
  authorizer lets the statement do nothing but read tables and call functions (no ATTACH, no
  PRAGMA, no temporary tables); ``sqlite3`` runs exactly one statement per ``execute``.

On both, a timeout always applies: ``statement_timeout`` (Postgres) or a progress handler
(SQLite) stops the statement, and on Postgres a watchdog thread of the caller also cancels it
from outside the session, so a query that changes its own ``statement_timeout`` is still stopped.
"""

from __future__ import annotations

import contextlib
import hashlib
import math
import secrets
import sqlite3
import threading
import time
from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sqlalchemy.engine import URL

from wgstore.events.engine import mask_url, parse_url
from wgstore.events.errors import EventStoreError, StoreUnavailableError

__all__ = [
    "MAX_TIMEOUT_S",
    "READER_URL_ENV",
    "QueryResult",
    "ReaderRole",
    "ReaderUnavailableError",
    "SqlQueryError",
    "SqlRefusedError",
    "prepare_reader",
    "reader_role_name",
    "run_read_only",
]

READER_URL_ENV = "WGSTORE_READER_URL"
MAX_TIMEOUT_S = 24 * 3600.0
_BATCH = 500
_PASSWORD_VALID_S = 120
_CONNECT_TIMEOUT_S = 10
_REFUSED = "refused: wgstore sql only reads"
# Predefined roles a reader must not reach: each one writes, reads or runs something on the
# server, or signals other sessions.
_DANGEROUS_ROLES = (
    "pg_write_all_data",
    "pg_read_server_files",
    "pg_write_server_files",
    "pg_execute_server_program",
    "pg_signal_backend",
    "pg_checkpoint",
    "pg_create_subscription",
    "pg_use_reserved_connections",
)
# Events after the subscription's checkpoint (a subscription that never ran is at 0).
_BEHIND = (
    "SELECT count(*) FROM wg_events WHERE position > "
    "coalesce((SELECT checkpoint FROM wg_subscriptions WHERE name = %s), 0)"
)
_SQLITE_ALLOWED = {
    sqlite3.SQLITE_SELECT,
    sqlite3.SQLITE_READ,
    sqlite3.SQLITE_FUNCTION,
    sqlite3.SQLITE_RECURSIVE,
}


class SqlQueryError(EventStoreError):
    """The statement failed in the database (a syntax error, a missing table, the timeout)."""


class SqlRefusedError(SqlQueryError):
    """The database refused the statement because it would write or escape the reader."""


class ReaderUnavailableError(StoreUnavailableError):
    """No session that can only read could be arranged; the query was not run."""


@dataclass
class QueryResult:
    """The columns of a query, an iterator over its rows, and how far the read models lag.

    ``behind`` is the number of events in the log after the checkpoint of the subscription
    named in :func:`run_read_only` (None when none was named or it does not exist yet), read in
    the same snapshot as the rows. Close ``rows`` (or read it to the end) to end the session.
    """

    columns: list[str]
    rows: Generator[Sequence[Any], None, None]
    behind: int | None = None


@dataclass(frozen=True)
class ReaderRole:
    """The reader role of one store: its name, schema, and the tables and views it may read."""

    name: str
    database: str
    schema: str
    relations: tuple[str, ...]


def reader_role_name(database: str, schema: str) -> str:
    """The name of the reader role of the store in ``schema`` of ``database`` (one per store)."""
    digest = hashlib.sha256(f"{database}\x00{schema}".encode()).hexdigest()[:16]
    return f"wgstore_reader_{digest}"


# ---------------------------------------------------------------------- entry point


def run_read_only(
    url: str | URL,
    query: str,
    *,
    timeout_s: float = 60.0,
    reader_url: str | None = None,
    behind_of: str | None = None,
) -> QueryResult:
    """Run one statement on the store at ``url`` in a session that cannot write.

    Args:
        url: the store's URL (on Postgres: a user that may prepare the reader role).
        query: exactly one SQL statement.
        timeout_s: the statement is stopped after this many seconds (0 < timeout_s <= 24 h).
        reader_url: Postgres only: log in with this URL instead of preparing the reader role.
            It must be a role that can only read; otherwise the query is refused.
        behind_of: a subscription name; ``QueryResult.behind`` then counts the events after
            its checkpoint.

    Raises:
        ValueError: an empty query or a timeout out of range.
        StoreUnavailableError: bad URL, missing file, unreachable server.
        ReaderUnavailableError: Postgres: no reader session could be arranged.
        SqlRefusedError: the database refused the statement (a write, or an escape).
        SqlQueryError: the statement failed.
    """
    if not query.strip():
        raise ValueError('give a query, e.g. wgstore sql "SELECT * FROM wg_event_log LIMIT 10"')
    if not (isinstance(timeout_s, int | float) and math.isfinite(timeout_s)) or not (
        0 < timeout_s <= MAX_TIMEOUT_S
    ):
        raise ValueError(
            f"the timeout must be more than 0 and at most 24h, not {timeout_s!r} seconds"
        )
    parsed = parse_url(url)
    if parsed.get_backend_name() == "sqlite":
        if reader_url:
            raise ValueError("a reader URL is for PostgreSQL; SQLite is opened read-only itself")
        return _sqlite_rows(Path(parsed.database or ""), query, timeout_s, behind_of)
    return _postgres_rows(parsed, query, timeout_s, reader_url, behind_of)


# ---------------------------------------------------------------------- SQLite


def _sqlite_authorizer(action: int, *_args: object) -> int:
    """Let a statement read and compute, nothing else (ATTACH, PRAGMA, CREATE ... are denied)."""
    return sqlite3.SQLITE_OK if action in _SQLITE_ALLOWED else sqlite3.SQLITE_DENY


def _sqlite_rows(path: Path, query: str, timeout_s: float, behind_of: str | None) -> QueryResult:
    if path.is_dir():
        raise StoreUnavailableError(
            f"{path} is a folder, not a wgstore database: give the database file, "
            "e.g. sqlite:///wgstore.db"
        )
    if not path.exists():
        raise StoreUnavailableError(
            f"no wgstore database at {path}: check the path or --url / WGSTORE_URL"
        )
    try:
        connection = sqlite3.connect(
            f"{path.resolve().as_uri().replace('file://', 'file:', 1)}?mode=ro",
            uri=True,
            isolation_level=None,
            check_same_thread=False,
        )
        connection.execute("PRAGMA query_only = ON")
        behind = _sqlite_behind(connection, behind_of)
    except sqlite3.Error as error:
        raise StoreUnavailableError(f"cannot read {path} as a SQLite database: {error}") from None
    deadline = time.monotonic() + timeout_s
    connection.set_authorizer(_sqlite_authorizer)
    connection.set_progress_handler(lambda: int(time.monotonic() > deadline), 10_000)
    try:
        cursor = connection.execute(query)
    except sqlite3.ProgrammingError as error:
        connection.close()
        if "one statement" in str(error):
            raise SqlRefusedError(
                f"{_REFUSED} exactly one statement; SQLite ran none of them"
            ) from None
        raise SqlQueryError(f"SQL error: {error}") from None
    except sqlite3.Error as error:
        connection.close()
        raise _sqlite_error(error) from None
    columns = [d[0] for d in cursor.description or ()]

    def rows() -> Generator[Sequence[Any], None, None]:
        try:
            while batch := cursor.fetchmany(_BATCH):
                yield from batch
        except sqlite3.Error as error:
            raise _sqlite_error(error) from None
        finally:
            connection.close()

    return QueryResult(columns, rows(), behind)


def _sqlite_behind(connection: sqlite3.Connection, subscription: str | None) -> int | None:
    if subscription is None:
        return None
    try:
        row = connection.execute(_BEHIND.replace("%s", "?"), (subscription,)).fetchone()
    except sqlite3.OperationalError:  # not a wgstore database (yet): no lag to tell
        return None
    return int(row[0])


def _sqlite_error(error: sqlite3.Error) -> SqlQueryError:
    text = str(error)
    if any(
        word in text for word in ("not authorized", "authorization denied", "readonly", "read-only")
    ):
        return SqlRefusedError(f"{_REFUSED}; the database refused this statement ({text})")
    if "interrupted" in text:
        return SqlQueryError("the query ran past --timeout and was stopped")
    return SqlQueryError(f"SQL error: {text}")


# ---------------------------------------------------------------------- PostgreSQL: sessions


def _conninfo_params(url: URL) -> dict[str, Any]:
    """libpq connection parameters of a SQLAlchemy URL (host, port, dbname, user, ...)."""
    params: dict[str, Any] = {
        key: value
        for key, value in url.translate_connect_args(username="user", database="dbname").items()
        if value not in (None, "")
    }
    for key, value in url.query.items():
        params[key] = value if isinstance(value, str) else value[-1]
    params.setdefault("connect_timeout", _CONNECT_TIMEOUT_S)
    return params


def _connect(params: dict[str, Any], label: str) -> Any:
    import psycopg

    try:
        return psycopg.connect(autocommit=True, **params)
    except psycopg.Error as error:
        raise StoreUnavailableError(f"{label}: {_first_line(error)}") from None


def _first_line(error: BaseException) -> str:
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__


def _store_schema(admin: Any, label: str) -> tuple[str, str]:
    row = admin.execute(
        "SELECT current_database(), n.nspname FROM pg_class c "
        "JOIN pg_namespace n ON n.oid = c.relnamespace WHERE c.oid = to_regclass('wg_events')"
    ).fetchone()
    if row is None:
        raise StoreUnavailableError(
            f"{label} has no wgstore tables (wg_events) on its search_path: "
            "run `wgstore db upgrade` first, or check --url / WGSTORE_URL"
        )
    return str(row[0]), str(row[1])


def prepare_reader(url: str | URL) -> ReaderRole:
    """Create or update the reader role of the store at ``url`` (Postgres), and return it.

    The role gets ``LOGIN`` and no other attribute, loses any role membership, and gets
    ``USAGE`` on the store's schema and ``SELECT`` on every ``wg_`` table and view in it. It
    gets no password here (:func:`run_read_only` sets a fresh one each time it logs in).

    Raises:
        StoreUnavailableError: the server is unreachable or the store is not migrated.
        ReaderUnavailableError: the URL's user may not create the role or grant to it.
    """
    parsed = parse_url(url)
    if parsed.get_backend_name() == "sqlite":
        raise ValueError("the reader role is for PostgreSQL; SQLite is opened read-only itself")
    label = mask_url(parsed)
    admin = _connect(_conninfo_params(parsed), label)
    try:
        return _prepare(admin, label, password=None)[0]
    finally:
        admin.close()


def _prepare(
    admin: Any, label: str, password: str | None, where: tuple[str, str] | None = None
) -> tuple[ReaderRole, bool]:
    """Create/update the reader role (and set ``password``) in one transaction of ``admin``.

    Returns the role and whether its attributes and password were set: a user who may not
    manage roles can still grant reads on the tables it owns to a reader a superuser made.
    """
    import psycopg
    from psycopg import sql

    database, schema = where or _store_schema(admin, label)
    name = reader_role_name(database, schema)
    role = sql.Identifier(name)
    try:
        with admin.transaction():
            # Serialize preparers of the same reader: CREATE ROLE races otherwise.
            admin.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", (name,))
            valid_until, may_manage, exists, tidy = admin.execute(_ROLE_STATE, (name,)).fetchone()
            managed = not exists or bool(may_manage)
            if managed and not tidy:
                _own_role(admin, name, f"{database}.{schema}", create=not exists)
            relations = _grant_reads(admin, role, database, schema, name)
            if password is not None and managed:
                verifier = admin.pgconn.encrypt_password(
                    password.encode(), name.encode(), b"scram-sha-256"
                )
                admin.execute(
                    sql.SQL("ALTER ROLE {} PASSWORD {} VALID UNTIL {}").format(
                        role, sql.Literal(verifier.decode()), sql.Literal(valid_until)
                    )
                )
    except psycopg.errors.InsufficientPrivilege as error:
        user = admin.info.user
        raise ReaderUnavailableError(
            f"{label}: the user {user!r} cannot prepare the read-only role {name} "
            f"({_first_line(error)}); run `wgstore db reader --url URL` once with a superuser "
            "or a CREATEROLE user that owns the tables, or give --reader-url (or "
            f"{READER_URL_ENV}) for a login that can only read"
        ) from None
    except psycopg.Error as error:
        raise StoreUnavailableError(f"{label}: {_first_line(error)}") from None
    return ReaderRole(name, database, schema, relations), managed


# When a fresh password expires; whether the current user may manage roles; whether the reader
# exists; whether it already is a login with no other attribute and no membership.
_ROLE_STATE = f"""
SELECT (now() + interval '{_PASSWORD_VALID_S} seconds')::text,
       (SELECT rolsuper OR rolcreaterole FROM pg_roles WHERE rolname = current_user),
       r.oid IS NOT NULL,
       coalesce(r.rolcanlogin AND NOT (r.rolsuper OR r.rolcreatedb OR r.rolcreaterole
           OR r.rolinherit OR r.rolreplication OR r.rolbypassrls)
           AND NOT EXISTS (SELECT 1 FROM pg_auth_members m WHERE m.member = r.oid), false)
FROM (SELECT 1) AS one LEFT JOIN pg_roles AS r ON r.rolname = %s
"""


def _own_role(admin: Any, name: str, store: str, *, create: bool) -> None:
    """Make ``name`` a login with no other attribute and no role membership."""
    from psycopg import sql

    role = sql.Identifier(name)
    attributes = sql.SQL(
        "LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOINHERIT NOREPLICATION NOBYPASSRLS"
    )
    if create:
        admin.execute(sql.SQL("CREATE ROLE {} {}").format(role, attributes))
        comment = f"wgstore sql: reads the wgstore tables of {store}, nothing else"
        admin.execute(sql.SQL("COMMENT ON ROLE {} IS {}").format(role, sql.Literal(comment)))
    else:
        admin.execute(sql.SQL("ALTER ROLE {} {}").format(role, attributes))
    for (member_of,) in admin.execute(
        "SELECT m.roleid::regrole::text FROM pg_auth_members m "
        "JOIN pg_roles r ON r.oid = m.member WHERE r.rolname = %s",
        (name,),
    ).fetchall():
        admin.execute(sql.SQL("REVOKE {} FROM {}").format(sql.SQL(member_of), role))


def _grant_reads(admin: Any, role: Any, database: str, schema: str, name: str) -> tuple[str, ...]:
    from psycopg import sql

    found = admin.execute(
        "SELECT c.relname, has_table_privilege(%(role)s, c.oid, 'SELECT'), "
        "has_table_privilege(%(role)s, c.oid, "
        "'INSERT, UPDATE, DELETE, TRUNCATE, REFERENCES, TRIGGER') "
        "FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
        "WHERE n.nspname = %(schema)s AND c.relkind IN ('r', 'v', 'm', 'p') "
        "AND c.relname LIKE 'wg\\_%%' ORDER BY c.relname",
        {"role": name, "schema": schema},
    ).fetchall()
    relations = tuple(str(relation) for relation, _, _ in found)
    connect, usage, create = admin.execute(
        "SELECT has_database_privilege(%(role)s, current_database(), 'CONNECT'), "
        "has_schema_privilege(%(role)s, %(schema)s, 'USAGE'), "
        "has_schema_privilege(%(role)s, %(schema)s, 'CREATE')",
        {"role": name, "schema": schema},
    ).fetchone()
    if not connect:
        admin.execute(
            sql.SQL("GRANT CONNECT ON DATABASE {} TO {}").format(sql.Identifier(database), role)
        )
    if not usage:
        admin.execute(
            sql.SQL("GRANT USAGE ON SCHEMA {} TO {}").format(sql.Identifier(schema), role)
        )
    if create:  # someone granted more: take it back (a grant to PUBLIC stays, and is refused)
        admin.execute(
            sql.SQL("REVOKE CREATE ON SCHEMA {} FROM {}").format(sql.Identifier(schema), role)
        )
    for relation, reads, writes in found:
        table = sql.Identifier(schema, relation)
        if writes:
            admin.execute(sql.SQL("REVOKE ALL ON {} FROM {}").format(table, role))
        if writes or not reads:
            admin.execute(sql.SQL("GRANT SELECT ON {} TO {}").format(table, role))
    return relations


def _reader_session(parsed: URL, reader_url: str | None) -> tuple[Any, str, str | None]:
    """A session that can only read, its label, and the store schema to put on its path."""
    if reader_url:
        reader_parsed = parse_url(reader_url)
        label = mask_url(reader_parsed)
        return _connect(_conninfo_params(reader_parsed), label), label, None
    label = mask_url(parsed)
    admin_params = _conninfo_params(parsed)
    admin = _connect(admin_params, label)
    try:
        database, schema = _store_schema(admin, label)
        # Held until the reader has logged in, so a concurrent `wgstore sql` on the same store
        # cannot replace the password in between (closing the admin session releases it).
        admin.execute(
            "SELECT pg_advisory_lock(hashtext(%s))", (reader_role_name(database, schema),)
        )
        password = secrets.token_urlsafe(32)
        reader, managed = _prepare(admin, label, password, (database, schema))
        params = {
            key: value
            for key, value in admin_params.items()
            if key not in ("user", "password", "options", "service")
        }
        params.update(user=reader.name)
        if managed:
            params.update(password=password)
        try:
            session = _connect(params, label)
        except StoreUnavailableError as error:
            how = (
                "let it log in with a password from this host (pg_hba.conf: scram-sha-256)"
                if managed
                else f"the user {admin.info.user!r} may not set its password: run wgstore sql "
                "with a superuser or CREATEROLE user once per session, or let it log in"
            )
            raise ReaderUnavailableError(
                f"{error}: the server refused the read-only login {reader.name}; {how}, or give "
                f"--reader-url (or {READER_URL_ENV}) for a login that can only read"
            ) from None
        return session, label, reader.schema
    finally:
        admin.close()


_SAFETY_CHECK = """
WITH reach AS (
    SELECT r.* FROM pg_roles r WHERE pg_has_role(session_user, r.oid, 'MEMBER')
), store AS (
    SELECT c.oid, c.relowner FROM pg_class c
    WHERE c.relnamespace = (SELECT relnamespace FROM pg_class WHERE oid = to_regclass('wg_events'))
)
SELECT r.rolname,
       CASE
         WHEN r.rolsuper THEN 'is a superuser'
         WHEN r.rolcreaterole THEN 'may create roles'
         WHEN r.rolcreatedb THEN 'may create databases'
         WHEN r.rolreplication THEN 'may replicate'
         WHEN r.rolbypassrls THEN 'bypasses row security'
         WHEN r.rolname = ANY(%(dangerous)s) THEN 'is a predefined role that writes, reads '
              'server files, runs programs or signals sessions'
         WHEN EXISTS (SELECT 1 FROM store s WHERE s.relowner = r.oid) THEN 'owns wgstore tables'
         WHEN EXISTS (SELECT 1 FROM store s WHERE has_table_privilege(
              r.oid, s.oid, 'INSERT, UPDATE, DELETE, TRUNCATE, TRIGGER')) THEN
              'may write wgstore tables'
         WHEN has_schema_privilege(r.oid, (SELECT relnamespace FROM pg_class
              WHERE oid = to_regclass('wg_events')), 'CREATE') THEN
              'may create objects in the store''s schema'
       END AS problem
FROM reach r
"""


def _check_reader(session: Any, label: str, *, given: bool) -> None:
    """Refuse a session whose login role, or a role it may become, could write or escape."""
    problems = [
        (name, problem)
        for name, problem in session.execute(
            _SAFETY_CHECK, {"dangerous": list(_DANGEROUS_ROLES)}
        ).fetchall()
        if problem
    ]
    if problems:
        name, problem = problems[0]
        login = session.info.user
        via = "" if name == login else f" (through its membership in {name})"
        fix = (
            f"give a --reader-url (or {READER_URL_ENV}) login that can only read, or drop it to "
            "let wgstore prepare one"
            if given
            else "someone changed the reader role: run `wgstore db reader` as a superuser to "
            "reset it"
        )
        raise ReaderUnavailableError(
            f"{label}: refused to run the query as {login!r}, which {problem}{via}; {fix}"
        )


# ---------------------------------------------------------------------- PostgreSQL: the query


def _postgres_rows(
    parsed: URL,
    query: str,
    timeout_s: float,
    reader_url: str | None,
    behind_of: str | None,
) -> QueryResult:
    import psycopg
    from psycopg import sql

    session, label, schema = _reader_session(parsed, reader_url)
    watchdog: threading.Timer | None = None

    def close() -> None:
        if watchdog is not None:
            watchdog.cancel()
        session.close()  # nothing is ever committed: closing rolls back

    try:
        if schema is not None:  # before the check: it looks at the store on the search path
            session.execute(sql.SQL("SET search_path TO {}").format(sql.Identifier(schema)))
        _check_reader(session, label, given=reader_url is not None)
        timeout_ms = max(1, int(timeout_s * 1000))
        session.execute(sql.SQL("SET statement_timeout = {}").format(sql.Literal(timeout_ms)))
        session.autocommit = False
        cursor = session.cursor()
        cursor.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
        behind = _postgres_behind(cursor, behind_of)
        # Cancelled from outside the session too, in case the query changes its own timeout.
        watchdog = threading.Timer(timeout_s + 2.0, _cancel(session))
        watchdog.daemon = True
        watchdog.start()
        # prepare=True sends the query with the extended protocol: one statement only.
        cursor.execute(query, prepare=True)
    except psycopg.Error as error:
        close()
        raise _postgres_error(error) from None
    except BaseException:
        close()
        raise
    columns = [d.name for d in cursor.description or ()]

    def rows() -> Generator[Sequence[Any], None, None]:
        try:
            if cursor.description is None:
                return
            while batch := cursor.fetchmany(_BATCH):
                yield from batch
        except psycopg.Error as error:
            raise _postgres_error(error) from None
        finally:
            close()

    return QueryResult(columns, rows(), behind)


def _cancel(session: Any) -> Callable[[], None]:
    def cancel() -> None:
        with contextlib.suppress(Exception):  # the session may have just ended
            (getattr(session, "cancel_safe", None) or session.cancel)()

    return cancel


def _postgres_behind(cursor: Any, subscription: str | None) -> int | None:
    if subscription is None:
        return None
    exists = cursor.execute(
        "SELECT to_regclass('wg_subscriptions') IS NOT NULL AND "
        "has_table_privilege(to_regclass('wg_subscriptions'), 'SELECT')"
    ).fetchone()
    if not (exists and exists[0]):
        return None
    row = cursor.execute(_BEHIND, (subscription,)).fetchone()
    return int(row[0])


def _postgres_error(error: Any) -> SqlQueryError:
    text = _first_line(error)
    state = getattr(error, "sqlstate", None)
    if state is None and "COPY" in text:  # psycopg's own: COPY needs its copy() protocol
        return SqlRefusedError(
            f"{_REFUSED} and prints rows: COPY is not run; use SELECT (with --json for "
            "machine-readable rows)"
        )
    if state in ("25006", "42501", "2F003") or "read-only" in text or "permission denied" in text:
        return SqlRefusedError(f"{_REFUSED}; the database refused this statement ({text})")
    if "multiple commands" in text:
        return SqlRefusedError(f"{_REFUSED} exactly one statement; PostgreSQL ran none of them")
    if state == "57014":
        return SqlQueryError("the query ran past --timeout and was stopped")
    if state is None or state.startswith("08"):
        return SqlQueryError(f"the connection was lost during the query: {text}")
    return SqlQueryError(f"SQL error: {text}")
