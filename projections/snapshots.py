"""Snapshots: the folded state of a long stream, saved so the latest state needs only the tail.

A snapshot is a row of ``wg_snapshots`` (``name``, ``stream_id``): the state serialized with
msgspec as JSON, the stream version it was folded up to, and a fingerprint of the state's
schema. The fingerprint hashes the JSON schema msgspec derives from the state class together with
:data:`SNAPSHOT_FORMAT`, so any change to the state's fields, or a change of meaning declared by
bumping :data:`SNAPSHOT_FORMAT`, makes old snapshots unreadable: they are ignored and rebuilt
from the log, never trusted.

Every snapshot is sealed to the log (:func:`wgstore.events.hashing.seal_snapshot`): a checksum
over its name, stream, version, schema and state together with the stream hash of the event at
its version, and with the store's HMAC key a MAC over the same. A snapshot is used only when the
seal matches the log as it is now (one indexed lookup): an edited row, or a snapshot of a stream
that was rewritten since, is ignored and the state folded from the log. ``EventStore.verify``
checks every row the same way.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, TypedDict

import msgspec

from wgstore.events.hashing import open_snapshot, seal_snapshot
from wgstore.projections._db import fetch, is_postgres, param
from wgstore.projections.state import WorkerGroupState

if TYPE_CHECKING:
    import sqlalchemy as sa

    from wgstore.events.store import EventStore

# SQLAlchemy loads in the functions that build statements with it, not at import: the package
# imports this module, and a process that only folds events (a Ray Train controller) must not
# pay for SQLAlchemy (~0.25 s).

__all__ = [
    "READ_MODELS_SNAPSHOT",
    "SNAPSHOT_FORMAT",
    "STATE_SCHEMA",
    "WORKER_GROUP_SNAPSHOT",
    "SnapshotRow",
    "decode_state",
    "encode_state",
    "fingerprint",
    "latest_snapshot_and_head",
    "load_latest_snapshot",
    "load_row",
    "load_snapshot",
    "save_row",
    "save_snapshot",
]


class SnapshotRow(TypedDict):
    """A ``wg_snapshots`` row to upsert (:func:`insert_snapshot_rows`): its columns, the state
    as sealed JSON text (``state_text``, bound to the ``state`` column)."""

    name: str
    stream_id: str
    stream_version: int
    schema: str
    state_text: str
    created_at: datetime


SNAPSHOT_FORMAT = 2
"""Bump when the meaning of a state field changes without its type changing (2: sealed to the
log; unsealed rows of format 1 are replaced by the next save)."""

WORKER_GROUP_SNAPSHOT = "worker_group"
"""The ``wg_snapshots.name`` of worker-group state snapshots."""

READ_MODELS_SNAPSHOT = "read-models"
"""The ``wg_snapshots.name`` of the states the projector continues from: it saves a group's when
it first folds it, then every ``SNAPSHOT_EVERY`` events and at the group's end (the executor
keeps the projector caught up every few seconds), so the latest state of a live group always
has a recent snapshot without anyone asking for one."""


def fingerprint(cls: type) -> str:
    """A fingerprint of ``cls``'s msgspec JSON schema and :data:`SNAPSHOT_FORMAT`."""
    schema = msgspec.json.encode(msgspec.json.schema(cls), order="sorted")
    digest = hashlib.sha256(schema + f"|format={SNAPSHOT_FORMAT}".encode()).hexdigest()
    return f"{cls.__name__}/{SNAPSHOT_FORMAT}/{digest[:16]}"


STATE_SCHEMA = fingerprint(WorkerGroupState)
"""The fingerprint of :class:`WorkerGroupState` that snapshots written by this code carry."""

_encoder = msgspec.json.Encoder()
_decoder = msgspec.json.Decoder(WorkerGroupState)


def encode_state(state: WorkerGroupState) -> str:
    """The state as JSON text."""
    return _encoder.encode(state).decode()


