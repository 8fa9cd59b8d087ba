"""What an append stores and returns, after the per-event work was cut (issue 25 part 3).

The SQLite recorder leaves the ``mac`` column out of a keyless INSERT (it is stored NULL, as it
was when a None was bound); the codec looks for a backslash before it looks for an escaped NUL;
the ids of the records an append returns are decoded from the stored texts. These tests pin that
nothing a reader sees changed: the stored ``mac`` with and without a key, on every append path
(single events, batches, the cached-heads and the locked path, several streams at once), the
NUL refusal wherever it sits among other escapes, and the returned ids against the stored ones.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass

import pytest
import sqlalchemy as sa

from wgstore.events import AppendRequest, EventStore, NewEvent
from wgstore.events.codec import Codec
from wgstore.events.errors import EventEncodeError
from wgstore.events.hashing import MAC_PREFIX
from wgstore.events.registry import EventRegistry
from wgstore.events.storable import has_nul
from wgstore.events.worker_group import WorkerGroupShutdownRequested

KEY = b"test-key"


@dataclass(frozen=True, slots=True, kw_only=True)
class Text:
    text: str


def _events(n: int, tag: str) -> list[WorkerGroupShutdownRequested]:
    return [WorkerGroupShutdownRequested(reason=f"{tag}-{i}") for i in range(n)]


def _append_every_way(store: EventStore) -> None:
    """Single events and batches, on the cached-heads path and the locked one (a stream this
    store did not write last, fixed ids, several streams in one transaction)."""
    store.append("single", _events(1, "a"))
    store.append("single", _events(1, "b"))  # cached heads
    store.append("batch", _events(3, "c"))
    store.append("batch", _events(3, "d"))  # cached heads
    store.append("fixed", [NewEvent(e, event_id=uuid.uuid4()) for e in _events(2, "e")])
    store.append_many(
        [AppendRequest("many-1", _events(2, "f")), AppendRequest("many-2", _events(1, "g"))]
    )


def _stored_macs(store: EventStore) -> list[str | None]:
    with store.engine.connect() as connection:
        rows = connection.execute(sa.text("SELECT mac FROM wg_events ORDER BY position"))
        return [row[0] for row in rows]


def test_without_a_key_every_row_stores_a_null_mac(store_url: str) -> None:
    with EventStore.open(store_url) as store:
        _append_every_way(store)
        macs = _stored_macs(store)
        assert len(macs) == 13
        assert macs == [None] * 13
        assert store.verify().ok


def test_with_a_key_every_row_stores_its_mac(store_url: str) -> None:
    with EventStore.open(store_url, hmac_key=KEY) as store:
        _append_every_way(store)
        macs = _stored_macs(store)
        assert len(macs) == 13
        assert all(mac is not None and mac.startswith(MAC_PREFIX) for mac in macs)
        report = store.verify()
        assert report.ok, report


def test_the_returned_ids_are_the_stored_ones_as_uuids(store_url: str) -> None:
    fixed = uuid.uuid4()
    with EventStore.open(store_url) as store:
        returned = [
            *store.append("s", _events(1, "one")),
            *store.append("s", _events(4, "many")),
            *store.append("s", [NewEvent(_events(1, "fixed")[0], event_id=fixed)]),
        ]
        stored = list(store.read_stream("s"))
    assert all(type(record.event_id) is uuid.UUID for record in returned)
    assert [r.event_id for r in returned] == [r.event_id for r in stored]
    assert len({r.event_id for r in returned}) == 6
    assert returned[-1].event_id == fixed
    assert all(r.event_id.version == 7 for r in returned[:-1])  # new ids: time-ordered


def test_an_empty_append_writes_and_returns_nothing(store: EventStore) -> None:
    assert store.append("s", []) == []
    assert store.head() == 0


def _codec() -> Codec:
    registry = EventRegistry()
    registry.register(Text, "Text")
    return Codec(registry)


@pytest.mark.parametrize(
    "text",
    ["a\x00b", "\x00", 'quote " then \x00', "line\nthen \x00", "\\ then \x00", "\x00\n"],
)
def test_a_nul_is_refused_wherever_it_sits_among_other_escapes(text: str) -> None:
    with pytest.raises(EventEncodeError, match="NUL"):
        _codec().encode(Text(text=text))


@pytest.mark.parametrize(
    "text", ["plain", 'a "quote"', "a\\backslash", "tab\tnew\nline", "\\u0001"]
)
def test_escapes_without_a_nul_are_stored_and_read_back_exactly(text: str) -> None:
    codec = _codec()
    info, data = codec.encode(Text(text=text))
    assert codec.decode(info.name, info.version, data, stream_id="s", position=1) == Text(text=text)


def test_has_nul_finds_the_escape_only() -> None:
    assert not has_nul(b'{"a":"no escapes"}')
    assert not has_nul(b'{"a":"a\\nb"}')
    assert has_nul(b'{"a":"a\\nb\\u0000"}')
    assert has_nul(b'{"a":"\\u0000"}')
