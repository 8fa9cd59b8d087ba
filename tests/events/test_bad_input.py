"""Bad input: each is a clear error that names the problem, and nothing is written."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from pathlib import Path

import pytest
import sqlalchemy as sa

from wgstore.events import (
    EventDecodeError,
    EventEncodeError,
    EventStore,
    NewEvent,
    SchemaVersionError,
    StoreUnavailableError,
    UnknownEventTypeError,
    event_type,
)
from wgstore.events.worker_group import WorkerGroupShutdownRequested


@dataclass(frozen=True)
class NotRegistered:
    value: int


@event_type("BadInputHolder", version=1)
@dataclass(frozen=True)
class Holder:
    value: object


def test_an_unregistered_event_type_is_refused_and_nothing_is_written(store: EventStore) -> None:
    with pytest.raises(UnknownEventTypeError, match="@event_type"):
        store.append("s-1", [WorkerGroupShutdownRequested(reason="ok"), NotRegistered(value=1)])
    assert store.head() == 0


def test_a_field_that_cannot_be_encoded_is_refused_and_nothing_is_written(
    store: EventStore,
) -> None:
    with pytest.raises(EventEncodeError, match="BadInputHolder"):
        store.append("s-1", [Holder(value=1), Holder(value=object())])
    assert store.head() == 0


def test_a_nul_character_is_refused_before_it_reaches_the_database(store: EventStore) -> None:
    with pytest.raises(EventEncodeError, match="NUL"):
        store.append("s-1", [Holder(value="a\x00b")])
    assert store.head() == 0


def test_metadata_that_cannot_be_encoded_is_refused(store: EventStore) -> None:
    with pytest.raises(EventEncodeError, match="metadata"):
        store.append("s-1", [NewEvent(Holder(value=1), metadata={"when": object()})])
    assert store.head() == 0


@pytest.mark.parametrize("stream_id", ["", "   ", None, 7, "x" * 201])
def test_a_bad_stream_id_is_refused(store: EventStore, stream_id: object) -> None:
    with pytest.raises(ValueError, match="stream_id"):
        store.append(stream_id, [Holder(value=1)])  # type: ignore[arg-type]


@pytest.mark.parametrize("expected", [-1, "3", 1.5, True])
def test_a_bad_expected_version_is_refused(store: EventStore, expected: object) -> None:
    with pytest.raises(ValueError, match="expected_version"):
        store.append("s-1", [Holder(value=1)], expected_version=expected)  # type: ignore[arg-type]


def test_a_bare_event_instead_of_a_list_is_refused(store: EventStore) -> None:
    with pytest.raises(TypeError, match="list of events"):
        store.append("s-1", NewEvent(Holder(value=1)))  # type: ignore[arg-type]


def _corrupt(store: EventStore, data: str) -> int:
    """Store a row the codec cannot read back (triggers do not guard INSERT)."""
    [record] = store.append("s-1", [WorkerGroupShutdownRequested(reason="fine")])
    with store.engine.begin() as connection:
        if store.is_postgres:
            connection.exec_driver_sql("ALTER TABLE wg_events DISABLE TRIGGER USER")
        else:
            connection.exec_driver_sql("DROP TRIGGER wg_events_no_update")
        connection.execute(
            sa.text("UPDATE wg_events SET data = :data WHERE position = :p").bindparams(
                sa.bindparam("data", type_=sa.JSON if store.is_postgres else sa.Text)
            ),
            {"data": data if not store.is_postgres else {"reason": 42}, "p": record.position},
        )
    return record.position


def test_stored_data_that_no_longer_decodes_names_stream_and_position(store: EventStore) -> None:
    position = _corrupt(store, '{"reason": 42}')
    with pytest.raises(EventDecodeError) as raised:
        list(store.read_stream("s-1"))
    assert raised.value.stream_id == "s-1" and raised.value.position == position
    assert f"position {position}" in str(raised.value) and "'s-1'" in str(raised.value)


def test_a_read_stopped_mid_page_by_bad_data_leaves_the_store_usable(store: EventStore) -> None:
    store.append("s-1", [WorkerGroupShutdownRequested(reason=str(i)) for i in range(300)])
    position = _corrupt(store, '{"reason": 42}')
    store.append("s-1", [WorkerGroupShutdownRequested(reason=str(i)) for i in range(900)])
    for _ in range(20):  # more reads than the pool has connections: each one was returned
        with pytest.raises(EventDecodeError) as raised:
            list(store.read_stream("s-1"))
        assert raised.value.position == position
        assert len(list(store.read_stream("s-1", to_version=300))) == 300
    assert store.stream_version("s-1") == 1201


def test_a_schema_version_newer_than_the_code_is_a_clear_error(store: EventStore) -> None:
    from wgstore.events.codec import Codec

    with pytest.raises(EventDecodeError, match="upgrade wgstore"):
        Codec().decode(
            "WorkerGroupShutdownRequested", 9, '{"reason": "x"}', stream_id="s", position=3
        )


def test_an_unknown_stored_type_decodes_to_a_raw_placeholder_not_an_error() -> None:
    from wgstore.events import UnknownEvent
    from wgstore.events.codec import Codec

    event = Codec().decode("NeverRegistered", 3, '{"path": "/x"}', stream_id="s", position=5)
    assert event == UnknownEvent(type="NeverRegistered", schema_version=3, data={"path": "/x"})


@pytest.mark.parametrize(
    "url",
    [
        "not a url",
        "mysql://root@localhost/db",
        "sqlite://",
        "sqlite:///:memory:",
        "postgresql+psycopg://u:pw@host:notaport/db",
    ],
)
def test_a_malformed_url_is_a_clear_error_without_the_password(url: str) -> None:
    with pytest.raises(StoreUnavailableError) as raised:
        EventStore.open(url)
    assert "pw" not in str(raised.value)
    assert "sqlite:///" in str(raised.value) or "SQLite" in str(raised.value)


def test_a_database_that_is_down_is_a_clear_error_without_the_password() -> None:
    with pytest.raises(StoreUnavailableError, match="cannot reach the database") as raised:
        EventStore.open("postgresql+psycopg://wg:s3cret@127.0.0.1:1/none?connect_timeout=2")
    assert "s3cret" not in str(raised.value)
    assert "***" in str(raised.value)


def test_a_sqlite_file_in_a_missing_folder_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(StoreUnavailableError, match="does not exist"):
        EventStore.open(f"sqlite:///{tmp_path}/missing/dir/wg.db")


def test_a_database_not_migrated_to_head_is_refused_when_migration_is_off(
    empty_store_url: str,
) -> None:
    # SQLite: an open that may not migrate does not create the file either
    with pytest.raises(
        (SchemaVersionError, StoreUnavailableError), match=r"wgstore db upgrade|no wgstore database"
    ):
        EventStore.open(empty_store_url, migrate=False)
    if empty_store_url.startswith("sqlite"):
        assert not Path(empty_store_url.removeprefix("sqlite:///")).exists()
    EventStore.open(empty_store_url).close()  # migrates
    EventStore.open(empty_store_url, migrate=False).close()


def test_a_database_migrated_by_a_newer_wgstore_is_refused(
    store: EventStore, store_url: str
) -> None:
    with store.engine.begin() as connection:
        connection.exec_driver_sql(
            "UPDATE wg_alembic_version SET version_num = '9999_from_the_future'"
        )
    with pytest.raises(SchemaVersionError, match="newer wgstore"):
        EventStore.open(store_url)


def test_a_read_only_store_refuses_to_append(store: EventStore, store_url: str) -> None:
    reader = EventStore.open(store_url, read_only=True)
    try:
        with pytest.raises(StoreUnavailableError, match="read-only"):
            reader.append("s-1", [Holder(value=1)])
    finally:
        reader.close()


def test_a_closed_store_says_so(store_url: str) -> None:
    closed = EventStore.open(store_url)
    closed.close()
    with pytest.raises(StoreUnavailableError, match="closed"):
        closed.head()


def test_a_bad_sqlite_synchronous_mode_is_refused(tmp_path: Path) -> None:
    with pytest.raises(StoreUnavailableError, match="synchronous"):
        EventStore.open(f"sqlite:///{tmp_path}/wg.db?synchronous=sometimes")


def test_event_ids_must_be_uuids(store: EventStore) -> None:
    with pytest.raises(TypeError, match="uuid"):
        store.append("s-1", [NewEvent(Holder(value=1), event_id="abc")])  # type: ignore[arg-type]
    assert store.head() == 0
    store.append("s-1", [NewEvent(Holder(value=1), event_id=uuid.uuid4())])
