"""The PostgreSQL role ``wgstore sql`` reads as: made once, used by each query, dropped.

``wgstore db reader`` (:func:`prepare_reader`) is the one step that changes the server. It
creates the store's *reader role* (a ``LOGIN`` role: roles are cluster-wide, so it outlives
``DROP DATABASE``), grants it reads on the store, and revokes from ``PUBLIC``, in the store's
database, ``EXECUTE`` on the functions a read-only session must not run (PostgreSQL has no
per-role denial). What it changed outside the role it writes into the role's comment, so that
``wgstore db reader --drop`` (:func:`drop_reader`) gives it back when the last reader of the
database goes.

``wgstore sql`` and ``wgstore serve`` use a reader that exists (:func:`use_reader`,
:func:`as_reader_session`): they take back anything someone added to it, grant it reads on
tables added by later migrations and set its password, and never create a role nor change what
``PUBLIC`` may do; a missing role is one line saying to run ``wgstore db reader``.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy.engine import URL

from wgstore.events.engine import mask_url, parse_url
from wgstore.events.errors import SchemaVersionError, StoreUnavailableError

__all__ = [
    "READER_CONNECTION_LIMIT",
    "READER_SETTINGS",
    "READER_URL_ENV",
    "DroppedReader",
    "ReaderRole",
    "ReaderUnavailableError",
    "as_reader_session",
    "connect_libpq",
    "conninfo_params",
    "drop_reader",
    "first_line",
    "limit_preparation",
    "prepare_reader",
    "reader_role_name",
    "store_schema",
    "use_reader",
    "waited_for_lock",
]

READER_URL_ENV = "WGSTORE_READER_URL"
READER_CONNECTION_LIMIT = 4
"""How many sessions the reader role may have at once: ``wgstore sql`` queries of one store
running together (a fifth is refused at login). ``wgstore serve`` logs in as its URL's user and
switches to the role, so it does not count."""
# What a read-only reporting role gets (``ALTER ROLE ... SET``), so a query cannot outlast or
# outgrow its welcome even in a session that changed its own settings. temp_file_limit is in kB
# (1 GiB: a sort or hash of the whole log spills less; 0.5 GB in 15 s is what an unlimited
# reader wrote; only a superuser may raise it, so a query cannot); the timeouts in ms;
# work_mem per sort or hash node (the server's default may be larger; a query may raise its
# own, as any role may: docs/sql.md says what is and is not bounded).
READER_SETTINGS: dict[str, str] = {
    "default_transaction_read_only": "on",
    "statement_timeout": "3600000",
    "idle_in_transaction_session_timeout": "10000",
    "lock_timeout": "10000",
    "temp_file_limit": str(1024 * 1024),
    "work_mem": "32MB",
}
# Functions every role may run by default (EXECUTE granted to PUBLIC) that a reader must not:
# name -> what it would let a read-only session do to the server or to other sessions.
# ``pg_notify`` stays (a notification is only sent at commit, and the reader's transaction is
# rolled back; wgstore's own append function notifies), ``set_config`` stays (it changes only
# the session, which ends with the query), ``txid_current`` / ``pg_current_xact_id`` stay (one
# transaction id per query, which is never more than one).
DANGEROUS_FUNCTIONS = {
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
DANGEROUS_FUNCTIONS_SQL = """
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
"""The functions of :data:`DANGEROUS_FUNCTIONS` that ``role`` may run: signature, kind."""
_PREPARE_TIMEOUT_S = 10.0
_PASSWORD_VALID_S = 120
_CONNECT_TIMEOUT_S = 10
_COMMENT = "wgstore sql: reads the wgstore tables of {store}, nothing else"


class ReaderUnavailableError(StoreUnavailableError):
    """No session that can only read could be arranged; the query was not run."""


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


@dataclass(frozen=True)
class DroppedReader:
    """What :func:`drop_reader` did: the role's name, whether there was one, and what it gave
    back (or left for another reader of the database), one sentence each."""

    name: str
    existed: bool
    changes: tuple[str, ...] = ()


def reader_role_name(database: str, schema: str) -> str:
    """The name of the reader role of the store in ``schema`` of ``database`` (one per store)."""
    digest = hashlib.sha256(f"{database}\x00{schema}".encode()).hexdigest()[:16]
    return f"wgstore_reader_{digest}"


