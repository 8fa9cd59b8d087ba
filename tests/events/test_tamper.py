"""The past cannot change unnoticed: one test per way of rewriting the log, on both backends.

Every tamper runs with the immutability triggers disabled (the way someone with DDL rights would
do it). The per-stream chains alone missed each of these; the whole-log chain, a digest kept
elsewhere, or the HMAC key catches them. The hash test vectors pin what SQLite's Python path and
Postgres' ``wg_append`` store for a fixed event.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime

import pytest
import sqlalchemy as sa

from wgstore.events import EventStore, NewEvent
from wgstore.events.engine import create_store_engine
from wgstore.events.hashing import chain_hash, content_mac, epoch_us, event_mac, log_hash
from wgstore.events.worker_group import WorkerGroupShutdownRequested
from wgstore.migrations.runner import downgrade, upgrade

KEY = b"a key only writers and auditors hold"


def _event(reason: str) -> WorkerGroupShutdownRequested:
    return WorkerGroupShutdownRequested(reason=reason)


def _fill(store: EventStore) -> None:
    """Positions 1..6: s-1 v1, s-1 v2, s-2 v1, s-1 v3, s-2 v2, s-3 v1."""
    store.append("s-1", [_event("a"), _event("b")])
    store.append("s-2", [_event("x")])
    store.append("s-1", [_event("c")])
    store.append("s-2", [_event("y")])
    store.append("s-3", [_event("z")])


def _tamper(store: EventStore, change: Callable[[sa.Connection], None] | str, *more: str) -> None:
    """Change the log behind the store's back, triggers disabled."""
    with store.engine.begin() as connection:
        if store.is_postgres:
            connection.exec_driver_sql("ALTER TABLE wg_events DISABLE TRIGGER USER")
        else:  # the immutability triggers and the INSERT trigger (0012)
            for trigger in ("wg_events_no_update", "wg_events_no_delete", "wg_events_handed_out"):
                connection.exec_driver_sql(f"DROP TRIGGER IF EXISTS {trigger}")
        for step in (change, *more):
            if isinstance(step, str):
                connection.exec_driver_sql(step)
            else:
                step(connection)
        if store.is_postgres:
            connection.exec_driver_sql("ALTER TABLE wg_events ENABLE TRIGGER USER")


def _rehash(store: EventStore) -> Callable[[sa.Connection], None]:
    """What a forger with this code does: recompute every stream hash and log hash in place."""

    def rehash(connection: sa.Connection) -> None:
        casts = "::text" if store.is_postgres else ""
        rows = connection.exec_driver_sql(
            f"SELECT position, stream_id, stream_version, event_id{casts}, event_type, "
            f"schema_version, data{casts}, metadata{casts}, recorded_at, mac "
            "FROM wg_events ORDER BY position"
        ).all()
        streams: dict[str, str] = {}
        log = ""
        for position, sid, version, event_id, type_, schema, data, meta, at, mac in rows:
            if isinstance(at, str):
                at = datetime.fromisoformat(at).replace(tzinfo=UTC)
            streams[sid] = chain_hash(
                streams.get(sid, ""),
                sid,
                version,
                event_id,
                type_,
                schema,
                epoch_us(at),
                data,
                meta,
            )
            log = log_hash(log, position, streams[sid], mac)
            connection.execute(
                sa.text("UPDATE wg_events SET hash = :h, log_hash = :l WHERE position = :p"),
                {"h": streams[sid], "l": log, "p": position},
            )

    return rehash


def _change_reason(store: EventStore, position: int, reason: str) -> str:
    if store.is_postgres:
        return (
            f"UPDATE wg_events SET data = jsonb_set(data, '{{reason}}', '\"{reason}\"') "
            f"WHERE position = {position}"
        )
    return (
        f"UPDATE wg_events SET data = json_set(data, '$.reason', '{reason}') "
        f"WHERE position = {position}"
    )