def decode_state(text: str | bytes) -> WorkerGroupState:
    """A state from the JSON text :func:`encode_state` made.

    Raises:
        msgspec.ValidationError: the text does not fit the state's current schema.
    """
    return _decoder.decode(text)


def _key(target: EventStore | sa.Connection, hmac_key: bytes | None) -> bytes | None:
    """The key snapshots are sealed with: the given one, else a store's own."""
    return hmac_key if hmac_key is not None else getattr(target, "hmac_key", None)


def _event_hash(source: EventStore | sa.Connection, stream_id: str, version: int) -> str | None:
    """The stream hash of the event at ``version`` in the log ``source`` reads."""
    import sqlalchemy as sa

    from wgstore.events.schema import wg_events

    if isinstance(source, sa.Connection):
        return source.execute(
            sa.select(wg_events.c.hash).where(
                wg_events.c.stream_id == stream_id, wg_events.c.stream_version == version
            )
        ).scalar()
    p = param(source)
    rows = fetch(
        source,
        f"SELECT hash FROM wg_events WHERE stream_id = {p} AND stream_version = {p}",
        (stream_id, version),
    )
    return rows[0][0] if rows else None


def save_snapshot(
    target: EventStore | sa.Connection,
    state: WorkerGroupState,
    *,
    name: str = WORKER_GROUP_SNAPSHOT,
    hmac_key: bytes | None = None,
    log: EventStore | None = None,
) -> None:
    """Save ``state`` as the snapshot ``name`` of its stream, replacing an older one.

    A snapshot never moves backwards: one already at a higher version is kept.

    Args:
        target: a store (its own transaction) or a connection inside the caller's transaction.
        state: the state to save.
        name: which projection the snapshot belongs to.
        hmac_key: seal it with this key too (default: the store's key, if ``target`` is one).
        log: the store whose log it is sealed to, when ``target`` is a connection to another
            database (the projector's scratch file); default: ``target``'s own ``wg_events``.
    """
    save_row(
        target,
        name,
        state.stream_id,
        state.version,
        STATE_SCHEMA,
        encode_state(state),
        hmac_key=hmac_key,
        log=log,
    )


def save_row(
    target: EventStore | sa.Connection,
    name: str,
    stream_id: str,
    version: int,
    schema: str,
    text: str,
    *,
    hmac_key: bytes | None = None,
    log: EventStore | None = None,
) -> None:
    """Upsert one ``wg_snapshots`` row (kept if the stored one is newer and of the same schema),
    sealed to the event at ``version`` (see the module docstring).

    Raises:
        ValueError: the stream has no event at ``version``.
    """
    import sqlalchemy as sa

    key = _key(target, hmac_key)
    if isinstance(target, sa.Connection):
        _save(target, name, stream_id, version, schema, text, key, log)
        return
    with target.engine.begin() as connection:
        _save(connection, name, stream_id, version, schema, text, key, log)


def _save(
    connection: sa.Connection,
    name: str,
    stream_id: str,
    version: int,
    schema: str,
    text: str,
    key: bytes | None,
    log: EventStore | None,
) -> None:
    event_hash = _event_hash(log or connection, stream_id, version)
    if event_hash is None:
        raise ValueError(f"stream {stream_id!r} has no event at version {version} to snapshot")
    row: SnapshotRow = {
        "name": name,
        "stream_id": stream_id,
        "stream_version": version,
        "schema": schema,
        "state_text": seal_snapshot(key, name, stream_id, version, schema, event_hash, text),
        "created_at": datetime.now(UTC),
    }
    insert_snapshot_rows(connection, [row])


