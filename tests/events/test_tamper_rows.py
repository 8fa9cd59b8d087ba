"""Rows put in with a plain INSERT: refused by the schema (0012), and named by ``verify`` when
someone who owns the database lifts the refusal. Issue 41, items 1 and 3, on both backends.

``read_stream`` reads a stream by version, whatever the positions: every row a reader can read
must be one ``verify`` checks. The forger here has this code and no key: it chains the forged
event's stream hash after the stream's last, as an append would.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable

import pytest
import sqlalchemy as sa

from tests.events.test_tamper import KEY, _event, _fill, _problems_naming, _tamper
from wgstore.events import EventStore
from wgstore.events.hashing import GENESIS, chain_hash, epoch_us, log_hash
from wgstore.events.sqlite_recorder import parse_time

_DATA = '{"abort":false,"reason":"forged"}'


def _forged_event(
    store: EventStore, position: int | None, *, stream: str = "s-1", event_id: str | None = None
) -> Callable[[sa.Connection], None]:
    """A plain INSERT of a forged ``WorkerGroupShutdownRequested`` at ``position`` (None: where
    the log hands out the next one), as the next version of ``stream``: its stream hash chained
    after the stream's last, its log hash after the row before it (no MAC)."""

    def insert(connection: sa.Connection) -> None:
        nonlocal position
        if position is None:
            position = connection.exec_driver_sql(
                "SELECT nextval(pg_get_serial_sequence('wg_events', 'position'))"
                if store.is_postgres
                else "SELECT max(position) + 1 FROM wg_events"
            ).scalar_one()
        casts = "::text" if store.is_postgres else ""
        version, previous, at, meta = connection.exec_driver_sql(
            f"SELECT stream_version, hash, recorded_at, metadata{casts} FROM wg_events "
            f"WHERE stream_id = '{stream}' ORDER BY stream_version DESC LIMIT 1"
        ).one()
        data = _DATA
        if store.is_postgres:  # the stream hash covers the text as jsonb renders it
            data = connection.exec_driver_sql(f"SELECT '{_DATA}'::jsonb::text").scalar_one()
        moment = parse_time(at) if isinstance(at, str) else at
        before = connection.exec_driver_sql(
            f"SELECT log_hash FROM wg_events WHERE position < {position} "
            "ORDER BY position DESC LIMIT 1"
        ).scalar()
        new_id = event_id or str(uuid.uuid4())
        event_hash = chain_hash(
            previous, stream, version + 1, new_id, "WorkerGroupShutdownRequested", 1,
            epoch_us(moment), data, meta,
        )  # fmt: skip
        connection.execute(
            sa.text(
                "INSERT INTO wg_events (position, event_id, stream_id, stream_version, "
                "event_type, schema_version, data, metadata, recorded_at, hash, log_hash) "
                "VALUES (:p, :id, :s, :v, 'WorkerGroupShutdownRequested', 1, :d, :m, :at, :h, :l)"
            ),
            {
                "p": position,
                "id": new_id,
                "s": stream,
                "v": version + 1,
                "d": data,
                "m": meta,
                "at": at,
                "h": event_hash,
                "l": log_hash(before or GENESIS, position, event_hash, None),
            },
        )

    return insert


def _insert(store: EventStore, change: Callable[[sa.Connection], None]) -> None:
    """Run ``change`` as a plain writer of the table would: triggers in place."""
    with store.engine.begin() as connection:
        change(connection)


def _reasons(store: EventStore, stream: str = "s-1") -> list[str]:
    return [record.event.reason for record in store.read_stream(stream)]


# ---------------------------------------------------------------------- 1: positions


@pytest.mark.parametrize("position", [0, -5])
def test_a_row_inserted_below_position_1_is_refused(store: EventStore, position: int) -> None:
    _fill(store)
    with pytest.raises(sa.exc.DBAPIError, match="handed out by the log"):
        _insert(store, _forged_event(store, position))
    assert _reasons(store) == ["a", "b", "c"]  # readers see nothing forged
    assert store.verify().ok