# ---------------------------------------------------------------------- entry points


def prepare_reader(url: str | URL) -> ReaderRole:
    """Create or update the reader role of the store at ``url`` (Postgres), and return it:
    ``wgstore db reader``.

    The role gets ``LOGIN``, a ``CONNECTION LIMIT`` of :data:`READER_CONNECTION_LIMIT` and no
    other attribute, loses any role membership, gets :data:`READER_SETTINGS`, ``USAGE`` on the
    store's schema and ``SELECT`` on every ``wg_`` table and view in it. ``EXECUTE`` on
    :data:`DANGEROUS_FUNCTIONS` is revoked from ``PUBLIC`` in the database (only a superuser
    may), and ``CREATE`` on the store's schema where ``PUBLIC`` has it; both are said in
    :attr:`ReaderRole.changes` and recorded for :func:`drop_reader`. It gets no password here
    (:func:`use_reader` sets a fresh one each time a query logs in).

    Raises:
        ValueError: ``url`` is not a PostgreSQL URL.
        StoreUnavailableError: the server is unreachable or the store is not migrated.
        ReaderUnavailableError: the URL's user may not create the role or change the
            privileges it must change.
    """
    parsed, label = _postgres(url)
    admin = connect_libpq(conninfo_params(parsed), label)
    try:
        limit_preparation(admin)
        return _prepare(admin, label, password=None, create=True)[0]
    finally:
        admin.close()


def use_reader(
    admin: Any, label: str, password: str | None, where: tuple[str, str]
) -> tuple[ReaderRole, bool]:
    """Make the existing reader role of the store ``where`` (database, schema) ready for a
    login on ``admin``'s session: take back what someone added to it, grant it reads on new
    ``wg_`` tables, and set ``password`` (when ``admin`` may manage roles). Nothing outside the
    role changes. Returns the role and whether its attributes and password were set.

    Raises:
        ReaderUnavailableError: there is no reader role (``wgstore db reader`` makes it), or
            ``admin``'s user may not grant to it.
    """
    return _prepare(admin, label, password=password, where=where, create=False)


def as_reader_session(url: str) -> tuple[str, ReaderRole]:
    """``url`` whose sessions act as the store's reader role: for a long-lived reader (``wgstore
    serve``) that logs in as the URL's user, with no password that expires.

    Uses the reader role ``wgstore db reader`` made (as :func:`use_reader`: it creates nothing)
    and adds ``-c role=<reader>`` to the URL's ``options``, so every connection switches to the
    reader at login (``SET ROLE``): what the sessions run has the reader's privileges only
    (``SELECT`` on the store). It guards against a bug of the reader's own code writing, not
    against code that could run ``RESET ROLE``: for other people's SQL,
    :func:`~wgstore.events.sql_reader.run_read_only` logs in as the reader itself.

    Raises:
        ValueError: ``url`` is not a PostgreSQL URL.
        StoreUnavailableError: the server is unreachable or the store is not migrated.
        ReaderUnavailableError: there is no reader role, or the URL's user may not grant to it.
    """
    parsed, label = _postgres(url)
    admin = connect_libpq(conninfo_params(parsed), label)
    try:
        limit_preparation(admin)
        reader = _prepare(admin, label, password=None, create=False)[0]
    finally:
        admin.close()
    options = parsed.query.get("options", "")
    if not isinstance(options, str):  # given twice: libpq takes them one after the other
        options = " ".join(options)
    switched = parsed.update_query_dict({"options": f"{options} -crole={reader.name}".strip()})
    return switched.render_as_string(hide_password=False), reader