def snapshot_rows(
    states: list[tuple[WorkerGroupState, str]], *, name: str, hmac_key: bytes | None
) -> list[SnapshotRow]:
    """The ``wg_snapshots`` rows of many states as snapshots ``name``, each encoded and sealed
    to the given stream hash of the event at its version (the caller folded that event and has
    its hash), as :func:`save_snapshot` seals one. No I/O: a caller can build them before it
    opens the transaction that writes them (:func:`insert_snapshot_rows`)."""
    now = datetime.now(UTC)
    return [
        {
            "name": name,
            "stream_id": state.stream_id,
            "stream_version": state.version,
            "schema": STATE_SCHEMA,
            "state_text": seal_snapshot(
                hmac_key, name, state.stream_id, state.version, STATE_SCHEMA, event_hash,
                encode_state(state), check_duplicates=False,  # our own encoding
            ),
            "created_at": now,
        }
        for state, event_hash in states
    ]  # fmt: skip


def insert_snapshot_rows(connection: sa.Connection, rows: list[SnapshotRow]) -> None:
    """Upsert ``wg_snapshots`` rows (:func:`snapshot_rows`) in one statement: a stored row is
    kept if it is newer and of the same schema."""
    if not rows:
        return
    import sqlalchemy as sa
    from sqlalchemy.dialects import postgresql
    from sqlalchemy.dialects import sqlite as sqlite_dialect

    from wgstore.events.schema import wg_snapshots

    postgres = connection.dialect.name == "postgresql"
    state_value: Any = sa.bindparam("state_text", type_=sa.Text())
    if postgres:
        state_value = sa.cast(state_value, postgresql.JSONB())
    dialect = postgresql if postgres else sqlite_dialect
    insert = dialect.insert(wg_snapshots).values(
        name=sa.bindparam("name"),
        stream_id=sa.bindparam("stream_id"),
        stream_version=sa.bindparam("stream_version"),
        schema=sa.bindparam("schema"),
        state=state_value,
        created_at=sa.bindparam("created_at"),
    )
    excluded = insert.excluded
    newer = sa.or_(
        wg_snapshots.c.stream_version < excluded.stream_version,
        wg_snapshots.c.schema != excluded.schema,
    )
    statement = insert.on_conflict_do_update(
        index_elements=["name", "stream_id"],
        set_={
            "stream_version": excluded.stream_version,
            "schema": excluded.schema,
            "state": excluded.state,
            "created_at": excluded.created_at,
        },
        where=newer,
    )
    connection.execute(statement, rows)


def load_snapshots(
    connection: sa.Connection,
    stream_ids: list[str],
    *,
    name: str,
    hmac_key: bytes | None = None,
    log: EventStore | None = None,
) -> dict[str, WorkerGroupState]:
    """The usable snapshots ``name`` of ``stream_ids`` (as :func:`load_snapshot` judges one),
    by stream, in two queries: the rows, then the log's hashes at their versions (read through
    ``log`` when given, as :func:`load_row` does)."""
    if not stream_ids:
        return {}
    import sqlalchemy as sa

    from wgstore.events.schema import wg_events, wg_snapshots

    query = sa.select(
        wg_snapshots.c.stream_id,
        wg_snapshots.c.stream_version,
        wg_snapshots.c.schema,
        sa.cast(wg_snapshots.c.state, sa.Text()),
    ).where(wg_snapshots.c.name == name, wg_snapshots.c.stream_id.in_(stream_ids))
    rows = list(connection.execute(query))
    hashes: dict[tuple[str, int], str] = {}
    for start in range(0, len(rows), 200):
        chunk = rows[start : start + 200]
        if log is not None:  # outside the caller's transaction, as _event_hash reads one
            p = param(log)
            pairs = " OR ".join([f"(stream_id = {p} AND stream_version = {p})"] * len(chunk))
            found = fetch(
                log,
                f"SELECT stream_id, stream_version, hash FROM wg_events WHERE {pairs}",
                [value for row in chunk for value in (row[0], row[1])],
            )
        else:
            where = sa.or_(
                *[
                    sa.and_(wg_events.c.stream_id == row[0], wg_events.c.stream_version == row[1])
                    for row in chunk
                ]
            )
            found = list(
                connection.execute(
                    sa.select(
                        wg_events.c.stream_id, wg_events.c.stream_version, wg_events.c.hash
                    ).where(where)
                )
            )
        hashes.update({(sid, int(version)): event_hash for sid, version, event_hash in found})
    key = _key(log if log is not None else connection, hmac_key)
    # jsonb's rendering names no key twice: the faster canonical form gives the same bytes.
    jsonb = connection.dialect.name == "postgresql"
    states = {}
    for stream_id, version, schema, text in rows:
        opened, _ = open_snapshot(
            key,
            name,
            stream_id,
            int(version),
            str(schema),
            hashes.get((stream_id, int(version))),
            text,
            check_duplicates=not jsonb,
        )
        if opened is None:
            continue
        state = _state_of_row((int(version), str(schema), opened.decode()), stream_id, None)
        if state is not None:
            states[stream_id] = state
    return states


