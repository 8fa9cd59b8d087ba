"""Read-only SQL on a wgstore database: one statement, run where it cannot write.

The boundary is the database's, never a parse of the query:

- **PostgreSQL**: the statement runs in its own session, logged in as the store's *reader role*
  (:mod:`wgstore.events.reader_role`; ``wgstore db reader`` makes it once): ``LOGIN
  NOSUPERUSER NOCREATEDB NOCREATEROLE NOINHERIT NOREPLICATION NOBYPASSRLS`` with a connection
  limit, a member of no role at all (so no ``pg_read_server_files``,
  ``pg_execute_server_program``, ``pg_signal_backend`` or ``pg_write_*``), with ``USAGE`` on the
  store's schema and ``SELECT`` on its ``wg_`` tables and views. ``set_config('role', ...)``
  inside the query cannot switch to anything else: the login role has nothing to switch to.
  The transaction is also ``READ ONLY`` and always rolled back (as soon as the rows have
  arrived), and the query goes through the extended protocol (one statement only). The role has
  the settings of a reporting role (``READER_SETTINGS``: read-only by default, timeouts, a temp
  file limit, ``work_mem``) and may not run the functions PostgreSQL lets every role run that
  write WAL, create large objects, take advisory locks, signal sessions or reach other servers.

  The URL the user already has (the *admin* URL) readies the existing role
  (:func:`~wgstore.events.reader_role.use_reader`: anything added to it taken back, a fresh
  random password valid for two minutes, sent to the server already SCRAM-hashed; nothing is
  created and nothing outside the role changes) and then the query runs in a second connection
  as the reader. Where that cannot be arranged (no reader role yet, the URL's user may not
  grant to it, the server refuses the reader's login) the query is refused with
  :class:`ReaderUnavailableError`, never run with the admin's privileges. A ready-made reader
  login can be given instead (``reader_url``); it is checked the same way before it is used.

- **SQLite**: the file is opened with ``mode=ro`` and ``PRAGMA query_only = ON``, and an
  authorizer lets the statement do nothing but read tables and call functions (no ATTACH, no
  PRAGMA, no temporary tables); ``sqlite3`` runs exactly one statement per ``execute``.

On both, a timeout always applies: ``statement_timeout`` (Postgres) or a progress handler
(SQLite) stops the statement, and on Postgres a watchdog thread of the caller also cancels it
from outside the session, so a query that changes its own ``statement_timeout`` is still stopped.
And what the caller receives is bounded: the rows arrive one at a time and reading stops at
``max_rows`` (the rest is not sent), or with :class:`ResultTooLargeError` past
:data:`MAX_RESULT_ROWS` rows or ``max_bytes`` bytes, so one query cannot fill this process.
"""

from __future__ import annotations

import contextlib
import math
import secrets
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sqlalchemy.engine import URL

from wgstore.events.engine import mask_url, parse_url, require_sqlite_file, sqlite_read_only_uri
from wgstore.events.errors import EventStoreError, SchemaVersionError, StoreUnavailableError
from wgstore.events.reader_role import (
    DANGEROUS_FUNCTIONS,
    DANGEROUS_FUNCTIONS_SQL,
    READER_CONNECTION_LIMIT,
    READER_SETTINGS,
    READER_URL_ENV,
    ReaderRole,
    ReaderUnavailableError,
    as_reader_session,
    connect_libpq,
    conninfo_params,
    drop_reader,
    first_line,
    limit_preparation,
    prepare_reader,
    reader_role_name,
    store_schema,
    use_reader,
    waited_for_lock,
)

__all__ = [
    "MAX_RESULT_BYTES",
    "MAX_RESULT_ROWS",
    "MAX_TIMEOUT_S",
    "READER_CONNECTION_LIMIT",
    "READER_SETTINGS",
    "READER_URL_ENV",
    "QueryResult",
    "ReaderRole",
    "ReaderUnavailableError",
    "ResultTooLargeError",
    "SqlQueryError",
    "SqlRefusedError",
    "as_reader_session",
    "drop_reader",
    "prepare_reader",
    "reader_role_name",
    "run_read_only",
]