def drop_reader(url: str | URL) -> DroppedReader:
    """Drop the reader role of the store at ``url`` (Postgres) and its privileges:
    ``wgstore db reader --drop``.

    When it is the last wgstore reader of the database, what preparing readers changed outside
    their roles is given back: ``EXECUTE`` to ``PUBLIC`` on the functions they revoked (only
    those ``PUBLIC`` may run by PostgreSQL's own defaults), the grants made for
    ``pg_signal_backend`` and the store's owner taken back, ``CREATE`` on ``public`` to
    ``PUBLIC`` where a server before 15 had it. While another reader of the database remains,
    that is left to it (it is written into that role's comment). Works when the store's tables
    are gone too (the URL's schema names the store).

    Raises:
        ValueError: ``url`` is not a PostgreSQL URL.
        StoreUnavailableError: the server is unreachable.
        ReaderUnavailableError: the URL's user may not drop the role or give the privileges
            back (a superuser may).
    """
    import psycopg
    from psycopg import sql

    parsed, label = _postgres(url)
    admin = connect_libpq(conninfo_params(parsed), label)
    try:
        limit_preparation(admin)
        database, schema = admin.execute(
            "SELECT current_database(), coalesce((SELECT n.nspname FROM pg_class c "
            "JOIN pg_namespace n ON n.oid = c.relnamespace "
            "WHERE c.oid = to_regclass('wg_events')), current_schema())"
        ).fetchone()
        name = reader_role_name(database, schema)
        try:
            with admin.transaction():
                _lock_readers_of(admin)
                found = admin.execute(
                    "SELECT shobj_description(oid, 'pg_authid') FROM pg_roles WHERE rolname = %s",
                    (name,),
                ).fetchone()
                if found is None:
                    return DroppedReader(name, existed=False)
                undo = _Record.read(found[0]).undo
                role = sql.Identifier(name)
                admin.execute(sql.SQL("DROP OWNED BY {}").format(role))
                admin.execute(sql.SQL("DROP ROLE {}").format(role))
                changes = _hand_over_or_give_back(admin, database, undo) if undo else []
        except (psycopg.errors.LockNotAvailable, psycopg.errors.QueryCanceled):
            raise waited_for_lock(label, name) from None
        except psycopg.errors.InsufficientPrivilege as error:
            raise ReaderUnavailableError(
                f"{label}: the user {admin.info.user!r} cannot drop the read-only role {name} "
                f"or give back what `wgstore db reader` took from PUBLIC ({first_line(error)}); "
                "run `wgstore db reader --drop` as a superuser"
            ) from None
        except psycopg.Error as error:
            raise StoreUnavailableError(f"{label}: {first_line(error)}") from None
        return DroppedReader(name, existed=True, changes=tuple(changes))
    finally:
        admin.close()


# ---------------------------------------------------------------------- sessions


def conninfo_params(url: URL) -> dict[str, Any]:
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


def connect_libpq(params: dict[str, Any], label: str) -> Any:
    """An autocommit psycopg connection; a failure is one line naming ``label``.

    Raises:
        StoreUnavailableError: the server refused the login or could not be reached.
    """
    import psycopg

    try:
        return psycopg.connect(autocommit=True, **params)
    except psycopg.Error as error:
        raise StoreUnavailableError(f"{label}: {first_line(error)}") from None


def first_line(error: BaseException) -> str:
    """The first line of an error's message (a driver's error spans several)."""
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__


def limit_preparation(admin: Any) -> None:
    """Bound how long preparing the reader may wait for a lock, or take at all."""
    admin.execute(f"SET lock_timeout = {int(_PREPARE_TIMEOUT_S * 1000)}")
    admin.execute(f"SET statement_timeout = {int(_PREPARE_TIMEOUT_S * 3000)}")


def store_schema(admin: Any, label: str) -> tuple[str, str]:
    """The database and schema of the store on ``admin``'s search path, once it is known to be
    a wgstore schema (its ``wg_events`` next to a ``wg_alembic_version`` with a revision).

    Raises:
        StoreUnavailableError: no ``wg_events`` on the search path.
        SchemaVersionError: the ``wg_events`` there is another application's.
        ReaderUnavailableError: ``admin``'s user may not read the store.
    """
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
                f"({first_line(error)}); run `wgstore db reader --url URL` once with a "
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


def waited_for_lock(label: str, name: str) -> ReaderUnavailableError:
    """The error of a preparation that waited ``_PREPARE_TIMEOUT_S`` for its lock."""
    return ReaderUnavailableError(
        f"{label}: waited {_PREPARE_TIMEOUT_S:g} s for a lock that serializes preparing the "
        f"read-only role {name} (the role's own, or the one every reader of the database "
        "shares), and gave up: another session holds it (pg_locks, locktype 'advisory', shows "
        "which); retry when it ends, or end it"
    )


def _postgres(url: str | URL) -> tuple[URL, str]:
    parsed = parse_url(url)
    if parsed.get_backend_name() == "sqlite":
        raise ValueError("the reader role is for PostgreSQL; SQLite is opened read-only itself")
    return parsed, mask_url(parsed)