def load_row(
    target: EventStore | sa.Connection,
    name: str,
    stream_id: str,
    *,
    hmac_key: bytes | None = None,
    log: EventStore | None = None,
) -> tuple[int, str, str] | None:
    """The ``(stream_version, schema, state as JSON text)`` of one ``wg_snapshots`` row.

    None when there is none, or when its seal does not match the log as it is now (checked with
    ``hmac_key``, default: the store's key if ``target`` is one): the caller folds the log.
    ``log``: as for :func:`save_snapshot`.
    """
    import sqlalchemy as sa

    from wgstore.events.schema import wg_events, wg_snapshots

    if log is not None and isinstance(target, sa.Connection):
        query = sa.select(
            wg_snapshots.c.stream_version,
            wg_snapshots.c.schema,
            sa.cast(wg_snapshots.c.state, sa.Text()),
        ).where(wg_snapshots.c.name == name, wg_snapshots.c.stream_id == stream_id)
        found = target.execute(query).first()
        row = None
        if found is not None:
            row = (*found, _event_hash(log, stream_id, int(found[0])))
    elif isinstance(target, sa.Connection):
        query = (
            sa.select(
                wg_snapshots.c.stream_version,
                wg_snapshots.c.schema,
                sa.cast(wg_snapshots.c.state, sa.Text()),
                wg_events.c.hash,
            )
            .select_from(wg_snapshots)
            .outerjoin(
                wg_events,
                sa.and_(
                    wg_events.c.stream_id == wg_snapshots.c.stream_id,
                    wg_events.c.stream_version == wg_snapshots.c.stream_version,
                ),
            )
            .where(wg_snapshots.c.name == name, wg_snapshots.c.stream_id == stream_id)
        )
        row = target.execute(query).first()
    else:
        state_text = "s.state::text" if is_postgres(target) else "s.state"
        p = param(target)
        rows = fetch(
            target,
            f"SELECT s.stream_version, s.schema, {state_text}, e.hash FROM wg_snapshots s "
            "LEFT JOIN wg_events e ON e.stream_id = s.stream_id "
            "AND e.stream_version = s.stream_version "
            f"WHERE s.name = {p} AND s.stream_id = {p}",
            (name, stream_id),
        )
        row = rows[0] if rows else None
    if row is None:
        return None
    version, schema = int(row[0]), str(row[1])
    state, _ = open_snapshot(
        _key(target, hmac_key), name, stream_id, version, schema, row[3], row[2]
    )
    return None if state is None else (version, schema, state.decode())


def load_snapshot(
    target: EventStore | sa.Connection,
    stream_id: str,
    *,
    name: str = WORKER_GROUP_SNAPSHOT,
    max_version: int | None = None,
    hmac_key: bytes | None = None,
    log: EventStore | None = None,
) -> WorkerGroupState | None:
    """The snapshot ``name`` of ``stream_id``, or ``None``.

    A snapshot of another schema, one that no longer decodes, one past ``max_version``, or one
    whose seal does not match the log (:func:`load_row`) is ignored (``None``): the caller folds
    from the log instead.
    """
    row = load_row(target, name, stream_id, hmac_key=hmac_key, log=log)
    return None if row is None else _state_of_row(row, stream_id, max_version)