MAX_TIMEOUT_S = 3600.0
"""The longest ``--timeout``: one hour. A query holds its snapshot (vacuum cannot remove rows
deleted after it began, anywhere in the database) and its ``ACCESS SHARE`` locks (an upgrade
waits behind them) for as long as it runs; a report on a store's log takes seconds to minutes,
and an hour of held-back vacuum is what a busy database recovers from on its own."""
MAX_RESULT_ROWS = 1_000_000
"""The most rows a query may return to the caller; more is :class:`ResultTooLargeError`."""
MAX_RESULT_BYTES = 256 * 1024 * 1024
"""The default bound on the bytes of the values a query returns (as the server sends them, or
as SQLite hands them over); past it, :class:`ResultTooLargeError`. A row is counted once it has
arrived whole: one PostgreSQL value may be up to 1 GB."""
_LOGIN_PATIENCE_S = 2.0
_REFUSED = "refused: wgstore sql only reads"
_TOO_LARGE_HOW = (
    "narrow it (WHERE, LIMIT, fewer or shorter columns), or read whole streams with "
    "`wgstore export`"
)
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


class ResultTooLargeError(SqlQueryError):
    """The query returned more rows or bytes than a caller may hold; none are handed over."""


@dataclass
class QueryResult:
    """The columns of a query, an iterator over its rows, and how far the read models lag.

    The rows are in this process already (the database session has ended). ``more`` is True
    when the query had rows past ``max_rows``, which were not read. ``behind`` is the number of
    events in the log after the checkpoint of the subscription named in :func:`run_read_only`
    (None when none was named or it does not exist yet), read in the same snapshot as the rows.
    """

    columns: list[str]
    rows: Iterator[Sequence[Any]]
    behind: int | None = None
    more: bool = False


class _Rows:
    """The rows read so far, and the bounds of :func:`run_read_only` on them."""

    def __init__(self, max_rows: int | None, max_bytes: int) -> None:
        self.kept: list[Sequence[Any]] = []
        self.max_rows = max_rows
        self.max_bytes = max_bytes
        self.size = 0
        self.more = False

    def full(self) -> bool:
        """True once ``max_rows`` are kept: the next row is only noted (``more``)."""
        return self.max_rows is not None and len(self.kept) >= self.max_rows

    def add(self, row: Sequence[Any], size: int) -> None:
        """Keep ``row`` of ``size`` bytes.

        Raises:
            ResultTooLargeError: past :data:`MAX_RESULT_ROWS` rows or ``max_bytes`` bytes.
        """
        self.size += size
        if self.size > self.max_bytes:
            raise ResultTooLargeError(
                f"the result is more than {_mb(self.max_bytes)} (past row {len(self.kept)}), "
                f"more than wgstore sql hands over; {_TOO_LARGE_HOW}"
            )
        if len(self.kept) >= MAX_RESULT_ROWS:
            raise ResultTooLargeError(
                f"the result has more than {MAX_RESULT_ROWS:,} rows, more than wgstore sql "
                f"hands over; {_TOO_LARGE_HOW}"
            )
        self.kept.append(row)


def _mb(size: int) -> str:
    return f"{size / 2**20:g} MB"


def _value_size(value: Any) -> int:
    """About the bytes of a SQLite value: text and blobs by length, numbers as 8."""
    return len(value) if isinstance(value, str | bytes) else 8


# ---------------------------------------------------------------------- entry point