def _lock_readers_of(admin: Any) -> None:
    """Serialize, until the transaction ends, the preparers of every reader of this database:
    CREATE ROLE races otherwise, and so do the GRANTs and REVOKEs on the database and on its
    built-in functions that readers of different schemas share ("tuple concurrently
    updated"), and the records of what they changed (:class:`_Record`)."""
    admin.execute("SELECT pg_advisory_xact_lock(hashtext('wgstore reader ' || current_database()))")


def _missing(label: str, name: str) -> ReaderUnavailableError:
    return ReaderUnavailableError(
        f"{label}: there is no read-only role for this store yet ({name}); make it once with "
        "`wgstore db reader --url URL` as a superuser (docs/sql.md says what that changes in "
        f"the database), or give --reader-url (or {READER_URL_ENV}) for a login that can only "
        "read"
    )


# ---------------------------------------------------------------------- preparing the role


@dataclass
class _Undo:
    """What preparing readers changed outside their roles, to give back with the last one.

    Function signatures and role names as the database writes them (``regprocedure``,
    ``regrole``); they are looked up again before anything is given back.
    """

    public_execute: set[str] = field(default_factory=set)
    """Functions whose ``EXECUTE`` was revoked from ``PUBLIC``."""
    granted_execute: set[tuple[str, str]] = field(default_factory=set)
    """(role, function) ``EXECUTE`` grants made so a role keeps what it had through PUBLIC."""
    public_create: set[str] = field(default_factory=set)
    """Schemas whose ``CREATE`` was revoked from ``PUBLIC``."""

    def __bool__(self) -> bool:
        return bool(self.public_execute or self.granted_execute or self.public_create)

    def merged(self, other: _Undo) -> _Undo:
        return _Undo(
            self.public_execute | other.public_execute,
            self.granted_execute | other.granted_execute,
            self.public_create | other.public_create,
        )


@dataclass
class _Record:
    """The reader role's comment: a sentence for people, then the store and its :class:`_Undo`
    as JSON (a role made by an older wgstore has only the sentence)."""

    store: tuple[str, str] | None
    undo: _Undo

    @classmethod
    def read(cls, comment: str | None) -> _Record:
        _, _, data = (comment or "").partition("\n")
        try:
            found = json.loads(data)
            store = (str(found["store"][0]), str(found["store"][1]))
            undo = found.get("undo", {})
            return cls(
                store,
                _Undo(
                    {str(f) for f in undo.get("public_execute", [])},
                    {(str(r), str(f)) for r, f in undo.get("granted_execute", [])},
                    {str(s) for s in undo.get("public_create", [])},
                ),
            )
        except (ValueError, KeyError, TypeError, IndexError):
            return cls(None, _Undo())

    def text(self) -> str:
        assert self.store is not None
        data = {
            "store": list(self.store),
            "undo": {
                "public_execute": sorted(self.undo.public_execute),
                "granted_execute": sorted(list(pair) for pair in self.undo.granted_execute),
                "public_create": sorted(self.undo.public_create),
            },
        }
        return _COMMENT.format(store=".".join(self.store)) + "\n" + json.dumps(data)