def _state_of_row(
    row: tuple[int, str, str], stream_id: str, max_version: int | None
) -> WorkerGroupState | None:
    """The state a checked snapshot row holds, or None when it is of no use (as
    :func:`load_snapshot` says)."""
    version, schema, text = row
    if schema != STATE_SCHEMA or (max_version is not None and version > max_version):
        return None
    try:
        state = decode_state(text)
    except (msgspec.ValidationError, msgspec.DecodeError, ValueError, TypeError):
        return None
    if state.version != version or state.stream_id != stream_id:
        return None
    return state


def load_latest_snapshot(
    target: EventStore | sa.Connection,
    stream_id: str,
    *,
    names: tuple[str, ...] = (WORKER_GROUP_SNAPSHOT, READ_MODELS_SNAPSHOT),
    max_version: int | None = None,
) -> WorkerGroupState | None:
    """The most advanced valid snapshot of ``stream_id`` among ``names``, or ``None``.

    Every snapshot of a ``WorkerGroupState`` is the exact fold of its stream up to its version,
    whoever saved it, so the newest usable one is the best base. Invalid ones are skipped as
    :func:`load_snapshot` does.
    """
    import sqlalchemy as sa

    if isinstance(target, sa.Connection):
        states = [
            load_snapshot(target, stream_id, name=name, max_version=max_version) for name in names
        ]
        return _newest(states)
    return latest_snapshot_and_head(target, stream_id, names=names, max_version=max_version)[0]


def latest_snapshot_and_head(
    store: EventStore,
    stream_id: str,
    *,
    names: tuple[str, ...] = (WORKER_GROUP_SNAPSHOT, READ_MODELS_SNAPSHOT),
    max_version: int | None = None,
) -> tuple[WorkerGroupState | None, int | None]:
    """:func:`load_latest_snapshot`, and the version of the stream's last event read in the
    same statement (None when the stream has no snapshot under ``names``): a snapshot at that
    version leaves nothing to fold, so the caller need not read the stream."""
    rows, head = _checked_rows(store, names, stream_id)
    return _newest(_state_of_row(row, stream_id, max_version) for row in rows), head


def _newest(states: Iterable[WorkerGroupState | None]) -> WorkerGroupState | None:
    best: WorkerGroupState | None = None
    for state in states:
        if state is not None and (best is None or state.version > best.version):
            best = state
    return best


def _checked_rows(
    store: EventStore, names: tuple[str, ...], stream_id: str
) -> tuple[list[tuple[int, str, str]], int | None]:
    """The ``wg_snapshots`` rows of ``stream_id`` under ``names`` whose seal matches the log,
    read in one query (as :func:`load_row` reads one), and the stream's version then (None
    when there is no row)."""
    state_text = "s.state::text" if is_postgres(store) else "s.state"
    p = param(store)
    rows = fetch(
        store,
        f"SELECT s.name, s.stream_version, s.schema, {state_text}, e.hash, "
        f"(SELECT max(h.stream_version) FROM wg_events h WHERE h.stream_id = {p}) "
        "FROM wg_snapshots s LEFT JOIN wg_events e ON e.stream_id = s.stream_id "
        "AND e.stream_version = s.stream_version "
        f"WHERE s.stream_id = {p} AND s.name IN ({', '.join([p] * len(names))})",
        (stream_id, stream_id, *names),
    )
    checked = []
    key = _key(store, None)
    for name, version, schema, state_text_value, event_hash, _head in rows:
        state, _ = open_snapshot(
            key, name, stream_id, int(version), str(schema), event_hash, state_text_value
        )
        if state is not None:
            checked.append((int(version), str(schema), state.decode()))
    head = int(rows[0][5]) if rows and rows[0][5] is not None else None
    return checked, head
