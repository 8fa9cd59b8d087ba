"""Engines for the two backends, made the same way everywhere (store, migrations, CLI).

SQLite: WAL, a busy timeout, ``synchronous`` settable (default FULL: an acknowledged append
survives a power cut), and every transaction SQLAlchemy begins is ``BEGIN IMMEDIATE`` so two
writers never deadlock on a lock upgrade (except on connections marked ``READ_ONLY_OPTION``,
which only read and so need no write lock). Read-only engines open the file with ``mode=ro``.
How a writer waits for another's lock is settable (``lock_wait``, :func:`begin_immediate`):
SQLite's busy handler (the default), or short steps of our own.

PostgreSQL (psycopg 3): sessions in UTC; read-only engines set
``default_transaction_read_only``. The pool pings a connection before handing it out only when
it may have died: when it sat in the pool longer than :data:`PING_AFTER_IDLE_S`, or when the
server said something on it meanwhile (its socket has something to read: a session the server
ended sends its reason and closes, and so does a connection cut on the way). A connection used
a moment ago, whose socket is quiet, is handed out as it is: no round trip. So after a server
restart a dead connection is still replaced, not used, and the first ping that fails discards
every pooled connection made before it (``InvalidatePoolError``), as ``pool_pre_ping`` did on
every checkout.
"""

from __future__ import annotations

import os
import select
import sqlite3
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import quote

import sqlalchemy as sa
from sqlalchemy.engine import URL, make_url

from wgstore.events.errors import StoreUnavailableError

__all__ = [
    "PING_AFTER_IDLE_S",
    "READ_ONLY_OPTION",
    "SHORT_LOCK_WAITS_OPTION",
    "SQLITE_LOCK_WAITS",
    "SQLITE_SYNCHRONOUS",
    "begin_immediate",
    "create_store_engine",
    "mask_url",
    "parse_url",
    "require_sqlite_file",
    "sqlite_read_only_uri",
]

SQLITE_SYNCHRONOUS = ("OFF", "NORMAL", "FULL", "EXTRA")
# An execution option: a SQLite transaction that only reads starts with a plain BEGIN, so it
# does not wait for the write lock (``engine.connect().execution_options(wgstore_reading=True)``).
READ_ONLY_OPTION = "wgstore_reading"
_OWN_QUERY_KEYS = ("synchronous", "busy_timeout", "lock_wait")
SQLITE_LOCK_WAITS = ("sqlite", "short")
"""How a SQLite writer waits while another holds the write lock (the URL's ``lock_wait``):
``sqlite``, SQLite's busy handler (default), which sleeps 1, 2, 5, 10 ... up to 100 ms between
tries, so a waiter can sleep through many short holds and keep missing the lock (in a fleet
of four processes, waits of up to 1.4 s for a lock no writer held more than 76 ms), but it
lets a writer that appends back to back keep the lock (more appends a second when saturated);
``short``, tries every 0.2 ms doubling to 1 ms: a lower tail where processes pause between
appends, fewer appends a second back to back, and CPU spent on the tries (bench/README.md, "the
SQLite fleet's tail traced to the lock wait"). Both give up after the busy timeout."""
SHORT_LOCK_WAITS_OPTION = "wgstore_short_lock_waits_s"
"""An engine's execution option when ``lock_wait=short``: its busy timeout in seconds."""
_SHORT_WAIT_FIRST_S, _SHORT_WAIT_LONGEST_S = 0.0002, 0.001
PING_AFTER_IDLE_S = 10.0
"""A pooled PostgreSQL connection idle in the pool longer than this (seconds) is pinged before
it is handed out (one round trip); one used more recently only when its socket has something to
read."""
_CHECKED_IN = "wgstore_checked_in"  # the pool entry's info key: time.monotonic() at checkin