def _prepare(
    admin: Any,
    label: str,
    *,
    password: str | None,
    create: bool,
    where: tuple[str, str] | None = None,
) -> tuple[ReaderRole, bool]:
    """Create (``create``) or tidy the reader role and set ``password``, in one transaction.

    Returns the role and whether its attributes and password were set: a user who may not
    manage roles can still grant reads on the tables it owns to a reader a superuser made.
    """
    import psycopg
    from psycopg import sql

    database, schema = where or store_schema(admin, label)
    name = reader_role_name(database, schema)
    role = sql.Identifier(name)
    changes: list[str] = []
    undo = _Undo()
    try:
        with admin.transaction():
            _lock_readers_of(admin)
            valid_until, may_manage, exists, tidy, superuser = admin.execute(
                _ROLE_STATE, (READER_CONNECTION_LIMIT, name)
            ).fetchone()
            if not exists and not create:
                raise _missing(label, name)
            managed = not exists or bool(may_manage)
            if managed and not tidy:
                _own_role(admin, name, create=not exists)
            if managed:
                _apply_settings(admin, name)
            relations = _grant_reads(
                admin, role, (database, schema), name, changes, undo if create else None
            )
            if create:
                _deny_functions(
                    admin, label, name, database, schema, bool(superuser), changes, undo
                )
                if managed:  # (the privileges of PUBLIC changed only for a superuser)
                    _write_record(admin, name, (database, schema), undo)
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
        raise waited_for_lock(label, name) from None
    except psycopg.errors.InsufficientPrivilege as error:
        user = admin.info.user
        raise ReaderUnavailableError(
            f"{label}: the user {user!r} cannot prepare the read-only role {name} "
            f"({first_line(error)}); run `wgstore db reader --url URL` once with a superuser "
            "or a CREATEROLE user that owns the tables, or give --reader-url (or "
            f"{READER_URL_ENV}) for a login that can only read"
        ) from None
    except psycopg.Error as error:
        raise StoreUnavailableError(f"{label}: {first_line(error)}") from None
    return ReaderRole(name, database, schema, relations, tuple(changes)), managed


# When a fresh password expires; whether the current user may manage roles; whether the reader
# exists; whether it already is a login with no other attribute, the connection limit and no
# membership; whether the current user is a superuser.
_ROLE_STATE = f"""
SELECT (now() + interval '{_PASSWORD_VALID_S} seconds')::text,
       (SELECT rolsuper OR rolcreaterole FROM pg_roles WHERE rolname = current_user),
       r.oid IS NOT NULL,
       coalesce(r.rolcanlogin AND NOT (r.rolsuper OR r.rolcreatedb OR r.rolcreaterole
           OR r.rolinherit OR r.rolreplication OR r.rolbypassrls) AND r.rolconnlimit = %s
           AND NOT EXISTS (SELECT 1 FROM pg_auth_members m WHERE m.member = r.oid), false),
       (SELECT rolsuper FROM pg_roles WHERE rolname = current_user)
FROM (SELECT 1) AS one LEFT JOIN pg_roles AS r ON r.rolname = %s
"""


def _own_role(admin: Any, name: str, *, create: bool) -> None:
    """Make ``name`` a login with the connection limit, no other attribute, no membership."""
    from psycopg import sql

    role = sql.Identifier(name)
    attributes = sql.SQL(
        "LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOINHERIT NOREPLICATION NOBYPASSRLS "
        "CONNECTION LIMIT {}"
    ).format(sql.Literal(READER_CONNECTION_LIMIT))
    if create:
        admin.execute(sql.SQL("CREATE ROLE {} {}").format(role, attributes))
    else:
        admin.execute(sql.SQL("ALTER ROLE {} {}").format(role, attributes))
    for (member_of,) in admin.execute(
        "SELECT m.roleid::regrole::text FROM pg_auth_members m "
        "JOIN pg_roles r ON r.oid = m.member WHERE r.rolname = %s",
        (name,),
    ).fetchall():
        admin.execute(sql.SQL("REVOKE {} FROM {}").format(sql.SQL(member_of), role))


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


def _grant_reads(
    admin: Any,
    role: Any,
    store: tuple[str, str],
    name: str,
    changes: list[str],
    undo: _Undo | None,
) -> tuple[str, ...]:
    """Grant the reader ``SELECT`` on the store's ``wg_`` tables and views and take back any
    write; with ``undo`` (``wgstore db reader``) also revoke ``CREATE`` on the schema from
    ``PUBLIC`` where it has it, recorded in ``undo``."""
    from psycopg import sql

    database, schema = store
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
        if public and undo is not None:  # through PUBLIC: 14 and older grant it on public
            admin.execute(
                sql.SQL("REVOKE CREATE ON SCHEMA {} FROM PUBLIC").format(sql.Identifier(schema))
            )
            undo.public_create.add(schema)
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


