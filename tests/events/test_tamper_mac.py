"""The MAC covers every field a reader sees: the forgeries issue 21 found, on both backends.

Each forger works as in tests/events/test_tamper.py: triggers disabled, rows changed, every hash
recomputed with this code (``_rehash``). Without the key such a log is consistent with itself
(``verify()`` passes where the tamper leaves no other trace); with the key it fails, naming the
event. What verify proves in each mode is listed in docs/verify.md; the tests below name the
claim they check.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable
from datetime import timedelta

import pytest
import sqlalchemy as sa

from tests.events.test_tamper import KEY, _fill, _problems_naming, _rehash, _tamper
from wgstore.events import ConcurrencyError, EventStore, EventStoreError, NewEvent
from wgstore.events.hashing import MAC_PREFIX, UNTYPED_MAC_PREFIX, content_mac, epoch_us, event_mac
from wgstore.events.sqlite_recorder import parse_time
from wgstore.events.worker_group import WorkerReported

BIG = 2**60


def _mac_problems(report: object, position: int) -> list[str]:
    return _problems_naming(report, f"position {position} ", "does not match its MAC")


# ---------------------------------------------------------------------- 4: recorded_at


def _backdate(store: EventStore, position: int, hours: int) -> str:
    if store.is_postgres:
        return (
            f"UPDATE wg_events SET recorded_at = recorded_at - interval '{hours} hours' "
            f"WHERE position = {position}"
        )
    return (
        f"UPDATE wg_events SET recorded_at = strftime('%Y-%m-%d %H:%M:%f', recorded_at, "
        f"'-{hours} hours') || '000' WHERE position = {position}"
    )


def test_a_backdated_event_with_recomputed_hashes_is_caught_with_the_key(store_url: str) -> None:
    """Claim K1: with the key, an event's time is the one its writer recorded."""
    with EventStore.open(store_url, hmac_key=KEY) as store:
        _fill(store)
        [before] = list(store.read_stream("s-1", 2, 2))
        _tamper(store, _backdate(store, 2, 5), _rehash(store))
        [after] = list(store.read_stream("s-1", 2, 2))
        # readers see it (SQLite's strftime keeps milliseconds)
        assert abs(before.recorded_at - after.recorded_at - timedelta(hours=5)) < timedelta(
            milliseconds=1
        )
    with EventStore.open(store_url) as keyless:
        assert keyless.verify().ok  # consistent with itself: no key, no proof of who wrote it
        report = keyless.verify(hmac_key=KEY)
    assert not report.ok
    assert report.problems == [
        "stream 's-1': the event at position 2 (version 2, WorkerGroupShutdownRequested) does "
        "not match its MAC: its content was forged or changed without the key (or this is "
        "not the key it was written with)"
    ]


# ---------------------------------------------------------------------- 5: replay


def _drop_unique_event_id(store: EventStore) -> list[str]:
    """Statements that drop the unique constraint on event_id (SQLite: a table rebuild)."""
    if store.is_postgres:
        return ["ALTER TABLE wg_events DROP CONSTRAINT uq_wg_events_event_id"]
    with store.engine.connect() as connection:
        create = connection.exec_driver_sql(
            "SELECT sql FROM sqlite_master WHERE type = 'table' AND name = 'wg_events'"
        ).scalar_one()
    loose = create.replace("CONSTRAINT uq_wg_events_event_id UNIQUE (event_id)", "")
    loose = loose.replace(", \n\t,", ",").replace(",\n\t,", ",")
    assert "uq_wg_events_event_id" not in loose, loose
    return [
        "PRAGMA legacy_alter_table = ON",
        # "wg_events" quoted where a migration renamed the table to it (0008), bare in a
        # store built in one step
        re.sub(r'^CREATE TABLE "?wg_events"?', "CREATE TABLE wg_events_loose", loose),
        "INSERT INTO wg_events_loose SELECT * FROM wg_events",
        "DROP TABLE wg_events",
        "ALTER TABLE wg_events_loose RENAME TO wg_events",
    ]


def _replay(store: EventStore, position: int, at: int, version: int) -> str:
    """Copy the event at ``position`` (same id, same MAC) to ``at`` as version ``version``."""
    return (
        "INSERT INTO wg_events (position, event_id, stream_id, stream_version, event_type, "
        "schema_version, data, metadata, recorded_at, hash, log_hash, mac) "
        f"SELECT {at}, event_id, stream_id, {version}, event_type, schema_version, data, "
        f"metadata, recorded_at, hash, log_hash, mac FROM wg_events WHERE position = {position}"
    )