def _problems_naming(report: object, *words: str) -> list[str]:
    problems: list[str] = report.problems  # type: ignore[attr-defined]
    return [p for p in problems if all(word in p for word in words)]


def test_deleting_the_last_events_of_a_stream_breaks_the_log_chain(store: EventStore) -> None:
    _fill(store)
    _tamper(store, "DELETE FROM wg_events WHERE stream_id = 's-1' AND stream_version = 3")
    assert store.verify("s-1").ok  # the stream's own chain cannot see its tail go
    report = store.verify()
    assert not report.ok
    assert _problems_naming(report, "position 5", "breaks the log chain", "position 3")


def test_deleting_a_whole_stream_breaks_the_log_chain(store: EventStore) -> None:
    _fill(store)
    _tamper(store, "DELETE FROM wg_events WHERE stream_id = 's-2'")
    report = store.verify()
    assert not report.ok
    assert _problems_naming(report, "position 4", "breaks the log chain")
    assert _problems_naming(report, "position 6", "breaks the log chain")


def test_moving_an_event_to_an_unused_position_breaks_the_log_chain(store: EventStore) -> None:
    _fill(store)
    _tamper(store, "UPDATE wg_events SET position = 100 WHERE position = 6")  # order unchanged
    report = store.verify()
    assert not report.ok
    assert _problems_naming(report, "'s-3'", "position 100", "breaks the log chain")


def test_swapping_events_across_streams_in_each_streams_order_breaks_the_log_chain(
    store: EventStore,
) -> None:
    _fill(store)
    _tamper(
        store,  # s-1 v3 and s-2 v1 trade places: both streams are still in order
        "UPDATE wg_events SET position = 1000 WHERE position = 3",
        "UPDATE wg_events SET position = 3 WHERE position = 4",
        "UPDATE wg_events SET position = 4 WHERE position = 1000",
    )
    assert store.verify("s-1").ok and store.verify("s-2").ok
    report = store.verify()
    assert not report.ok
    assert _problems_naming(report, "position 3", "breaks the log chain")
    assert _problems_naming(report, "position 4", "breaks the log chain")


def test_cutting_off_the_end_of_the_log_is_caught_against_a_digest(store: EventStore) -> None:
    _fill(store)
    digest = store.digest()
    assert digest.startswith("wgs1:6:")
    assert store.verify(against=digest).ok
    _tamper(store, "DELETE FROM wg_events WHERE position >= 5")
    assert store.verify().ok  # what is left is consistent with itself: only a digest can tell
    report = store.verify(against=digest)
    assert not report.ok
    assert report.problems == [
        "the log ends at position 4, before the digest's position 6: events were cut off the "
        "end of the log"
    ]


def test_a_log_that_grew_after_a_digest_still_extends_it(store: EventStore) -> None:
    _fill(store)
    digest = store.digest()
    store.append("s-4", [_event("later")])
    assert store.verify(against=digest).ok
    assert store.digest() != digest


def test_an_empty_log_has_a_digest_every_log_extends(store: EventStore) -> None:
    digest = store.digest()
    assert digest == "wgs1:0:-"
    _fill(store)
    assert store.verify(against=digest).ok


@pytest.mark.parametrize(
    "text",
    ["", "wgs1:6", "wgs1:x:" + "0" * 64, "wgs1:6:" + "0" * 63, "wgs2:6:" + "0" * 64, "wgs1:0:ab"],
)
def test_a_malformed_digest_is_refused_naming_the_expected_form(
    store: EventStore, text: str
) -> None:
    with pytest.raises(ValueError, match="is not a wgstore digest: expected wgs1:<position>"):
        store.verify(against=text)


