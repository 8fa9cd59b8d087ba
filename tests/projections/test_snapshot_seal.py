"""A snapshot is used only when it matches the log (issue 21, item 7), on both backends.

The forger changes a ``wg_snapshots`` row behind the store's back (SHUT_DOWN becomes RUNNING,
as `wgstore state` would then show); readers must ignore it and fold the log, and ``verify``
must name it in every mode. A snapshot of a stream rewritten after it was taken is refused too.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from projection_builders import Stream, append_stream

from tests.events.test_tamper import KEY, _rehash, _tamper
from wgstore.events import EventStore
from wgstore.events.hashing import open_snapshot, seal_snapshot
from wgstore.projections import worker_group_state
from wgstore.projections.snapshots import (
    STATE_SCHEMA,
    WORKER_GROUP_SNAPSHOT,
    load_snapshot,
    save_snapshot,
)
from wgstore.projections.state import WorkerGroupStatus


def _shut_down_group(store: EventStore) -> str:
    stream = Stream(
        "g1", num_workers=1, start=datetime.now(UTC), step=timedelta(milliseconds=1)
    ).running()
    stream = stream.shutdown_requested().shut_down()
    append_stream(store, stream)
    return stream.stream_id


def _running(store: EventStore) -> str:
    """Change the stored snapshot's status to RUNNING, keeping its seal as it was."""
    if store.is_postgres:
        return "UPDATE wg_snapshots SET state = jsonb_set(state, '{state,status}', '\"RUNNING\"')"
    return "UPDATE wg_snapshots SET state = json_set(state, '$.state.status', 'RUNNING')"


def _edited_snapshot_is_ignored_and_named(store: EventStore, stream_id: str) -> None:
    state = worker_group_state(store, "g1", use_snapshots=False)
    assert state.status is WorkerGroupStatus.SHUT_DOWN
    save_snapshot(store, state)
    assert load_snapshot(store, stream_id) == state  # a sealed snapshot that matches: used
    assert store.verify().ok
    _tamper(store, _running(store))
    # what `wgstore state` shows: the log's state, not the edited snapshot's
    assert worker_group_state(store, "g1").status is WorkerGroupStatus.SHUT_DOWN
    assert load_snapshot(store, stream_id) is None
    for report in (store.verify(), store.verify(stream_id), store.verify(against="wgs1:0:-")):
        assert report.problems == [
            f"stream {stream_id!r}: its snapshot 'worker_group' at version {state.version} "
            "does not match its checksum and the log's hash at its version: it was changed, "
            "or the stream was rewritten after it was taken (readers ignore it and fold the "
            "log)"
        ]


def test_an_edited_snapshot_is_ignored_by_readers_and_named_by_verify(store: Any) -> None:
    """Claim N4: without a key, an edited snapshot row is ignored and named."""
    _edited_snapshot_is_ignored_and_named(store, _shut_down_group(store))


def test_with_the_key_a_snapshot_whose_checksum_was_recomputed_is_refused(store_url: str) -> None:
    """Claim K4: with the key, a snapshot must carry the key's MAC."""
    with EventStore.open(store_url, hmac_key=KEY) as store:
        stream_id = _shut_down_group(store)
        state = worker_group_state(store, "g1", use_snapshots=False)
        save_snapshot(store, state)
        assert load_snapshot(store, stream_id) == state
        edited = state.__class__(**{**_fields(state), "status": WorkerGroupStatus.RUNNING})
        # The forger seals the edited state with this code, but has no key (mac: none).
        [event_hash] = [e.hash for e in store.read_stream(stream_id) if e.version == state.version]
        from wgstore.projections.snapshots import encode_state

        forged = seal_snapshot(
            None, WORKER_GROUP_SNAPSHOT, stream_id, state.version, STATE_SCHEMA, event_hash,
            encode_state(edited),
        )  # fmt: skip
        quoted = forged.replace("'", "''")
        cast = "::jsonb" if store.is_postgres else ""
        _tamper(store, f"UPDATE wg_snapshots SET state = '{quoted}'{cast}")
        assert worker_group_state(store, "g1").status is WorkerGroupStatus.SHUT_DOWN
        report = store.verify()
        assert report.problems == [
            f"stream {stream_id!r}: its snapshot 'worker_group' at version {state.version} does "
            "not match its MAC (or was not written with this key): it was changed, or the "
            "stream was rewritten after it was taken (readers ignore it and fold the log)"
        ]
    with EventStore.open(store_url) as keyless:  # the recomputed checksum fools a keyless reader
        assert load_snapshot(keyless, stream_id) == edited
        assert keyless.verify().ok


def test_a_snapshot_of_a_stream_rewritten_after_it_was_taken_is_refused(store: Any) -> None:
    """Claim N4: a snapshot is bound to the stream hash at its version."""
    stream_id = _shut_down_group(store)
    state = worker_group_state(store, "g1", use_snapshots=False)
    save_snapshot(store, state)
    reason = (
        "jsonb_set(data, '{reason}', '\"x\"')"
        if store.is_postgres
        else "json_set(data, '$.reason', 'x')"
    )
    _tamper(
        store,
        f"UPDATE wg_events SET data = {reason} WHERE stream_id = '{stream_id}' "
        "AND event_type = 'WorkerGroupShutdownRequested'",
        _rehash(store),
    )
    assert load_snapshot(store, stream_id) is None
    assert not store.verify().ok


def test_a_snapshot_seal_is_checked_on_the_text_either_backend_renders() -> None:
    sealed = seal_snapshot(KEY, "n", "s", 3, "S", "h", '{"b":1.0,"a":[0.50,1152921504606846976]}')
    jsonb = sealed.replace(
        '{"b":1.0,"a":[0.50,1152921504606846976]}',
        '{"a": [0.50, 1152921504606846976], "b": 1.0}',
    )
    assert open_snapshot(KEY, "n", "s", 3, "S", "h", jsonb)[0] is not None
    changed = jsonb.replace("1152921504606846976", "1152921504606847076")
    assert open_snapshot(KEY, "n", "s", 3, "S", "h", changed) == (
        None,
        "does not match its checksum and the log's hash at its version",
    )


def test_a_snapshot_seal_tells_the_kind_of_a_number_jsonb_would_change() -> None:
    """jsonb renders a float of 1e16 as an integer (appends refuse such floats, so no fold
    makes one): the seal, which keeps each number's kind, then does not match, and readers
    fold the log instead of reading an integer where a float was."""
    sealed = seal_snapshot(KEY, "n", "s", 3, "S", "h", '{"a":1e16}')
    assert open_snapshot(KEY, "n", "s", 3, "S", "h", sealed)[0] == b'{"a":1e16}'
    jsonb = sealed.replace('{"a":1e16}', '{"a": 10000000000000000}')
    assert open_snapshot(KEY, "n", "s", 3, "S", "h", jsonb)[0] is None
    assert open_snapshot(KEY, "n", "s", 4, "S", "h", jsonb)[0] is None  # another version
    assert open_snapshot(b"other", "n", "s", 3, "S", "h", jsonb)[0] is None


def _fields(state: Any) -> dict[str, Any]:
    import dataclasses

    return {f.name: getattr(state, f.name) for f in dataclasses.fields(state)}