def mask_url(url: str | URL) -> str:
    """The URL as text with its password replaced by ``***``."""
    try:
        return make_url(url).render_as_string(hide_password=True)
    except Exception:  # noqa: BLE001 - unparseable: hide a password between : and @
        text = str(url)
        if "@" in text and "://" in text:
            scheme, rest = text.split("://", 1)
            creds, host = rest.rsplit("@", 1)
            if ":" in creds:  # user:password; a bare user has no password to hide
                creds = f"{creds.split(':', 1)[0]}:***"
            return f"{scheme}://{creds}@{host}"
        return text


def parse_url(url: str | URL) -> URL:
    """Parse and check a store URL, naming the problem when it is not usable.

    Raises:
        StoreUnavailableError: not a URL, or not a SQLite / PostgreSQL URL.
    """
    if isinstance(url, URL):
        parsed = url
    else:
        if not isinstance(url, str) or "://" not in url:
            raise StoreUnavailableError(
                f"{mask_url(str(url))!r} is not a database URL; use sqlite:///path/to/wgstore.db "
                "or postgresql+psycopg://user@host:5432/dbname"
            )
        try:
            parsed = make_url(url)
        except Exception as error:  # noqa: BLE001 - SQLAlchemy raises several kinds
            raise StoreUnavailableError(
                f"{mask_url(url)!r} is not a valid database URL ({error}); use "
                "sqlite:///path/to/wgstore.db or postgresql+psycopg://user@host:5432/dbname"
            ) from None
    backend = parsed.get_backend_name()
    if backend in ("postgresql", "postgres"):
        # Always psycopg 3: plain postgresql:// would otherwise pick psycopg2.
        parsed = parsed.set(drivername="postgresql+psycopg")
    elif backend != "sqlite":
        raise StoreUnavailableError(
            f"{mask_url(parsed)}: wgstore stores events in SQLite or PostgreSQL, not {backend!r}; "
            "use sqlite:///path/to/wgstore.db or postgresql+psycopg://user@host/dbname"
        )
    elif parsed.database in (None, "", ":memory:"):
        raise StoreUnavailableError(
            f"{mask_url(parsed)}: an in-memory SQLite database cannot be shared by the store's "
            "connections; give a file path, e.g. sqlite:///wgstore.db"
        )
    else:
        _check_sqlite_options(parsed)
    return parsed


def _check_sqlite_options(url: URL) -> None:
    """Refuse a query option of a SQLite URL that wgstore does not read (``?mode=ro``): the
    driver would ignore it, or take it into the file name."""
    unknown = sorted(set(url.query) - set(_OWN_QUERY_KEYS))
    if not unknown:
        return
    given = "&".join(f"{key}={_option(url, key)}" for key in unknown)
    why = (
        "; read commands open the file read-only by themselves, so leave mode out"
        if "mode" in unknown
        else ""
    )
    raise StoreUnavailableError(
        f"{mask_url(url)}: ?{given} is not an option of a wgstore SQLite URL (those are "
        f"{', '.join(_OWN_QUERY_KEYS)}){why}"
    )


def require_sqlite_file(path: Path) -> None:
    """Check that the SQLite database ``path`` exists (opening it must not create it).

    Raises:
        StoreUnavailableError: ``path`` is a folder, or there is no file at ``path``; for a
            relative path whose absolute twin exists, the message says to write four slashes.
    """
    if path.is_dir():
        raise StoreUnavailableError(
            f"{path} is a folder, not a wgstore database: give the database file, "
            "e.g. sqlite:///wgstore.db"
        )
    if not path.exists():
        raise StoreUnavailableError(
            f"no wgstore database at {path}: check the path or --url / WGSTORE_URL"
            + _four_slashes(path, there=lambda absolute: absolute.exists())
        )