def test_a_signed_event_replayed_at_the_end_of_its_stream_is_caught(store_url: str) -> None:
    """Claims N2 (ids unique, no key needed) and K1 (a MAC binds position and version)."""
    with EventStore.open(store_url, hmac_key=KEY) as store:
        _fill(store)
        _tamper(store, *_drop_unique_event_id(store), _replay(store, 2, 7, 4), _rehash(store))
        events = list(store.read_stream("s-1"))
        assert [e.event.reason for e in events] == ["a", "b", "c", "b"]  # readers see it twice
        assert events[1].event_id == events[3].event_id
    with EventStore.open(store_url) as keyless:
        report = keyless.verify()
        assert not report.ok  # even without the key: an id stored twice
        assert report.problems == [
            f"event id {events[1].event_id} is stored 2 times (positions 2 to 7): an event was "
            "copied (replayed); each event is stored once"
        ]
        assert not keyless.verify("s-1").ok
        keyed = keyless.verify(hmac_key=KEY)
    assert _mac_problems(keyed, 7)  # same id, same MAC, but not its position and version
    assert not _mac_problems(keyed, 2)


# ---------------------------------------------------------------------- 6: exact numbers


def _set_metric(
    store: EventStore, position: int, value: int | float, path: str = "metrics.step"
) -> str:
    if store.is_postgres:
        return (
            f"UPDATE wg_events SET data = jsonb_set(data, '{{{path.replace('.', ',')}}}', "
            f"'{value}') WHERE position = {position}"
        )
    return (
        f"UPDATE wg_events SET data = json_set(data, '$.{path}', {value}) "
        f"WHERE position = {position}"
    )


def test_an_integer_beyond_2_53_changed_by_100_is_caught_with_the_key(store_url: str) -> None:
    """Claim K1: numbers are covered exactly (2**60 and 2**60 + 100 are not one double apart)."""
    with EventStore.open(store_url, hmac_key=KEY) as store:
        _fill(store)
        store.append("g", [WorkerReported(world_rank=0, index=1, metrics={"step": BIG})])
        _tamper(store, _set_metric(store, 7, BIG + 100), _rehash(store))
        [event] = list(store.read_stream("g"))
        assert event.event.metrics == {"step": BIG + 100}
        assert float(BIG + 100) == float(BIG)  # what the old MAC compared
        report = store.verify()
    assert _mac_problems(report, 7)
    assert len(report.problems) == 1


def test_an_integer_changed_to_an_equal_float_is_caught_with_the_key(store_url: str) -> None:
    """Claim K1, issue 41: 3 -> 3.0 passed the MAC (numbers were compared by value alone), and
    readers then got a float where an int was written: silently in an untyped field (metrics),
    as an error in a typed one (every read of the stream fails)."""
    with EventStore.open(store_url, hmac_key=KEY) as store:
        _fill(store)
        store.append("g", [WorkerReported(world_rank=0, index=3, metrics={"step": 3})])
        _tamper(store, _set_metric(store, 7, 3.0), _rehash(store))
        [event] = list(store.read_stream("g"))
        assert type(event.event.metrics["step"]) is float  # what readers now get
        report = store.verify()
        assert _mac_problems(report, 7)
        assert len(report.problems) == 1
        _tamper(store, _set_metric(store, 7, 3.0, "index"), _rehash(store))
        with pytest.raises(EventStoreError, match="Expected `int`, got `float`"):
            list(store.read_stream("g"))
        assert _mac_problems(store.verify(), 7)
    with EventStore.open(store_url) as keyless:
        assert keyless.verify().ok  # consistent with itself: no key, no proof of who wrote it


def test_numbers_of_every_kind_written_with_the_key_verify_and_read_back_as_written(
    store_url: str,
) -> None:
    """The MAC keeps each number's kind, and what a writer stores reads back of the same kind on
    both backends (a keyed append on Postgres MACs jsonb's rendering; the store refuses -0.0
    and floats >= 1e16, which jsonb would render as another number)."""
    metrics = {"int": 3, "float": 3.0, "zero": 0.0, "tiny": 1e-7, "big": 1e15, "huge": 2**60}
    with EventStore.open(store_url, hmac_key=KEY) as store:
        store.append("g", [WorkerReported(world_rank=0, index=1, metrics=metrics)])
        [event] = list(store.read_stream("g"))
        report = store.verify()
    assert report.ok, report.problems
    read = dict(event.event.metrics)
    assert read == metrics
    assert {k: type(v) for k, v in read.items()} == {k: type(v) for k, v in metrics.items()}