def test_a_row_inserted_ahead_of_the_log_is_refused(store: EventStore) -> None:
    """A position beyond the log's end is refused too: on Postgres beyond what the sequence
    handed out, on SQLite anything but the last plus one (the writer's rule)."""
    _fill(store)
    with pytest.raises(sa.exc.DBAPIError, match="handed out by the log"):
        _insert(store, _forged_event(store, 1000))
    store.append("s-1", [_event("d")])  # appends go on at position 7
    assert store.head() == 7
    assert _reasons(store) == ["a", "b", "c", "d"]
    assert store.verify().ok


@pytest.mark.parametrize("position", [0, -5])
def test_a_forged_event_below_position_1_is_named_with_the_key_and_against_a_digest(
    store_url: str, position: int
) -> None:
    """Claims N5, K1 and D1: a row no reader would skip is checked wherever it sits."""
    with EventStore.open(store_url, hmac_key=KEY) as store:
        _fill(store)
        digest = store.digest()
        _tamper(store, _forged_event(store, position))  # the owner lifts the refusal
        assert _reasons(store) == ["a", "b", "c", "forged"]  # readers believe it
        keyed = store.verify()
        against = store.verify(against=digest)
        one_stream = store.verify("s-1")
    where = f"stream 's-1': the event at position {position} (version 4, "
    assert _problems_naming(keyed, where, "has no MAC")
    assert _problems_naming(keyed, where, "a position no writer hands out")
    assert keyed.checked == 7
    assert _problems_naming(against, "no longer extends the digest")
    assert _problems_naming(one_stream, where, "a position no writer hands out")
    with EventStore.open(store_url) as keyless:
        report = keyless.verify()
        assert _problems_naming(report, where, "a position no writer hands out")


def test_a_forged_event_in_a_gap_of_positions_is_named_by_verify(store_url: str) -> None:
    """Postgres leaves a gap where an append that took a position rolled back; the trigger
    does not refuse a plain INSERT there (a query per row would), verify names it: the log
    chain breaks at the row after it, and the row has no MAC."""
    with EventStore.open(store_url, hmac_key=KEY) as store:
        if not store.is_postgres:
            pytest.skip("SQLite has no gaps: test_a_row_inserted_ahead_of_the_log_is_refused")
        _fill(store)
        with store.engine.begin() as connection:  # what a rolled-back append leaves behind
            gap = connection.exec_driver_sql(
                "SELECT nextval(pg_get_serial_sequence('wg_events', 'position'))"
            ).scalar_one()
        store.append("s-3", [_event("after the gap")])
        _insert(store, _forged_event(store, gap, stream="s-2"))  # the trigger lets it in
        assert _reasons(store, "s-2") == ["x", "y", "forged"]
        keyed = store.verify()
    assert _problems_naming(keyed, f"position {gap} ", "has no MAC")
    with EventStore.open(store_url) as keyless:
        report = keyless.verify()
    assert _problems_naming(report, f"position {gap + 1} ", "breaks the log chain")


def test_against_the_digest_of_an_empty_log_a_row_below_position_1_is_named(
    store: EventStore,
) -> None:
    digest = store.digest()
    assert digest == "wgs1:0:-"
    _fill(store)
    _tamper(store, _forged_event(store, 0))
    report = store.verify(against=digest)
    assert _problems_naming(report, "no longer extends the digest wgs1:0:-", "position 0")


def _replace(store: EventStore, conflict: str) -> str:
    """A copy of the event at position 2 put at the end of the log, keeping its id or its
    stream version: INSERT OR REPLACE on SQLite, INSERT ... ON CONFLICT DO UPDATE on Postgres."""
    new_id = "event_id" if conflict == "event_id" else f"'{uuid.uuid4()}'"
    version = "stream_version" if conflict == "version" else "99"
    next_position = (
        "nextval(pg_get_serial_sequence('wg_events', 'position'))"
        if store.is_postgres
        else "(SELECT max(position) + 1 FROM wg_events)"
    )
    columns = (
        "position, event_id, stream_id, stream_version, event_type, schema_version, data, "
        "metadata, recorded_at, hash, log_hash"
    )
    select = (
        f"SELECT {next_position}, {new_id}, stream_id, {version}, event_type, schema_version, "
        "data, metadata, recorded_at, hash, log_hash FROM wg_events WHERE position = 2"
    )
    if store.is_postgres:
        target = "(event_id)" if conflict == "event_id" else "(stream_id, stream_version)"
        return (
            f"INSERT INTO wg_events ({columns}) {select} "
            f"ON CONFLICT {target} DO UPDATE SET data = EXCLUDED.data"
        )
    return f"INSERT OR REPLACE INTO wg_events ({columns}) {select}"


