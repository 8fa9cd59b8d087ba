"""Read-only SQL on a wgstore database: one statement, run where it cannot write.

The boundary is the database's, never a parse of the query:

- **PostgreSQL**: the statement runs in its own session, logged in as a *reader role* that can do
  nothing but read the store: ``LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOINHERIT
  NOREPLICATION NOBYPASSRLS``, a member of no role at all (so no ``pg_read_server_files``,
  ``pg_execute_server_program``, ``pg_signal_backend`` or ``pg_write_*``), with ``USAGE`` on the
  store's schema and ``SELECT`` on its ``wg_`` tables and views. ``set_config('role', ...)``
  inside the query cannot switch to anything else: the login role has nothing to switch to.
  The transaction is also ``READ ONLY`` and always rolled back (as soon as the rows have
  arrived), and the query goes through the extended protocol (one statement only). The role has
  the settings of a reporting role (:data:`READER_SETTINGS`: read-only by default, timeouts, a
  temp file limit) and may not run the functions PostgreSQL lets every role run that write WAL,
  create large objects, take advisory locks, signal sessions or reach other servers
  (``_DANGEROUS_FUNCTIONS``): preparing it revokes them from PUBLIC in the store's database,
  which only a superuser may do, and says so in :attr:`ReaderRole.changes`.

  The URL the user already has (the *admin* URL) prepares the reader (:func:`prepare_reader`,
  waiting at most ``_PREPARE_TIMEOUT_S`` for its lock:
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

from wgstore.events.engine import mask_url, parse_url, require_sqlite_file, sqlite_read_only_uri
from wgstore.events.errors import EventStoreError, SchemaVersionError, StoreUnavailableError

__all__ = [
    "MAX_TIMEOUT_S",
    "READER_SETTINGS",
    "READER_URL_ENV",
    "QueryResult",
    "ReaderRole",
    "ReaderUnavailableError",
    "SqlQueryError",
    "SqlRefusedError",
    "as_reader_session",
    "prepare_reader",
    "reader_role_name",
    "run_read_only",
]

READER_URL_ENV = "WGSTORE_READER_URL"
MAX_TIMEOUT_S = 3600.0
"""The longest ``--timeout``: one hour. A query holds its snapshot (vacuum cannot remove rows
deleted after it began, anywhere in the database) and its ``ACCESS SHARE`` locks (an upgrade
waits behind them) for as long as it runs; a report on a store's log takes seconds to minutes,
and an hour of held-back vacuum is what a busy database recovers from on its own."""
_PREPARE_TIMEOUT_S = 10.0
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
# What a read-only reporting role gets (``ALTER ROLE ... SET``), so a query cannot outlast or
# outgrow its welcome even in a session that changed its own settings. temp_file_limit is in kB
# (1 GiB: a sort or hash of the whole log spills less; 0.5 GB in 15 s is what an unlimited
# reader wrote); the timeouts in ms.
READER_SETTINGS: dict[str, str] = {
    "default_transaction_read_only": "on",
    "statement_timeout": str(int(MAX_TIMEOUT_S * 1000)),
    "idle_in_transaction_session_timeout": "10000",
    "lock_timeout": "10000",
    "temp_file_limit": str(1024 * 1024),
}
# Functions every role may run by default (EXECUTE granted to PUBLIC) that a reader must not:
# name -> what it would let a read-only session do to the server or to other sessions.
# ``pg_notify`` stays (a notification is only sent at commit, and the reader's transaction is
# rolled back; wgstore's own append function notifies), ``set_config`` stays (it changes only
# the session, which ends with the query), ``txid_current`` / ``pg_current_xact_id`` stay (one
# transaction id per query, which is never more than one).
_DANGEROUS_FUNCTIONS = {
    "pg_logical_emit_message": "write WAL that survives the rollback and reaches logical decoding",
    "lo_create": "create large objects (and burn a transaction id per subtransaction)",
    "lo_creat": "create large objects (and burn a transaction id per subtransaction)",
    "lo_from_bytea": "create large objects (and burn a transaction id per subtransaction)",
    "lo_import": "create large objects from server files",
    "pg_terminate_backend": "end other sessions of its own role",
    "pg_cancel_backend": "cancel the queries of other sessions of its own role",
    "advisory": "take advisory locks other sessions wait on, or fill the server's lock table",
    "dblink": "open connections to other servers",
}
_DANGEROUS_FUNCTIONS_SQL = """
SELECT p.oid::regprocedure::text,
       CASE WHEN p.proname LIKE 'pg\\_%%advisory\\_%%' THEN 'advisory'
            WHEN e.extname = 'dblink' THEN 'dblink' ELSE p.proname END