def run_read_only(
    url: str | URL,
    query: str,
    *,
    timeout_s: float = 60.0,
    reader_url: str | None = None,
    behind_of: str | None = None,
    max_rows: int | None = None,
    max_bytes: int = MAX_RESULT_BYTES,
) -> QueryResult:
    """Run one statement on the store at ``url`` in a session that cannot write.

    Args:
        url: the store's URL (on Postgres: a user that may ready the reader role, which
            ``wgstore db reader`` made).
        query: exactly one SQL statement.
        timeout_s: the statement is stopped after this many seconds (0 < timeout_s <= 1 h).
        reader_url: Postgres only: log in with this URL instead of the reader role.
            It must be a role that can only read; otherwise the query is refused.
        behind_of: a subscription name; ``QueryResult.behind`` then counts the events after
            its checkpoint.
        max_rows: read at most this many rows (``QueryResult.more`` says whether there were
            more; the query is stopped there); None: all, up to :data:`MAX_RESULT_ROWS`.
        max_bytes: the most bytes of values the rows may hold together.

    Raises:
        ValueError: an empty query, a timeout or a bound out of range.
        StoreUnavailableError: bad URL, missing file, unreachable server.
        ReaderUnavailableError: Postgres: no reader session could be arranged (no reader role:
            run ``wgstore db reader``).
        SqlRefusedError: the database refused the statement (a write, or an escape).
        ResultTooLargeError: more than :data:`MAX_RESULT_ROWS` rows or ``max_bytes`` bytes.
        SqlQueryError: the statement failed.
    """
    if not query.strip():
        raise ValueError('give a query, e.g. wgstore sql "SELECT * FROM wg_event_log LIMIT 10"')
    if not (isinstance(timeout_s, int | float) and math.isfinite(timeout_s)) or not (
        0 < timeout_s <= MAX_TIMEOUT_S
    ):
        raise ValueError(
            f"the timeout must be more than 0 and at most {MAX_TIMEOUT_S / 3600:g}h, "
            f"not {timeout_s!r} seconds"
        )
    if max_rows is not None and not 0 < max_rows <= MAX_RESULT_ROWS:
        raise ValueError(f"max_rows must be from 1 to {MAX_RESULT_ROWS:,}, not {max_rows!r}")
    if max_bytes <= 0:
        raise ValueError(f"max_bytes must be more than 0, not {max_bytes!r}")
    bounds = _Rows(max_rows, max_bytes)
    parsed = parse_url(url)
    if parsed.get_backend_name() == "sqlite":
        if reader_url:
            raise ValueError("a reader URL is for PostgreSQL; SQLite is opened read-only itself")
        return _sqlite_rows(Path(parsed.database or ""), query, timeout_s, behind_of, bounds)
    return _postgres_rows(parsed, query, timeout_s, reader_url, behind_of, bounds)


# ---------------------------------------------------------------------- SQLite


def _sqlite_authorizer(action: int, *_args: object) -> int:
    """Let a statement read and compute, nothing else (ATTACH, PRAGMA, CREATE ... are denied)."""
    return sqlite3.SQLITE_OK if action in _SQLITE_ALLOWED else sqlite3.SQLITE_DENY


def _sqlite_rows(
    path: Path, query: str, timeout_s: float, behind_of: str | None, bounds: _Rows
) -> QueryResult:
    require_sqlite_file(path)
    try:
        connection = sqlite3.connect(
            sqlite_read_only_uri(path), uri=True, isolation_level=None, check_same_thread=False
        )
        connection.execute("PRAGMA query_only = ON")
        _sqlite_is_wgstore(connection, path)
        behind = _sqlite_behind(connection, behind_of)
    except sqlite3.Error as error:
        raise StoreUnavailableError(f"cannot read {path} as a SQLite database: {error}") from None
    deadline = time.monotonic() + timeout_s
    connection.set_authorizer(_sqlite_authorizer)
    connection.set_progress_handler(lambda: int(time.monotonic() > deadline), 10_000)
    try:
        cursor = connection.execute(query)
        columns = [d[0] for d in cursor.description or ()]
        for row in cursor:
            if bounds.full():
                bounds.more = True
                break
            bounds.add(row, sum(_value_size(value) for value in row))
    except sqlite3.ProgrammingError as error:
        if "one statement" in str(error):
            raise SqlRefusedError(
                f"{_REFUSED} exactly one statement; SQLite ran none of them"
            ) from None
        raise SqlQueryError(f"SQL error: {error}") from None
    except sqlite3.Error as error:
        raise _sqlite_error(error) from None
    finally:
        connection.close()
    return QueryResult(columns, iter(bounds.kept), behind, bounds.more)