def test_a_duplicated_json_key_is_caught_and_postgres_cannot_store_one(store_url: str) -> None:
    """Claim K1 (one value per key). SQLite keeps the text as given: json_extract (and
    `wgstore sql`) reads the first value, msgspec the last. jsonb keeps one."""
    forged = '{"abort":false,"reason":"forged","reason":"b","resized_to":null}'
    with EventStore.open(store_url, hmac_key=KEY) as store:
        _fill(store)
        _tamper(store, f"UPDATE wg_events SET data = '{forged}' WHERE position = 2", _rehash(store))
        [event] = list(store.read_stream("s-1", 2, 2))
        assert event.event.reason == "b"  # what the log's readers see
        with store.engine.connect() as connection:
            if store.is_postgres:
                seen = connection.exec_driver_sql(
                    "SELECT data->>'reason', data::text FROM wg_events WHERE position = 2"
                ).one()
                assert seen == ("b", '{"abort": false, "reason": "b", "resized_to": null}')
                assert store.verify().ok
                return
            seen = connection.exec_driver_sql(
                "SELECT json_extract(data, '$.reason') FROM wg_events WHERE position = 2"
            ).scalar_one()
        assert seen == "forged"  # what SQL readers see
        keyed = store.verify()
    assert _problems_naming(keyed, "position 2 ", "names a key twice", "'reason'")
    with EventStore.open(store_url) as keyless:
        assert keyless.verify().ok  # no key, no proof: the forger could have set "forged" alone


# ---------------------------------------------------------------------- legacy MACs


def _legacy_macs(store: EventStore) -> Callable[[sa.Connection], None]:
    """Rewrite every MAC as an older wgstore stored it (content only, 64 hex digits)."""

    def rewrite(connection: sa.Connection) -> None:
        casts = "::text" if store.is_postgres else ""
        rows = connection.exec_driver_sql(
            f"SELECT position, stream_id, event_id{casts}, event_type, schema_version, "
            f"data{casts}, metadata{casts} FROM wg_events"
        ).all()
        for position, sid, event_id, type_, schema, data, meta in rows:
            mac = content_mac(KEY, sid, event_id, type_, schema, data, meta)
            connection.execute(
                sa.text("UPDATE wg_events SET mac = :m WHERE position = :p"),
                {"m": mac, "p": position},
            )

    return rewrite


def test_events_with_an_older_mac_still_verify_and_are_counted_as_weaker(store_url: str) -> None:
    """Claim K3: MACs of an older wgstore are checked (content only) and counted."""
    with EventStore.open(store_url, hmac_key=KEY) as store:
        _fill(store)
        _tamper(store, _legacy_macs(store), _rehash(store))
    with EventStore.open(store_url, hmac_key=KEY) as store:  # a newer wgstore appends
        store.append("s-1", [WorkerReported(world_rank=0, index=1)])
        report = store.verify()
        assert report.ok, report.problems
        assert (report.checked, report.legacy_macs) == (7, 6)
        with store.engine.connect() as connection:
            macs = [m for (m,) in connection.exec_driver_sql("SELECT mac FROM wg_events")]
        assert sum(m.startswith(MAC_PREFIX) for m in macs) == 1
        # What an old MAC does not cover: the time (so backdating an old event passes)...
        _tamper(store, _backdate(store, 2, 5), _rehash(store))
        assert store.verify().ok
        # ...but its content it still does.
        _tamper(
            store,
            "UPDATE wg_events SET event_type = 'Other' WHERE position = 3",
            _rehash(store),
        )
        assert _mac_problems(store.verify(), 3)


def _untyped_macs(store: EventStore) -> Callable[[sa.Connection], None]:
    """Rewrite every MAC as wgstore wrote it before 2026-12-07 (``m2:``, numbers by value)."""

    def rewrite(connection: sa.Connection) -> None:
        casts = "::text" if store.is_postgres else ""
        rows = connection.exec_driver_sql(
            f"SELECT position, stream_id, stream_version, event_id{casts}, event_type, "
            f"schema_version, recorded_at, data{casts}, metadata{casts} FROM wg_events"
        ).all()
        for position, sid, version, event_id, type_, schema, at, data, meta in rows:
            moment = parse_time(at) if isinstance(at, str) else at
            mac = event_mac(
                KEY, position, sid, version, event_id, type_, schema, epoch_us(moment), data,
                meta, form=UNTYPED_MAC_PREFIX,
            )  # fmt: skip
            connection.execute(
                sa.text("UPDATE wg_events SET mac = :m WHERE position = :p"),
                {"m": mac, "p": position},
            )

    return rewrite