@pytest.mark.parametrize("conflict", ["event_id", "version"])
def test_a_plain_insert_cannot_replace_a_stored_event(store: EventStore, conflict: str) -> None:
    """SQLite's INSERT OR REPLACE deletes the stored row it conflicts with, without firing the
    delete trigger: the INSERT trigger refuses a stored id or stream version. On Postgres the
    same is an UPDATE, which the immutability trigger refuses."""
    _fill(store)
    match = "append-only" if store.is_postgres else "already holds this event_id"
    with pytest.raises(sa.exc.DBAPIError, match=match):
        _insert(store, lambda connection: connection.exec_driver_sql(_replace(store, conflict)))
    assert _reasons(store) == ["a", "b", "c"]
    assert store.verify().ok


# ---------------------------------------------------------------------- 3: event ids


def _replay_upper_cased(store: EventStore, position: int) -> Callable[[sa.Connection], None]:
    """Copy the event at ``position`` to the end of its stream, its id upper-cased."""

    def replay(connection: sa.Connection) -> None:
        casts = "::text" if store.is_postgres else ""
        event_id, stream = connection.exec_driver_sql(
            f"SELECT event_id{casts}, stream_id FROM wg_events WHERE position = {position}"
        ).one()
        _forged_event(store, None, stream=stream, event_id=event_id.upper())(connection)

    return replay


def test_an_upper_cased_replay_of_an_event_id_is_refused(store: EventStore) -> None:
    """SQLite compares ids as text: the trigger refuses any form but the lower-case one.
    Postgres' uuid column keeps one form, so its unique constraint refuses the replay."""
    _fill(store)
    match = "duplicate key" if store.is_postgres else "lower-case hyphenated form"
    with pytest.raises(sa.exc.DBAPIError, match=match):
        _insert(store, _replay_upper_cased(store, 2))
    ids = [record.event_id for record in store.read_all()]
    assert len(ids) == len(set(ids)) == 6


def test_an_upper_cased_replay_of_an_event_id_is_named_by_verify(store: EventStore) -> None:
    """Claim N2: ids are compared as the UUIDs readers read (only SQLite can hold the text)."""
    _fill(store)
    if store.is_postgres:
        with pytest.raises(sa.exc.IntegrityError, match="duplicate key"):
            _tamper(store, _replay_upper_cased(store, 2))  # not even the owner can store it
        return
    _tamper(store, _replay_upper_cased(store, 2))
    records = list(store.read_stream("s-1"))
    assert records[1].event_id == records[3].event_id  # one id, read twice
    report = store.verify()
    event_id = records[1].event_id
    assert _problems_naming(report, f"event id {event_id} is stored 2 times (positions 2, 7")
    assert _problems_naming(report, "position 7", f"stored as '{str(event_id).upper()}'")
    assert _problems_naming(store.verify("s-1"), f"event id {event_id} is stored 2 times")


def test_an_event_id_that_is_no_uuid_is_named_by_verify(store: EventStore) -> None:
    _fill(store)
    if store.is_postgres:
        with pytest.raises(sa.exc.DataError):
            _tamper(store, _forged_event(store, None, event_id="not-a-uuid"))
        return
    _tamper(store, _forged_event(store, None, event_id="not-a-uuid"))
    report = store.verify()
    assert report.problems == [
        "stream 's-1': the event at position 7 (version 4, WorkerGroupShutdownRequested) has "
        "the event id 'not-a-uuid', which is not a UUID: no writer stored it, and readers cannot "
        "read it"
    ]