def _deny_functions(
    admin: Any,
    label: str,
    name: str,
    database: str,
    schema: str,
    superuser: bool,
    changes: list[str],
    undo: _Undo,
) -> None:
    """Make sure the reader cannot run :data:`DANGEROUS_FUNCTIONS` (EXECUTE is PUBLIC's).

    PostgreSQL has no per-role denial: a privilege of PUBLIC is every role's. So EXECUTE is
    revoked from PUBLIC (and the reader) in this database; ``pg_signal_backend`` gets the two
    signalling functions back and the store's owner the advisory locks (wgstore's migrations
    take one). Only a superuser may change the privileges of built-in functions. What PUBLIC
    had, and what was granted, goes into ``undo``.
    """
    from psycopg import sql

    found = admin.execute(
        DANGEROUS_FUNCTIONS_SQL, {"names": list(DANGEROUS_FUNCTIONS), "role": name}
    ).fetchall()
    if found and not superuser:
        signature, kind = found[0]
        raise ReaderUnavailableError(
            f"{label}: the read-only role {name} may run {signature}, with which a query could "
            f"{DANGEROUS_FUNCTIONS[kind]} (PostgreSQL lets every role run it); run "
            "`wgstore db reader --url URL` once as a superuser: it revokes EXECUTE on such "
            f"functions from PUBLIC in database {database} (docs/sql.md says which)"
        )
    kinds = []
    for signature, kind in found:
        function = sql.SQL(signature)
        (public,) = admin.execute(
            "SELECT has_function_privilege('public', %s::regprocedure, 'EXECUTE')", (signature,)
        ).fetchone()
        admin.execute(
            sql.SQL("REVOKE EXECUTE ON FUNCTION {} FROM PUBLIC, {}").format(
                function, sql.Identifier(name)
            )
        )
        if public:
            undo.public_execute.add(signature)
        if kind in ("pg_terminate_backend", "pg_cancel_backend"):
            _keep(admin, "pg_signal_backend", signature, undo)
        if kind not in kinds:
            kinds.append(kind)
    if found:
        changes.append(
            f"revoked EXECUTE from PUBLIC in database {database} on {len(found)} functions a "
            f"read-only role must not run ({', '.join(kinds)}); other roles in this database "
            "that are not superusers now need GRANT EXECUTE ON FUNCTION ... TO role to use "
            "them (pg_signal_backend keeps pg_cancel_backend and pg_terminate_backend, the "
            "store's owner keeps the advisory locks); `wgstore db reader --drop` gives them "
            "back"
        )
    if superuser:
        owner = _owner_keeps_advisory_locks(admin, schema, undo)
        if owner:
            changes.append(
                f"granted EXECUTE on the advisory lock functions to {owner}, the owner of the "
                "store's tables (wgstore's migrations take an advisory lock)"
            )


def _keep(admin: Any, grantee: str, signature: str, undo: _Undo) -> None:
    """Grant ``grantee`` EXECUTE on ``signature`` unless it has it already (recorded)."""
    from psycopg import sql

    (has,) = admin.execute(
        "SELECT has_function_privilege(%s, %s::regprocedure, 'EXECUTE')", (grantee, signature)
    ).fetchone()
    if not has:
        admin.execute(
            sql.SQL("GRANT EXECUTE ON FUNCTION {} TO {}").format(
                sql.SQL(signature), sql.Identifier(grantee)
            )
        )
        undo.granted_execute.add((grantee, signature))


def _owner_keeps_advisory_locks(admin: Any, schema: str, undo: _Undo) -> str | None:
    """Grant the advisory lock functions to the owner of the store's tables where it lost
    them (not a superuser); returns the owner when something was granted."""
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
        _keep(admin, owner, signature, undo)
    return str(rows[0][1]) if rows else None


def _write_record(admin: Any, name: str, store: tuple[str, str], undo: _Undo) -> None:
    """Merge ``undo`` into the reader's comment (:class:`_Record`), when it changes it."""
    from psycopg import sql

    (comment,) = admin.execute(
        "SELECT shobj_description(oid, 'pg_authid') FROM pg_roles WHERE rolname = %s", (name,)
    ).fetchone()
    before = _Record.read(comment)
    after = _Record(store, before.undo.merged(undo))
    if after != before:
        admin.execute(
            sql.SQL("COMMENT ON ROLE {} IS {}").format(
                sql.Identifier(name), sql.Literal(after.text())
            )
        )


# ---------------------------------------------------------------------- dropping the role