def _sqlite_is_wgstore(connection: sqlite3.Connection, path: Path) -> None:
    """Refuse a file whose ``wg_events`` is another application's (no wgstore revision)."""
    tables = {
        str(row[0])
        for row in connection.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table' "
            "AND name IN ('wg_events', 'wg_alembic_version')"
        )
    }
    if "wg_events" not in tables:
        return
    if (
        "wg_alembic_version" in tables
        and connection.execute("SELECT count(*) FROM wg_alembic_version").fetchone()[0]
    ):
        return
    connection.close()
    raise SchemaVersionError(
        f"{path} has a table wg_events that is not wgstore's (no wgstore revision in "
        "wg_alembic_version): it belongs to another application, so wgstore does not read it; "
        "give the path of a wgstore database"
    )


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


def _reader_session(parsed: URL, reader_url: str | None) -> tuple[Any, str, str | None]:
    """A session that can only read, its label, and the store schema to put on its path."""
    import psycopg

    if reader_url:
        reader_parsed = parse_url(reader_url)
        label = mask_url(reader_parsed)
        return connect_libpq(conninfo_params(reader_parsed), label), label, None
    label = mask_url(parsed)
    admin_params = conninfo_params(parsed)
    admin = connect_libpq(admin_params, label)
    try:
        limit_preparation(admin)
        database, schema = store_schema(admin, label)
        name = reader_role_name(database, schema)
        # Held until the reader has logged in, so a concurrent `wgstore sql` on the same store
        # cannot replace the password in between (closing the admin session releases it).
        # A reader cannot take advisory locks (`wgstore db reader`), and the wait is bounded.
        try:
            admin.execute("SELECT pg_advisory_lock(hashtext(%s))", (name,))
        except (psycopg.errors.LockNotAvailable, psycopg.errors.QueryCanceled):
            raise waited_for_lock(label, name) from None
        password = secrets.token_urlsafe(32)
        reader, managed = use_reader(admin, label, password, (database, schema))
        params = {
            key: value
            for key, value in admin_params.items()
            if key not in ("user", "password", "options", "service")
        }
        params.update(user=reader.name)
        if managed:
            params.update(password=password)
        try:
            session = _log_in(params, label)
        except StoreUnavailableError as error:
            if "too many connections for role" in str(error):
                raise ReaderUnavailableError(
                    f"{label}: {READER_CONNECTION_LIMIT} queries of wgstore sql already run on "
                    f"this store (the CONNECTION LIMIT of its read-only role {reader.name}); "
                    "retry when one has finished"
                ) from None
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