def _four_slashes(path: Path, *, there: Callable[[Path], bool]) -> str:
    """A hint for ``sqlite:///tmp/x.db`` (three slashes: the relative path tmp/x.db) when what
    is missing at the relative ``path`` is ``there`` at the absolute one."""
    absolute = Path("/") / path
    if path.is_absolute() or not there(absolute):
        return ""
    return (
        f" (sqlite:///{path} is the relative path {path}; for {absolute} write four slashes: "
        f"sqlite:///{absolute})"
    )


def create_store_engine(
    url: str | URL,
    *,
    read_only: bool = False,
    synchronous: str | None = None,
    busy_timeout_s: float | None = None,
) -> sa.Engine:
    """Create an Engine configured for wgstore on SQLite or PostgreSQL.

    URL query options ``synchronous`` and ``busy_timeout`` (seconds) are read for SQLite
    when the keyword arguments are not given.
    """
    parsed = parse_url(url)
    if parsed.get_backend_name() == "sqlite":
        return _sqlite_engine(parsed, read_only, synchronous, busy_timeout_s)
    return _postgres_engine(parsed, read_only)


def _option(url: URL, name: str) -> str | None:
    """The URL's query option ``name`` (the last one when it is given more than once)."""
    value = url.query.get(name)
    if isinstance(value, tuple):
        return value[-1] if value else None
    return value


def _sqlite_engine(
    url: URL, read_only: bool, synchronous: str | None, busy_timeout_s: float | None
) -> sa.Engine:
    synchronous = (synchronous or _option(url, "synchronous") or "FULL").upper()
    if synchronous not in SQLITE_SYNCHRONOUS:
        raise StoreUnavailableError(
            f"synchronous={synchronous!r} is not a SQLite synchronous mode; use one of "
            f"{', '.join(SQLITE_SYNCHRONOUS)} (FULL is the safe default)"
        )
    busy_option = _option(url, "busy_timeout")
    try:
        busy_s = float(busy_timeout_s if busy_timeout_s is not None else (busy_option or 30))
    except ValueError:
        raise StoreUnavailableError(
            f"busy_timeout={busy_option!r} must be a number of seconds"
        ) from None
    lock_wait = (_option(url, "lock_wait") or "sqlite").lower()
    if lock_wait not in SQLITE_LOCK_WAITS:
        raise StoreUnavailableError(
            f"lock_wait={lock_wait!r} is not a way to wait for SQLite's write lock; use one of "
            f"{', '.join(SQLITE_LOCK_WAITS)} (sqlite, its busy handler, is the default)"
        )
    url = url.difference_update_query(_OWN_QUERY_KEYS)
    path = Path(url.database or "")
    if read_only:
        require_sqlite_file(path)
        url = url.set(database=sqlite_read_only_uri(path)).update_query_dict({"uri": "true"})
    elif not path.parent.exists():
        raise StoreUnavailableError(
            f"cannot create {path}: the folder {path.parent} does not exist"
            + _four_slashes(path, there=lambda absolute: absolute.parent.is_dir())
        )
    engine = sa.create_engine(url, pool_size=8, max_overflow=32)
    short_waits_s = busy_s if lock_wait == "short" else None
    if short_waits_s is not None:
        engine.update_execution_options(**{SHORT_LOCK_WAITS_OPTION: short_waits_s})

    @sa.event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection: sqlite3.Connection, _record: Any) -> None:
        dbapi_connection.isolation_level = None  # we issue BEGIN ourselves
        cursor = dbapi_connection.cursor()
        cursor.execute(f"PRAGMA busy_timeout = {int(busy_s * 1000)}")
        if not read_only:
            _set_wal(cursor, busy_s)
        cursor.execute(f"PRAGMA synchronous = {synchronous}")
        cursor.execute("PRAGMA foreign_keys = ON")
        # LIKE compares case-sensitively, as on PostgreSQL: a stream or group id prefix matches
        # the same ids on both (ids are compared exactly everywhere else).
        cursor.execute("PRAGMA case_sensitive_like = ON")
        cursor.close()

    @sa.event.listens_for(engine, "begin")
    def _on_begin(connection: sa.Connection) -> None:
        reading = read_only or connection.get_execution_options().get(READ_ONLY_OPTION, False)
        if reading:
            connection.exec_driver_sql("BEGIN")
        else:
            begin_immediate(connection.exec_driver_sql, short_waits_s)

    return engine