def test_a_forged_event_with_recomputed_hashes_passes_without_key_or_digest(
    store: EventStore,
) -> None:
    _fill(store)
    digest = store.digest()
    _tamper(store, _change_reason(store, 2, "forged"), _rehash(store))
    assert [r.event.reason for r in store.read_stream("s-1")] == ["a", "forged", "c"]
    assert store.verify().ok  # a plain hash chain has no secret: the forger recomputed it
    report = store.verify(against=digest)  # a digest kept elsewhere still catches the rewrite
    assert not report.ok
    assert _problems_naming(report, "no longer extends the digest", "position 6")


def test_a_forged_event_with_recomputed_hashes_is_caught_with_the_key(store_url: str) -> None:
    with EventStore.open(store_url, hmac_key=KEY) as store:
        _fill(store)
        assert store.verify().ok
        _tamper(store, _change_reason(store, 2, "forged"), _rehash(store))
        report = store.verify()
        assert not report.ok
        assert report.problems == [
            "stream 's-1': the event at position 2 (version 2, WorkerGroupShutdownRequested) "
            "does not match its MAC: its content was forged or changed without the key (or "
            "this is not the key it was written with)"
        ]
    with EventStore.open(store_url) as keyless:  # without the key the forgery passes...
        assert keyless.verify().ok
        assert not keyless.verify(hmac_key=KEY).ok  # ...until an auditor brings the key


def test_an_event_inserted_with_recomputed_hashes_is_caught_with_the_key(store_url: str) -> None:
    with EventStore.open(store_url, hmac_key=KEY) as store:
        _fill(store)
    with EventStore.open(store_url) as forger:  # a writer without the key
        forger.append("s-3", [_event("inserted")])
    with EventStore.open(store_url, hmac_key=KEY) as store:
        report = store.verify()
        assert not report.ok
        assert _problems_naming(report, "position 7", "has no MAC")


def test_a_wrong_key_fails_every_event(store_url: str) -> None:
    with EventStore.open(store_url, hmac_key=KEY) as store:
        _fill(store)
        report = store.verify(hmac_key="not the key")
        assert len(report.problems) == 6
        assert all("does not match its MAC" in p for p in report.problems)