def _log_in(params: dict[str, Any], label: str) -> Any:
    """Log in as the reader. Refused for its connection limit, it tries again for a moment: a
    session of the role that just ended may still be leaving the server (its backend exits
    after the client has gone)."""
    deadline = time.monotonic() + _LOGIN_PATIENCE_S
    while True:
        try:
            return connect_libpq(params, label)
        except StoreUnavailableError as error:
            if "too many connections for role" not in str(error) or time.monotonic() > deadline:
                raise
        time.sleep(0.05)  # a pause between tries, bounded by the deadline


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
    login = session.info.user
    for signature, kind in session.execute(
        DANGEROUS_FUNCTIONS_SQL, {"names": list(DANGEROUS_FUNCTIONS), "role": login}
    ).fetchall():
        problems.append((login, f"may run {signature} (to {DANGEROUS_FUNCTIONS[kind]})"))
    (temp_limit,) = session.execute("SELECT current_setting('temp_file_limit')").fetchone()
    if temp_limit == "-1":
        problems.append(
            (
                login,
                "may write temporary files without limit (as a superuser: ALTER ROLE "
                f"{login} SET temp_file_limit = '1GB')",
            )
        )
    if problems:
        name, problem = problems[0]
        via = "" if name == login else f" (through its membership in {name})"
        fix = (
            f"give a --reader-url (or {READER_URL_ENV}) login that can only read, or drop it "
            "and use the reader `wgstore db reader` makes"
            if given
            else "someone changed the reader role or the database: run `wgstore db reader` as "
            "a superuser to reset it"
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
    bounds: _Rows,
) -> QueryResult:
    import psycopg
    from psycopg import sql

    session, label, schema = _reader_session(parsed, reader_url)
    watchdog: threading.Timer | None = None
    try:
        if schema is not None:  # before the check: it looks at the store on the search path
            session.execute(sql.SQL("SET search_path TO {}").format(sql.Identifier(schema)))
        _check_reader(session, label, given=reader_url is not None)
        timeout_ms = max(1, int(timeout_s * 1000))
        session.execute(sql.SQL("SET statement_timeout = {}").format(sql.Literal(timeout_ms)))
        for setting in ("idle_in_transaction_session_timeout", "lock_timeout"):
            session.execute(
                sql.SQL("SET {} = {}").format(
                    sql.Identifier(setting), sql.Literal(READER_SETTINGS[setting])
                )
            )
        session.autocommit = False
        cursor = session.cursor()
        cursor.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
        behind = _postgres_behind(cursor, behind_of)
        # Cancelled from outside the session too, in case the query changes its own timeout.
        watchdog = threading.Timer(timeout_s + 2.0, _cancel(session))
        watchdog.daemon = True
        watchdog.start()
        columns = _stream(session, cursor, query, bounds)
        # The rows are in this process now: end the transaction at once, so its snapshot and
        # locks are not held while the caller prints them (or a pager waits for a key).
        session.rollback()
    except psycopg.Error as error:
        raise _postgres_error(error, lost=session.broken or session.closed) from None
    finally:
        if watchdog is not None:
            watchdog.cancel()
        session.close()  # nothing is ever committed: closing rolls back
    return QueryResult(columns, iter(bounds.kept), behind, bounds.more)


def _stream(session: Any, cursor: Any, query: str, bounds: _Rows) -> list[str]:
    """Read the rows of ``query`` one at a time into ``bounds`` (single-row mode: the server
    sends the next row only as it is read, so a stop cancels the rest); its column names.

    The extended protocol runs one statement only. Each row is counted as the server sent it
    (the lengths of its values).
    """
    import psycopg

    rows = cursor.stream(query)
    try:
        for row in rows:
            if bounds.full():
                bounds.more = True
                break
            result = cursor.pgresult
            bounds.add(row, sum(len(result.get_value(0, i) or b"") for i in range(result.nfields)))
    except psycopg.ProgrammingError as error:
        if getattr(error, "sqlstate", None) or "didn't produce a result" not in str(error):
            raise
        return []  # it ran, and returns no rows (a DO block, SET)
    finally:
        rows.close()  # stopped early: the rest of the query is cancelled
    if cursor.description is not None:
        return [column.name for column in cursor.description]
    return _described(session, query)


def _described(session: Any, query: str) -> list[str]:
    """The column names of ``query`` (which returned no rows), described without running it."""
    from psycopg import pq

    encoding = session.info.encoding
    if session.pgconn.prepare(b"", query.encode(encoding)).status != pq.ExecStatus.COMMAND_OK:
        return []
    described = session.pgconn.describe_prepared(b"")
    return [(described.fname(i) or b"").decode(encoding) for i in range(described.nfields)]


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


def _postgres_error(error: Any, *, lost: bool) -> SqlQueryError:
    """The error of a failed query; ``lost``: the session no longer works."""
    text = first_line(error)
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
    if state == "53400" and "temp_file_limit" in text:
        return SqlQueryError(
            f"the query needed more temporary files than a reader may write ({text}); narrow "
            "it (WHERE, LIMIT) or sort less"
        )
    if state == "55P03":
        return SqlQueryError(
            f"the query waited too long for a lock ({text}): a `wgstore db upgrade` or another "
            "schema change holds one; retry when it has finished"
        )
    if lost:
        return SqlQueryError(f"the connection was lost during the query: {text}")
    if "parameters" in text and (state == "08P01" or state is None):
        return SqlQueryError(
            f"SQL error: the query has a parameter placeholder ($1, %s) and wgstore sql passes "
            f"no parameters: write the values into the query ({text})"
        )
    return SqlQueryError(f"SQL error: {text}")