def _hand_over_or_give_back(admin: Any, database: str, undo: _Undo) -> list[str]:
    """After a reader was dropped: leave ``undo`` to another reader of ``database`` when one
    remains (merged into its record), else give it back. Returns what was done, in sentences."""
    from psycopg import sql

    for other, comment in admin.execute(
        "SELECT rolname, shobj_description(oid, 'pg_authid') FROM pg_roles "
        "WHERE rolname LIKE 'wgstore\\_reader\\_%%' ORDER BY rolname"
    ).fetchall():
        record = _Record.read(comment)
        if record.store is not None and record.store[0] == database:
            merged = _Record(record.store, record.undo.merged(undo))
            admin.execute(
                sql.SQL("COMMENT ON ROLE {} IS {}").format(
                    sql.Identifier(other), sql.Literal(merged.text())
                )
            )
            return [
                f"kept what `wgstore db reader` took from PUBLIC in database {database}: the "
                f"reader of schema {record.store[1]} ({other}) still needs it; dropping that "
                "one gives it back"
            ]
    return _give_back(admin, undo)


# Of the given functions, those PUBLIC may run by PostgreSQL's own defaults (initdb's or the
# extension's privileges, pg_init_privs; else the default for a function) and not now.
_RESTORABLE = """
SELECT p.oid::regprocedure::text
FROM pg_proc p
LEFT JOIN pg_init_privs i
       ON i.objoid = p.oid AND i.classoid = 'pg_proc'::regclass AND i.objsubid = 0
WHERE p.oid IN (SELECT f::regprocedure FROM unnest(%s::text[]) AS f)
  AND aclcontains(coalesce(i.initprivs, acldefault('f', p.proowner)),
                  makeaclitem(0, p.proowner, 'EXECUTE', false))
  AND NOT has_function_privilege('public', p.oid, 'EXECUTE')
ORDER BY 1
"""


def _give_back(admin: Any, undo: _Undo) -> list[str]:
    """Undo what preparing the readers of this database changed outside their roles.

    Everything is looked up again in the catalogs (a comment is text anyone who may alter the
    role could have edited), and no text of it reaches a statement: only functions of
    :data:`DANGEROUS_FUNCTIONS` that PUBLIC may run by PostgreSQL's defaults get EXECUTE back,
    grants are only taken back, and CREATE on ``public`` goes back to PUBLIC only on servers
    before 15, whose default it was.
    """
    from psycopg import sql

    changes = []
    asked = [f for f in (_function(admin, f) for f in sorted(undo.public_execute)) if f]
    restored = [
        signature
        for (signature,) in admin.execute(_RESTORABLE, (asked,)).fetchall()
        if _is_dangerous(signature)
    ]
    for signature in restored:
        admin.execute(sql.SQL("GRANT EXECUTE ON FUNCTION {} TO PUBLIC").format(sql.SQL(signature)))
    if restored:
        changes.append(
            f"gave EXECUTE back to PUBLIC on {len(restored)} functions `wgstore db reader` had "
            "revoked"
        )
    taken = 0
    for grantee, given in sorted(undo.granted_execute):
        function = _function(admin, given)
        found = admin.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (grantee,)).fetchone()
        if function and found:
            admin.execute(
                sql.SQL("REVOKE EXECUTE ON FUNCTION {} FROM {}").format(
                    sql.SQL(function), sql.Identifier(grantee)
                )
            )
            taken += 1
    if taken:
        changes.append(
            f"took back the {taken} EXECUTE grants it had made so pg_signal_backend and the "
            "store's owner kept them (PUBLIC has them again)"
        )
    if "public" in undo.public_create and admin.info.server_version < 150000:
        admin.execute("GRANT CREATE ON SCHEMA public TO PUBLIC")
        changes.append("gave CREATE on schema public back to PUBLIC (this server's default)")
    return changes


def _function(admin: Any, signature: str) -> str | None:
    """The database's own text of the function ``signature`` names (``regprocedure``), or None
    when there is none or it is not a function signature at all."""
    import psycopg

    try:
        with admin.transaction():  # a savepoint: a malformed signature fails only itself
            row = admin.execute("SELECT to_regprocedure(%s)::text", (signature,)).fetchone()
    except psycopg.Error:
        return None
    return str(row[0]) if row and row[0] else None


def _is_dangerous(signature: str) -> bool:
    name = signature.split("(", 1)[0].rsplit(".", 1)[-1].strip('"')
    return (
        name in DANGEROUS_FUNCTIONS
        or (name.startswith("pg_") and "advisory" in name)
        or name.startswith("dblink")
    )
