"""The one place where driver and SQLAlchemy errors become wgstore errors."""

from __future__ import annotations

import re
import sqlite3
import sys
from typing import Any

import sqlalchemy.exc as sa_exc
from sqlalchemy.engine import make_url

from wgstore.events.engine import mask_url
from wgstore.events.errors import (
    ArchivedStreamError,
    DuplicateEventError,
    EventStoreError,
    ImmutableEventError,
    SchemaVersionError,
    StoreFullError,
    StoreUnavailableError,
)
from wgstore.events.sqlite_lock import write_lock_holder


def _psycopg() -> Any:
    """psycopg if this process has loaded it, else None: a psycopg error can only come from a
    loaded psycopg, and importing it (~90 ms) would slow every SQLite-only process."""
    return sys.modules.get("psycopg")


__all__ = ["translate_errors"]

_FULL = (
    "{url}: the database could not write, its disk is full ({text}); nothing was written. Free "
    "space on {where} (or raise its quota), then retry"
)
_NOT_MIGRATED = (
    "the database at {url} has no wgstore tables (or an old version of them): run "
    "`wgstore db upgrade --url ...`, or open the store with migrate=True"
)


class translate_errors:
    """Turn driver errors raised inside the block into wgstore errors naming ``url`` (masked).

    A class, not a ``@contextmanager`` generator: every append and read enters one, and this
    costs a third as much.
    """

    __slots__ = ("url",)

    def __init__(self, url: str) -> None:
        self.url = url

    def __enter__(self) -> None:
        return None

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, _tb: Any
    ) -> None:
        if error is None or isinstance(error, EventStoreError):
            return
        if isinstance(error, sa_exc.DBAPIError):
            raise _translate(error.orig, self.url) from error
        if isinstance(error, sqlite3.Error):
            raise _translate(error, self.url) from error
        psycopg = _psycopg()
        if psycopg is not None and isinstance(error, psycopg.Error):
            raise _translate(error, self.url) from error


def _translate(error: BaseException | None, url: str) -> Exception:
    masked = mask_url(url)
    text = str(error)
    if isinstance(error, sqlite3.Error):
        if "append-only" in text:
            return ImmutableEventError(text)
        if "stream is archived" in text:
            return ArchivedStreamError(text)
        if isinstance(error, sqlite3.IntegrityError) and "event_id" in text:
            return DuplicateEventError(
                f"an event id is already stored ({text}); give each event a new id, or retry the "
                "whole original batch unchanged"
            )
        if (
            getattr(error, "sqlite_errorcode", None) == sqlite3.SQLITE_FULL
            or "disk is full" in text
        ):
            return StoreFullError(
                _FULL.format(url=masked, text=text, where="the filesystem of the database file")
            )
        if "no such table" in text:
            return SchemaVersionError(_NOT_MIGRATED.format(url=masked))
        if "database is locked" in text or "database is busy" in text:
            return StoreUnavailableError(
                f"{masked}: the SQLite database stayed locked by another writer longer than the "
                f"busy timeout; {_lock_holder(url)}retry, or raise it with ?busy_timeout=SECONDS "
                "in the URL"
            )
        if "unable to open" in text or "readonly" in text or "read-only" in text:
            return StoreUnavailableError(f"{masked}: {text}; check the path and its permissions")
        return StoreUnavailableError(f"{masked}: SQLite error: {text}")
    psycopg = _psycopg()
    if psycopg is not None and isinstance(error, psycopg.Error):
        import psycopg.errors as pg_errors

        state = getattr(error, "sqlstate", None)
        if state == "WG003":
            return ImmutableEventError(_first_line(text))
        if state == "WG006":
            hint = getattr(error.diag, "message_hint", None) or ""
            return ArchivedStreamError(f"{_first_line(text)}: {hint}".rstrip(": "))
        if state == "WG002" or isinstance(error, pg_errors.UniqueViolation):
            return DuplicateEventError(
                f"{_first_line(text)}; give each event a new id, or retry the whole original "
                "batch unchanged"
            )
        if isinstance(error, pg_errors.DiskFull):
            return StoreFullError(
                _FULL.format(
                    url=masked, text=_first_line(text), where="the PostgreSQL server's data disk"
                )
            )
        if isinstance(error, pg_errors.UndefinedTable | pg_errors.UndefinedFunction):
            return SchemaVersionError(_NOT_MIGRATED.format(url=masked))
        if isinstance(error, pg_errors.LockNotAvailable):
            return StoreUnavailableError(
                f"{masked}: waited too long for {_waited_for(error.diag.context or '')} "
                f"({_first_line(text)}); another long transaction holds it"
            )
        if isinstance(error, pg_errors.IdleInTransactionSessionTimeout):
            return StoreUnavailableError(
                f"{masked}: the server ended the session of this write: its transaction waited "
                "for this process longer than the writer's idle bound (was the process paused, "
                "or stalled?); it was rolled back, nothing of it was written: retry"
            )
        if isinstance(error, pg_errors.ReadOnlySqlTransaction):
            return StoreUnavailableError(f"{masked}: this store was opened read-only")
        if (state or "").startswith("40") or isinstance(error, pg_errors.QueryCanceled):
            # class 40 (a deadlock, a serialization failure) and a cancelled statement are
            # OperationalErrors to psycopg, but the server is there: it ended the transaction
            return StoreUnavailableError(
                f"{masked}: the server rolled the transaction back ({_first_line(text)}); "
                "nothing of it was written: retry"
            )
        if isinstance(error, psycopg.OperationalError):
            return StoreUnavailableError(
                f"cannot reach the database at {masked}: {_first_line(text)}. Check that the "
                "server is running and the URL (host, port, user, database) is right"
            )
        return StoreUnavailableError(f"{masked}: database error: {_first_line(text)}")
    return StoreUnavailableError(f"{masked}: {text}")


def _lock_holder(url: str) -> str:
    """Who holds the SQLite database's write lock, as a clause ending in "; " ("" unknown)."""
    try:
        database = make_url(url).database
    except Exception:  # noqa: BLE001 - an error message must not fail on its URL
        return ""
    holder = write_lock_holder(database) if database else None
    return f"{holder.describe()}; " if holder is not None else ""


_ROW_LOCK = re.compile(r'tuple \S+ in relation "([^"]+)"')


def _waited_for(context: str) -> str:
    """What a statement that ran out of ``lock_timeout`` waited for, from the error's context:
    a row (the relation named), the append lock (``wg_append``'s ``LOCK TABLE``) or a lock."""
    row = _ROW_LOCK.search(context)
    if row is not None:
        if row.group(1) == "wg_run_leases":
            return (
                "a lease's row in wg_run_leases (a fenced append, a renewal or a takeover of "
                "that lease not yet committed)"
            )
        return f"a row of {row.group(1)}"
    if "LOCK TABLE wg_events" in context:
        return "the append lock on wg_events"
    return "a lock"


def _first_line(text: str) -> str:
    return text.strip().splitlines()[0] if text.strip() else text