def test_events_with_an_untyped_mac_still_verify_and_are_counted(store_url: str) -> None:
    """Claim K6: a store's MACs of before 2026-12-07 keep verifying, with what they cover: every
    field, numbers by value alone (3 and 3.0 are one number to them)."""
    with EventStore.open(store_url, hmac_key=KEY) as store:
        _fill(store)
        store.append("g", [WorkerReported(world_rank=0, index=3, metrics={"step": 3})])
        _tamper(store, _untyped_macs(store), _rehash(store))
    with EventStore.open(store_url, hmac_key=KEY) as store:  # a newer wgstore appends
        store.append("s-1", [WorkerReported(world_rank=0, index=1)])
        report = store.verify()
        assert report.ok, report.problems
        assert (report.checked, report.untyped_macs, report.legacy_macs) == (8, 7, 0)
        with store.engine.connect() as connection:
            macs = [m for (m,) in connection.exec_driver_sql("SELECT mac FROM wg_events")]
        assert sorted(m[:3] for m in macs) == [UNTYPED_MAC_PREFIX] * 7 + [MAC_PREFIX]
        # What an untyped MAC does not tell: an integer from an equal float...
        _tamper(store, _set_metric(store, 7, 3.0), _rehash(store))
        assert store.verify().ok
        # ...but a changed value it does, and every other field.
        _tamper(store, _set_metric(store, 7, 4), _rehash(store))
        assert _mac_problems(store.verify(), 7)


def test_the_time_a_mac_covers_is_the_one_readers_get(store_url: str) -> None:
    """The MAC's time is the stored ``recorded_at`` to the microsecond, on both backends."""
    with EventStore.open(store_url, hmac_key=KEY) as store:
        [recorded] = store.append("s-1", [WorkerReported(world_rank=0, index=1)])
        [read] = list(store.read_stream("s-1"))
        assert read.recorded_at == recorded.recorded_at
        assert epoch_us(read.recorded_at) % 1_000_000 == epoch_us(recorded.recorded_at) % 1_000_000
        assert store.verify().ok


@pytest.mark.parametrize("size", [1, 3])
def test_keyed_appends_keep_the_contract(store_url: str, size: int) -> None:
    """A keyed append on Postgres builds its rows in the client: the same results as wg_append
    (positions, versions, idempotent retry, expected versions, notifications via head)."""
    with EventStore.open(store_url, hmac_key=KEY) as store:
        batch = [
            NewEvent(WorkerReported(world_rank=0, index=i), event_id=uuid.uuid4())
            for i in range(size)
        ]
        first = store.append("s-1", batch, expected_version=0)
        assert [r.version for r in first] == list(range(1, size + 1))
        again = store.append("s-1", batch, expected_version=0)  # a retry: returned as stored
        assert [r.position for r in again] == [r.position for r in first]
        with pytest.raises(ConcurrencyError):
            store.append("s-1", [WorkerReported(world_rank=0, index=9)], expected_version=0)
        store.append("s-2", [WorkerReported(world_rank=0, index=9)])
        assert store.head() == size + 1  # the refused append took no position
        assert store.verify().ok and store.verify().legacy_macs == 0


def test_with_the_key_alone_a_cut_stream_tail_passes_but_not_against_a_digest(
    store_url: str,
) -> None:
    """Claims K5 and D1: the key proves each event genuine, not that none is missing at the end;
    a digest kept elsewhere does."""
    with EventStore.open(store_url, hmac_key=KEY) as store:
        _fill(store)
        digest = store.digest()
        _tamper(store, "DELETE FROM wg_events WHERE position = 4", _rehash(store))  # s-1 v3
        assert [e.event.reason for e in store.read_stream("s-1")] == ["a", "b"]
        assert store.verify().ok  # every event left is genuine, in place, with its MAC
        report = store.verify(against=digest)
    assert not report.ok
    assert _problems_naming(report, "no longer extends the digest")