FROM pg_proc p
LEFT JOIN pg_depend d ON d.classid = 'pg_proc'::regclass AND d.objid = p.oid AND d.deptype = 'e'
LEFT JOIN pg_extension e ON e.oid = d.refobjid AND d.refclassid = 'pg_extension'::regclass
WHERE ((p.pronamespace = 'pg_catalog'::regnamespace
        AND (p.proname = ANY(%(names)s) OR p.proname LIKE 'pg\\_%%advisory\\_%%'))
       OR e.extname = 'dblink')
  AND has_function_privilege(%(role)s, p.oid, 'EXECUTE')
ORDER BY 1
"""
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
    notes: tuple[str, ...] = ()


@dataclass(frozen=True)
class ReaderRole:
    """The reader role of one store: its name, schema, and the tables and views it may read."""

    name: str
    database: str
    schema: str
    relations: tuple[str, ...]
    changes: tuple[str, ...] = ()
    """What preparing it changed beyond the role itself (privileges of PUBLIC in the database),
    one sentence each; empty when nothing outside the role had to change."""


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
        timeout_s: the statement is stopped after this many seconds (0 < timeout_s <= 1 h).
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
            f"the timeout must be more than 0 and at most {MAX_TIMEOUT_S / 3600:g}h, "
            f"not {timeout_s!r} seconds"
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
    """The database and schema of the store on ``admin``'s search path, once it is known to be
    a wgstore schema (its ``wg_events`` next to a ``wg_alembic_version`` with a revision)."""
    import psycopg
    from psycopg import sql

    row = admin.execute(
        "SELECT current_database(), n.nspname, "
        "to_regclass(format('%I.wg_alembic_version', n.nspname)) IS NOT NULL FROM pg_class c "
        "JOIN pg_namespace n ON n.oid = c.relnamespace WHERE c.oid = to_regclass('wg_events')"
    ).fetchone()
    if row is None:
        raise StoreUnavailableError(
            f"{label} has no wgstore tables (wg_events) on its search_path: "
            "run `wgstore db upgrade` first, or check --url / WGSTORE_URL"
        )
    database, schema, versioned = str(row[0]), str(row[1]), bool(row[2])
    revision = None
    if versioned:
        try:
            found = admin.execute(
                sql.SQL("SELECT max(version_num) FROM {}").format(
                    sql.Identifier(schema, "wg_alembic_version")
                )
            ).fetchone()
        except psycopg.errors.InsufficientPrivilege as error:
            raise ReaderUnavailableError(
                f"{label}: the user {admin.info.user!r} cannot read the store's tables "
                f"({_first_line(error)}); run `wgstore db reader --url URL` once with a "
                "superuser, or give --reader-url (or "
                f"{READER_URL_ENV}) for a login that can only read"
            ) from None
        revision = found[0] if found else None
    if revision is None:
        raise SchemaVersionError(
            f"{label}: the wg_events table in schema {schema} is not wgstore's (no wgstore "
            f"revision in {schema}.wg_alembic_version): it belongs to another application, so "
            "wgstore neither reads nor upgrades it; give a URL whose search_path leads to a "
            "wgstore schema (e.g. ?options=-csearch_path%3Dwgstore) or another database"
        )
    return database, schema


def as_reader_session(url: str) -> tuple[str, ReaderRole]:
    """``url`` whose sessions act as the store's reader role: for a long-lived reader (``wgstore
    serve``) that logs in as the URL's user, with no password that expires.

    Prepares the reader role (:func:`prepare_reader`) and adds ``-c role=<reader>`` to the URL's
    ``options``, so every connection switches to the reader at login (``SET ROLE``): what the
    sessions run has the reader's privileges only (``SELECT`` on the store). It guards against a
    bug of the reader's own code writing, not against code that could run ``RESET ROLE``: for
    other people's SQL, :func:`run_read_only` logs in as the reader itself.

    Raises:
        ValueError: ``url`` is not a PostgreSQL URL.
        StoreUnavailableError: the server is unreachable or the store is not migrated.
        ReaderUnavailableError: the URL's user may not prepare the role.
    """
    reader = prepare_reader(url)
    parsed = parse_url(url)
    options = parsed.query.get("options", "")
    if not isinstance(options, str):  # given twice: libpq takes them one after the other
        options = " ".join(options)
    switched = parsed.update_query_dict({"options": f"{options} -crole={reader.name}".strip()})
    return switched.render_as_string(hide_password=False), reader


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
        _limit_preparation(admin)
        return _prepare(admin, label, password=None)[0]
    finally:
        admin.close()


def _limit_preparation(admin: Any) -> None:
    """Bound how long preparing the reader may wait for a lock, or take at all."""
    admin.execute(f"SET lock_timeout = {int(_PREPARE_TIMEOUT_S * 1000)}")
    admin.execute(f"SET statement_timeout = {int(_PREPARE_TIMEOUT_S * 3000)}")


def _waited(label: str, name: str) -> ReaderUnavailableError:
    return ReaderUnavailableError(
        f"{label}: waited {_PREPARE_TIMEOUT_S:g} s for a lock that serializes preparing the "
        f"read-only role {name} (the role's own, or the one every reader of the database "
        "shares), and gave up: another session holds it (pg_locks, locktype 'advisory', shows "
        "which); retry when it ends, or end it"
    )


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
    changes: list[str] = []
    try:
        with admin.transaction():
            # Serialize the preparers of every reader of this database: CREATE ROLE races
            # otherwise, and so do the GRANTs and REVOKEs on the database and on its built-in
            # functions that readers of different schemas share ("tuple concurrently updated").
            admin.execute(
                "SELECT pg_advisory_xact_lock(hashtext('wgstore reader ' || current_database()))"
            )
            valid_until, may_manage, exists, tidy, superuser = admin.execute(
                _ROLE_STATE, (name,)
            ).fetchone()
            managed = not exists or bool(may_manage)
            if managed and not tidy:
                _own_role(admin, name, f"{database}.{schema}", create=not exists)
            if managed:
                _apply_settings(admin, name)
            relations = _grant_reads(admin, role, database, schema, name, changes)
            _deny_functions(admin, label, name, database, schema, bool(superuser), changes)
            if password is not None and managed:
                verifier = admin.pgconn.encrypt_password(
                    password.encode(), name.encode(), b"scram-sha-256"
                )
                admin.execute(
                    sql.SQL("ALTER ROLE {} PASSWORD {} VALID UNTIL {}").format(
                        role, sql.Literal(verifier.decode()), sql.Literal(valid_until)
                    )
                )
    except (psycopg.errors.LockNotAvailable, psycopg.errors.QueryCanceled):
        raise _waited(label, name) from None
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
    return ReaderRole(name, database, schema, relations, tuple(changes)), managed


# When a fresh password expires; whether the current user may manage roles; whether the reader
# exists; whether it already is a login with no other attribute and no membership; whether the
# current user is a superuser.
_ROLE_STATE = f"""
SELECT (now() + interval '{_PASSWORD_VALID_S} seconds')::text,
       (SELECT rolsuper OR rolcreaterole FROM pg_roles WHERE rolname = current_user),
       r.oid IS NOT NULL,
       coalesce(r.rolcanlogin AND NOT (r.rolsuper OR r.rolcreatedb OR r.rolcreaterole
           OR r.rolinherit OR r.rolreplication OR r.rolbypassrls)
           AND NOT EXISTS (SELECT 1 FROM pg_auth_members m WHERE m.member = r.oid), false),
       (SELECT rolsuper FROM pg_roles WHERE rolname = current_user)