def begin_immediate(execute: Callable[[str], Any], short_waits_s: float | None) -> None:
    """``BEGIN IMMEDIATE`` through ``execute`` (a sqlite3 cursor's, or a SQLAlchemy
    connection's ``exec_driver_sql``, whose errors it raises as they come): take SQLite's write
    lock, waiting for it while another connection holds it. ``short_waits_s`` None: through
    SQLite's busy handler (the connection's busy timeout); else in short steps of our own
    (:data:`SQLITE_LOCK_WAITS`) for at most that many seconds, the connection's busy timeout set
    aside meanwhile.

    Raises:
        sqlite3.OperationalError: ``database is locked`` when the wait ran out (wrapped by
            SQLAlchemy through ``exec_driver_sql``).
    """
    if short_waits_s is None:
        execute("BEGIN IMMEDIATE")
        return
    busy_ms = int(execute("PRAGMA busy_timeout").fetchone()[0])
    execute("PRAGMA busy_timeout = 0")
    try:
        deadline = time.monotonic() + short_waits_s
        pause = _SHORT_WAIT_FIRST_S
        while True:
            try:
                execute("BEGIN IMMEDIATE")
                return
            except Exception as error:
                cause = getattr(error, "orig", error)  # SQLAlchemy's wrapper, or sqlite3's own
                code = getattr(cause, "sqlite_errorcode", None)
                if code is None or code & 0xFF != sqlite3.SQLITE_BUSY:
                    raise
                if time.monotonic() >= deadline:
                    raise
            time.sleep(pause)
            pause = min(pause * 2, _SHORT_WAIT_LONGEST_S)
    finally:
        execute(f"PRAGMA busy_timeout = {busy_ms}")


def sqlite_read_only_uri(path: Path) -> str:
    """The ``file:`` URI that opens the SQLite database at ``path`` for reading.

    ``mode=ro`` normally. A database in WAL mode needs its ``-shm`` file (made on open, beside
    the database) even to read, so on a read-only filesystem a cleanly closed database (no
    ``-wal`` with content, no ``-shm``: SQLite removes them when the last connection closes)
    is opened ``immutable=1`` instead: nothing can change it there, which is what immutable
    promises SQLite. Otherwise, when the folder cannot take the ``-shm`` file, the error says
    what to do.

    Raises:
        StoreUnavailableError: the database cannot be read where it is, and why.
    """
    resolved = path.resolve()
    base = f"file:{quote(str(resolved))}"
    folder = resolved.parent
    shm = Path(f"{resolved}-shm")
    wal = Path(f"{resolved}-wal")
    if shm.exists() or os.access(folder, os.W_OK):
        return f"{base}?mode=ro"
    dirty = wal.exists() and wal.stat().st_size > 0
    if _read_only_filesystem(folder) and not dirty:
        return f"{base}?mode=ro&immutable=1"
    if dirty:
        raise StoreUnavailableError(
            f"cannot read {path}: it was not closed cleanly (its {wal.name} holds changes not yet "
            f"in the database) and {folder} is not writable, so SQLite cannot make the "
            f"{shm.name} file it needs to read them; copy the database with its {wal.name} to "
            "a writable folder and read it there (opening it there folds the changes in)"
        )
    raise StoreUnavailableError(
        f"cannot read {path}: {folder} is not writable for this user, and SQLite needs to make "
        f"{shm.name} there to read a WAL database; let this user write to {folder}, or copy the "
        "database to a writable folder"
    )