def test_the_key_can_come_from_the_environment(
    store_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("WGSTORE_HMAC_KEY", KEY.decode())
    with EventStore.open(store_url) as store:
        _fill(store)
        assert store.verify().ok
    monkeypatch.delenv("WGSTORE_HMAC_KEY")
    with EventStore.open(store_url) as store:
        assert store.verify(hmac_key=KEY).ok
        assert not store.verify(hmac_key=b"other").ok


def test_a_tampered_payload_that_no_longer_decodes_is_named_by_verify(store: EventStore) -> None:
    _fill(store)
    if store.is_postgres:
        change = "UPDATE wg_events SET data = '{\"reason\": 7}' WHERE position = 2"
    else:
        change = "UPDATE wg_events SET data = '{\"reason\": 7' WHERE position = 2"  # not JSON
    _tamper(store, change, f"UPDATE wg_events SET hash = '{'0' * 64}' WHERE position = 5")
    report = store.verify(hmac_key=KEY)
    assert _problems_naming(report, "position 2", "does not match its hash")
    assert _problems_naming(report, "position 5", "does not match its hash")
    assert report.checked == 6


# ---------------------------------------------------------------------- hash test vectors

_VECTOR_ID = uuid.UUID("00000000-0000-4000-8000-000000000001")
_VECTOR_TIME = datetime(2026, 11, 30, 12, 0, 0, 123456, tzinfo=UTC)
_VECTOR_METADATA = {"host": "h", "pid": 1, "wgstore": "0"}
# The stream hash covers data and metadata as stored: SQLite keeps the client's canonical JSON,
# Postgres hashes jsonb's rendering (its own key order and spacing), so the stream and log hashes
# are pinned per backend; the MAC, over a canonical form of the JSON, is one value on both.
# The event carries WorkerGroupShutdownRequested's `abort` field (added with its default for
# Ray's abort()) and `resized_to` (added 2026-12-07 for elastic runs' resizes, default null), so
# its stored text and every pinned value include them: a field added with a default changes the
# text of events written after it, never of those before (their hashes cover what is stored).
_VECTORS = {
    "sqlite": (
        '{"abort":false,"reason":"pinned","resized_to":null}',
        '{"host":"h","pid":1,"wgstore":"0"}',
    ),
    "postgresql": (
        '{"abort": false, "reason": "pinned", "resized_to": null}',
        '{"pid": 1, "host": "h", "wgstore": "0"}',  # jsonb: shorter keys first
    ),
}
# (stream hash, log hash); the log hash covers the MAC, so it changed with the MAC's form (m3).
_PINNED = {
    "sqlite": (
        "ebad5e7e108f1b86a38f4ebeb79e8c9a8ef115654e23de85fd9e11b816260d68",
        "4ccb61dd70da2ff946ed1f9781d236de14be016cf85d45659daa315770c269cc",
    ),
    "postgresql": (
        "ec452e00dc75690cf2328a7e1ce2ae6c99d351d1ba83b2beae4776b8d3e16ea2",
        "4aa7b8e518e6651afd4fe4ee44289dc7a9abefa0863f16a04153c149ac04ab8a",
    ),
}
# The MAC over every field (hashing.event_mac): one value on both backends, although the keyed
# Postgres append builds its rows in Python and wg_append is not called. The form written before
# 2026-12-07 (m2, numbers by value alone) gave the second value for the same event: an old
# store's rows still verify with it.
_PINNED_MAC = "m3:b2GVvNs-RIBw9Drz34mksbX0ZxSI0PwRkm24y5iIM9o"
_PINNED_UNTYPED_MAC = "m2:p8sFV1b85TCRM9w-IPrpxcfF_NHnh0wigfwyKIpw358"


@pytest.fixture
def frozen_store(store_url: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[EventStore]:
    """A store whose appends happen at _VECTOR_TIME, on both backends."""
    url = store_url
    if store_url.startswith("postgresql"):
        engine = create_store_engine(store_url)
        try:
            with engine.begin() as connection:
                upgrade(connection)
                # Found before pg_catalog's once pg_catalog is named after it on the path.
                connection.exec_driver_sql(
                    "CREATE FUNCTION clock_timestamp() RETURNS timestamptz LANGUAGE sql AS "
                    f"$$ SELECT '{_VECTOR_TIME.isoformat()}'::timestamptz $$"
                )
        finally:
            engine.dispose()
        url = store_url + "%2Cpg_catalog"
    else:
        import wgstore.events.sqlite_recorder as store_module

        class Frozen(datetime):
            @classmethod
            def now(cls, tz: object = None) -> datetime:  # type: ignore[override]
                return _VECTOR_TIME

        monkeypatch.setattr(store_module, "datetime", Frozen)
    with EventStore.open(url, hmac_key=KEY) as store:
        text = '{"host":"h","pid":1,"wgstore":"0"}'
        monkeypatch.setattr(store, "_metadata_defaults", lambda: (_VECTOR_METADATA, text))
        yield store


def test_a_fixed_event_gets_the_pinned_hashes_from_either_backends_append(
    frozen_store: EventStore,
) -> None:
    store = frozen_store
    [recorded] = store.append(
        "vector-1", [NewEvent(_event("pinned"), event_id=_VECTOR_ID)], expected_version=0
    )
    assert recorded.position == 1
    assert recorded.recorded_at == _VECTOR_TIME
    data, metadata = _VECTORS[store.backend]
    expected_hash = chain_hash(
        "", "vector-1", 1, str(_VECTOR_ID), "WorkerGroupShutdownRequested", 1,
        epoch_us(_VECTOR_TIME), data, metadata,
    )  # fmt: skip
    mac = event_mac(
        KEY, 1, "vector-1", 1, str(_VECTOR_ID), "WorkerGroupShutdownRequested", 1,
        epoch_us(_VECTOR_TIME), data, metadata,
    )  # fmt: skip
    untyped = event_mac(
        KEY, 1, "vector-1", 1, str(_VECTOR_ID), "WorkerGroupShutdownRequested", 1,
        epoch_us(_VECTOR_TIME), data, metadata, form="m2:",
    )  # fmt: skip
    assert untyped == _PINNED_UNTYPED_MAC
    expected_log = log_hash("", 1, expected_hash, mac)
    with store.engine.connect() as connection:
        stored = connection.exec_driver_sql("SELECT hash, log_hash, mac FROM wg_events").one()
    assert tuple(stored) == (expected_hash, expected_log, mac)
    assert (expected_hash, expected_log) == _PINNED[store.backend]
    assert mac == _PINNED_MAC
    assert recorded.hash == expected_hash
    assert store.digest() == f"wgs1:1:{expected_log}"


# ---------------------------------------------------------------------- the migration


def test_migration_0004_backfills_the_log_hashes_an_append_would_have_given(
    store_url: str,
) -> None:
    with EventStore.open(store_url) as store:
        _fill(store)
        digest = store.digest()
    engine = create_store_engine(store_url)
    try:
        with engine.begin() as connection:
            downgrade(connection, "0003_set_based_append")
        with engine.begin() as connection:
            upgrade(connection)
    finally:
        engine.dispose()
    with EventStore.open(store_url, migrate=False) as store:
        assert store.digest() == digest
        assert store.verify(against=digest).ok
        store.append("s-1", [_event("after the backfill")])
        assert store.verify(against=digest).ok


def _macs(data: str) -> tuple[str, str, str]:
    """The MAC of an event with ``data`` in each form: m3, m2 and the legacy content MAC."""
    return (
        event_mac(KEY, 1, "s", 1, str(_VECTOR_ID), "T", 1, 0, data, "{}"),
        event_mac(KEY, 1, "s", 1, str(_VECTOR_ID), "T", 1, 0, data, "{}", form="m2:"),
        content_mac(KEY, "s", str(_VECTOR_ID), "T", 1, data, "{}"),
    )


@pytest.mark.parametrize(
    ("written", "rendered"),
    [
        ('{"v":1,"a":"x"}', '{"a": "x", "v": 1}'),  # jsonb's key order and spacing
        ('{"v":[0.1,2.50]}', '{"v": [0.1, 2.5]}'),
        ('{"v":1e-7}', '{"v": 0.0000001}'),
        ('{"v":"caf\\u00e9"}', '{"v": "café"}'),
    ],
)
def test_the_mac_is_the_same_for_json_as_written_and_as_postgres_renders_it(
    written: str, rendered: str
) -> None:
    assert _macs(written) == _macs(rendered)
    changed = _macs(written.replace("v", "w"))
    assert all(mine != theirs for mine, theirs in zip(_macs(written), changed, strict=True))


@pytest.mark.parametrize(
    ("written", "rendered"),
    [
        ('{"v":1e16}', '{"v": 10000000000000000}'),  # jsonb writes big floats as integers
        ('{"v":1.5e300}', '{"v": 15' + "0" * 299 + "}"),
        ('{"v":-0.0}', '{"v": 0.0}'),  # numeric has no negative zero
    ],
)
def test_a_number_jsonb_renders_as_another_kind_has_another_mac(
    written: str, rendered: str
) -> None:
    """Readers of the two texts get an int and a float (or 0.0 and -0.0): the MAC tells them
    apart, the older forms took them for one number. No writer stores such a float (the store
    refuses -0.0 and floats >= 1e16, events/storable.py), and a keyed append on Postgres MACs
    jsonb's rendering, which is what its readers read."""
    m3, m2, legacy = _macs(written)
    assert (m2, legacy) == _macs(rendered)[1:]
    assert m3 != _macs(rendered)[0]