FROM (SELECT 1) AS one LEFT JOIN pg_roles AS r ON r.rolname = %s
"""


def _apply_settings(admin: Any, name: str) -> None:
    """Give the reader role :data:`READER_SETTINGS` (only those it does not have already)."""
    from psycopg import sql

    rows = admin.execute(
        "SELECT unnest(s.setconfig) FROM pg_db_role_setting s JOIN pg_roles r "
        "ON r.oid = s.setrole WHERE r.rolname = %s AND s.setdatabase = 0",
        (name,),
    ).fetchall()
    current = dict(str(row[0]).split("=", 1) for row in rows)
    for setting, value in READER_SETTINGS.items():
        if current.get(setting) != value:
            admin.execute(
                sql.SQL("ALTER ROLE {} SET {} = {}").format(
                    sql.Identifier(name), sql.Identifier(setting), sql.Literal(value)
                )
            )


def _deny_functions(
    admin: Any,
    label: str,
    name: str,
    database: str,
    schema: str,
    superuser: bool,
    changes: list[str],
) -> None:
    """Make sure the reader cannot run :data:`_DANGEROUS_FUNCTIONS` (EXECUTE is PUBLIC's).

    PostgreSQL has no per-role denial: a privilege of PUBLIC is every role's. So EXECUTE is
    revoked from PUBLIC (and the reader) in this database; ``pg_signal_backend`` gets the two
    signalling functions back and the store's owner the advisory locks (wgstore's migrations
    take one). Only a superuser may change the privileges of built-in functions.
    """
    from psycopg import sql

    found = admin.execute(
        _DANGEROUS_FUNCTIONS_SQL, {"names": list(_DANGEROUS_FUNCTIONS), "role": name}
    ).fetchall()
    if found and not superuser:
        signature, kind = found[0]
        raise ReaderUnavailableError(
            f"{label}: the read-only role {name} may run {signature}, with which a query could "
            f"{_DANGEROUS_FUNCTIONS[kind]} (PostgreSQL lets every role run it); run "
            "`wgstore db reader --url URL` once as a superuser: it revokes EXECUTE on such "
            f"functions from PUBLIC in database {database} (docs/sql.md says which)"
        )
    kinds = []
    for signature, kind in found:
        function = sql.SQL(signature)
        admin.execute(
            sql.SQL("REVOKE EXECUTE ON FUNCTION {} FROM PUBLIC, {}").format(
                function, sql.Identifier(name)
            )
        )
        if kind in ("pg_terminate_backend", "pg_cancel_backend"):
            admin.execute(
                sql.SQL("GRANT EXECUTE ON FUNCTION {} TO pg_signal_backend").format(function)
            )
        if kind not in kinds:
            kinds.append(kind)
    if found:
        changes.append(
            f"revoked EXECUTE from PUBLIC in database {database} on {len(found)} functions a "
            f"read-only role must not run ({', '.join(kinds)}); other roles in this database "
            "that are not superusers now need GRANT EXECUTE ON FUNCTION ... TO role to use "
            "them (pg_signal_backend keeps pg_cancel_backend and pg_terminate_backend, the "
            "store's owner keeps the advisory locks)"
        )
    if superuser:
        _owner_keeps_advisory_locks(admin, schema, changes)


def _owner_keeps_advisory_locks(admin: Any, schema: str, changes: list[str]) -> None:
    from psycopg import sql

    rows = admin.execute(
        "SELECT p.oid::regprocedure::text, o.rolname FROM pg_class c "
        "JOIN pg_roles o ON o.oid = c.relowner AND NOT o.rolsuper "
        "JOIN pg_proc p ON p.pronamespace = 'pg_catalog'::regnamespace "
        "AND p.proname LIKE 'pg\\_%%advisory\\_%%' "
        "WHERE c.relname = 'wg_events' AND c.relnamespace = %s::regnamespace "
        "AND NOT has_function_privilege(o.oid, p.oid, 'EXECUTE')",
        (schema,),
    ).fetchall()
    for signature, owner in rows:
        admin.execute(
            sql.SQL("GRANT EXECUTE ON FUNCTION {} TO {}").format(
                sql.SQL(signature), sql.Identifier(owner)
            )
        )
    if rows:
        changes.append(
            f"granted EXECUTE on the advisory lock functions to {rows[0][1]}, the owner of the "
            "store's tables (wgstore's migrations take an advisory lock)"
        )


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


def _grant_reads(
    admin: Any, role: Any, database: str, schema: str, name: str, changes: list[str]
) -> tuple[str, ...]:
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
    if create:  # someone granted more: take it back
        admin.execute(
            sql.SQL("REVOKE CREATE ON SCHEMA {} FROM {}").format(sql.Identifier(schema), role)
        )
        (public,) = admin.execute(
            "SELECT has_schema_privilege(%s, %s, 'CREATE')", (name, schema)
        ).fetchone()
        if public:  # through PUBLIC: PostgreSQL 14 and older grant CREATE on public to it
            admin.execute(
                sql.SQL("REVOKE CREATE ON SCHEMA {} FROM PUBLIC").format(sql.Identifier(schema))
            )
            changes.append(
                f"revoked CREATE on schema {schema} from PUBLIC (PostgreSQL 15's default; "
                "older servers grant it to every role), so the read-only role cannot create "
                f"objects there; roles that created objects in {schema} only through PUBLIC "
                f"now need GRANT CREATE ON SCHEMA {schema} TO role"
            )
    for relation, reads, writes in found:
        table = sql.Identifier(schema, relation)
        if writes:
            admin.execute(sql.SQL("REVOKE ALL ON {} FROM {}").format(table, role))
        if writes or not reads:
            admin.execute(sql.SQL("GRANT SELECT ON {} TO {}").format(table, role))
    return relations


def _reader_session(
    parsed: URL, reader_url: str | None
) -> tuple[Any, str, str | None, tuple[str, ...]]:
    """A session that can only read, its label, the store schema to put on its path, and what
    preparing the reader changed in the database (:attr:`ReaderRole.changes`)."""
    import psycopg

    if reader_url:
        reader_parsed = parse_url(reader_url)
        label = mask_url(reader_parsed)
        return _connect(_conninfo_params(reader_parsed), label), label, None, ()
    label = mask_url(parsed)
    admin_params = _conninfo_params(parsed)
    admin = _connect(admin_params, label)
    try:
        _limit_preparation(admin)
        database, schema = _store_schema(admin, label)
        # Held until the reader has logged in, so a concurrent `wgstore sql` on the same store
        # cannot replace the password in between (closing the admin session releases it).
        # A reader cannot take advisory locks (``_deny_functions``), and the wait is bounded.
        try:
            admin.execute(
                "SELECT pg_advisory_lock(hashtext(%s))", (reader_role_name(database, schema),)
            )
        except (psycopg.errors.LockNotAvailable, psycopg.errors.QueryCanceled):
            raise _waited(label, reader_role_name(database, schema)) from None
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
        return session, label, reader.schema, reader.changes
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
    login = session.info.user
    for signature, kind in session.execute(
        _DANGEROUS_FUNCTIONS_SQL, {"names": list(_DANGEROUS_FUNCTIONS), "role": login}
    ).fetchall():
        problems.append((login, f"may run {signature} (to {_DANGEROUS_FUNCTIONS[kind]})"))
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
            f"give a --reader-url (or {READER_URL_ENV}) login that can only read, or drop it to "
            "let wgstore prepare one"
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
) -> QueryResult:
    import psycopg
    from psycopg import sql

    session, label, schema, notes = _reader_session(parsed, reader_url)
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
        # prepare=True sends the query with the extended protocol: one statement only.
        cursor.execute(query, prepare=True)
        # The rows are in this process now: end the transaction at once, so its snapshot and
        # locks are not held while the caller prints them (or a pager waits for a key).
        session.rollback()
        if watchdog is not None:
            watchdog.cancel()
    except psycopg.Error as error:
        lost = session.broken or session.closed
        close()
        raise _postgres_error(error, lost=lost) from None
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
            raise _postgres_error(error, lost=session.broken or session.closed) from None
        finally:
            close()

    return QueryResult(columns, rows(), behind, notes)


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