def _read_only_filesystem(folder: Path) -> bool:
    try:
        return bool(os.statvfs(folder).f_flag & os.ST_RDONLY)
    except OSError:
        return False


def _postgres_engine(url: URL, read_only: bool, lock_timeout_s: float = 30.0) -> sa.Engine:
    connect_args: dict[str, Any] = {"connect_timeout": int(_option(url, "connect_timeout") or 10)}
    engine = sa.create_engine(url, pool_size=8, max_overflow=32, connect_args=connect_args)
    _ping_when_it_may_have_died(engine)

    @sa.event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        autocommit = dbapi_connection.autocommit
        dbapi_connection.autocommit = True
        dbapi_connection.execute("SET TIME ZONE 'UTC'")
        # An append waits this long for the table lock, then fails with a clear error.
        dbapi_connection.execute(f"SET lock_timeout = {int(lock_timeout_s * 1000)}")
        if dbapi_connection.info.server_version >= 140000:
            # A client killed mid-append is noticed within a second (not when the statement
            # ends), so its transaction rolls back and frees the append lock sooner.
            dbapi_connection.execute("SET client_connection_check_interval = 1000")
        if read_only:
            dbapi_connection.execute("SET default_transaction_read_only = on")
        dbapi_connection.autocommit = autocommit

    return engine


def _ping_when_it_may_have_died(engine: sa.Engine) -> None:
    """Ping a pooled connection at checkout only when it may have died (see the module's
    docstring); a failed ping discards it and every pooled connection made before it, and the
    pool hands out a new one (SQLAlchemy's pool ``checkout`` event raising
    ``DisconnectionError``)."""
    dialect = engine.dialect

    @sa.event.listens_for(engine, "checkin")
    def _on_checkin(dbapi_connection: Any, record: Any) -> None:
        if dbapi_connection is not None:
            record.info[_CHECKED_IN] = time.monotonic()

    @sa.event.listens_for(engine, "checkout")
    def _on_checkout(dbapi_connection: Any, record: Any, _proxy: Any) -> None:
        checked_in = record.info.get(_CHECKED_IN)
        if checked_in is None:  # connected for this checkout
            return
        if time.monotonic() - checked_in <= PING_AFTER_IDLE_S and not _server_spoke(
            dbapi_connection
        ):
            return
        try:
            dialect.do_ping(dbapi_connection)
        except Exception as error:  # whatever the ping met, the connection is not usable
            raise sa.exc.InvalidatePoolError(f"the pooled connection is gone: {error}") from error


def _server_spoke(dbapi_connection: Any) -> bool:
    """Whether an idle psycopg connection has something to read (the server ended the session
    or the connection closed), or cannot say (closed: then it is pinged, and replaced)."""
    try:
        fd = dbapi_connection.fileno()
    except Exception:  # noqa: BLE001 - psycopg raises when the connection is closed
        return True
    if not hasattr(select, "poll"):  # Windows: select() takes sockets
        return bool(select.select([fd], [], [], 0)[0])
    poller = select.poll()
    poller.register(fd, select.POLLIN)  # hang-ups and errors are reported as well
    return bool(poller.poll(0))


def _set_wal(cursor: sqlite3.Cursor, busy_s: float) -> None:
    """Switch to WAL (persistent: a no-op once the file is in WAL mode), retrying while locked.

    Switching a fresh file needs an exclusive lock, and SQLite answers "database is locked" at
    once (without its busy handler) when another connection, e.g. a second process opening the
    same new store, holds a lock meanwhile; so this retries for up to the busy timeout.
    """
    deadline = time.monotonic() + busy_s
    pause = 0.005
    while True:
        try:
            cursor.execute("PRAGMA journal_mode = WAL")
            return
        except sqlite3.OperationalError as error:
            if "locked" not in str(error) or time.monotonic() + pause > deadline:
                raise
        time.sleep(pause)  # a backoff between tries, not a wait for a condition
        pause = min(pause * 2, 0.2)
