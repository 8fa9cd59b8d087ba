"""A stored event type or payload field is named in SQL from the event class: a name that is not
one raises, and the readers that query ``wg_events`` themselves use only such names."""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path

import pytest
import sqlalchemy as sa
from sqlalchemy.dialects import postgresql, sqlite

from wgstore.events import REGISTRY, InvalidArgumentError, UnknownEventTypeError
from wgstore.events.stored_names import field_name, json_field, type_name
from wgstore.events.worker_group import WorkerGroupStartRequested, WorkerReported

REPO = Path(__file__).resolve().parents[2]
PACKAGE_DIRS = ("_wgstore", "events", "projections", "orchestration", "cli", "serve")


def test_a_type_name_is_the_registered_name_of_every_event_class() -> None:
    for name in REGISTRY.names():
        assert type_name(REGISTRY.by_name(name).cls) == name


def test_a_class_that_is_not_an_event_type_has_no_stored_name() -> None:
    @dataclasses.dataclass(frozen=True)
    class NotAnEvent:
        checkpoint: str

    with pytest.raises(UnknownEventTypeError):
        type_name(NotAnEvent)
    with pytest.raises(UnknownEventTypeError):
        field_name(NotAnEvent, "checkpoint")


def test_a_field_is_named_only_if_the_event_class_has_it() -> None:
    assert field_name(WorkerReported, "checkpoint") == "checkpoint"
    with pytest.raises(InvalidArgumentError, match=r"WorkerReported has no field 'checkpoints'"):
        field_name(WorkerReported, "checkpoints")
    with pytest.raises(InvalidArgumentError):
        json_field(WorkerReported, "path", postgres=True)


def test_every_field_is_stored_under_its_own_name() -> None:
    """What makes a field's name its key in ``data``: the codec writes no renamed key."""
    from wgstore.events.codec import Codec

    event = WorkerReported(world_rank=0, index=3, metrics={"loss": 1.0}, checkpoint="/c")
    _, data = Codec().encode(event)
    keys = set(json.loads(data))
    assert keys == {f.name for f in dataclasses.fields(WorkerReported)}


@pytest.mark.parametrize(
    ("postgres", "dialect", "sql"),
    [
        (True, postgresql.dialect(), "data->>'run_id'"),
        (False, sqlite.dialect(), "json_extract(data, '$.run_id')"),
    ],
    ids=["postgres", "sqlite"],
)
def test_a_json_field_is_the_backends_text_of_the_data_key(
    postgres: bool, dialect: sa.Dialect, sql: str
) -> None:
    column = json_field(WorkerGroupStartRequested, "run_id", postgres=postgres)
    assert str(column.compile(dialect=dialect)) == sql


def test_a_json_field_reads_the_stored_field_on_sqlite(tmp_path: Path) -> None:
    from wgstore.events import EventStore
    from wgstore.events.schema import wg_events

    store = EventStore.open(f"sqlite:///{tmp_path / 'log.db'}")
    try:
        store.append(
            "worker-group-g",
            [
                WorkerReported(world_rank=0, index=0, metrics={}, checkpoint="/ckpt/0"),
                WorkerReported(world_rank=0, index=1, metrics={}, checkpoint=None),
            ],
            expected_version=0,
        )
        query = (
            sa.select(json_field(WorkerReported, "checkpoint", postgres=False))
            .where(wg_events.c.event_type == type_name(WorkerReported))
            .order_by(wg_events.c.position)
        )
        with store.engine.connect() as connection:
            assert [row[0] for row in connection.execute(query)] == ["/ckpt/0", None]
    finally:
        store.close()


_RAW_SQL_FIELD = re.compile(r"\bdata\s*->>?\s*'(?!\{)|json_extract\(\s*data\s*,\s*'\$\.(?!\{)")
"""A key of ``wg_events.data`` written out in SQL (an f-string's ``{...}`` is a derived name)."""
_TYPE_COMPARED = re.compile(r"""(event_type|\.type)\s*(==|!=)\s*["']([A-Z]\w+)["']""")
_TYPES_LISTED = re.compile(r"""types\s*=\s*\[\s*["']([A-Z]\w+)["']""")


def _package_sources() -> list[Path]:
    return [p for d in PACKAGE_DIRS for p in sorted((REPO / d).rglob("*.py"))]


def test_no_reader_names_a_stored_field_or_type_by_a_string_literal() -> None:
    """Outside :mod:`wgstore.events.stored_names`, no module reads a JSON field of ``data`` in
    SQL by its literal key, nor compares a stored type with a literal event type name."""
    registered = set(REGISTRY.names())
    found = []
    for path in _package_sources():
        if path.name == "stored_names.py" and path.parent.name == "events":
            continue
        for number, line in enumerate(path.read_text().splitlines(), start=1):
            code = line.split("#", 1)[0]
            where = f"{path.relative_to(REPO)}:{number}: {line.strip()}"
            if _RAW_SQL_FIELD.search(code):
                found.append(where)
            for match in (*_TYPE_COMPARED.finditer(code), *_TYPES_LISTED.finditer(code)):
                if match.group(match.lastindex or 0) in registered:
                    found.append(where)
    assert found == []


def test_the_scan_finds_a_raw_field_and_a_raw_type_name() -> None:
    """The patterns above match what the readers used to write (the scan can fail)."""
    assert _RAW_SQL_FIELD.search("""sa.text("(data->>'checkpoint') IS NOT NULL")""")
    assert _RAW_SQL_FIELD.search("""sa.literal_column("json_extract(data, '$.run_id')")""")
    assert not _RAW_SQL_FIELD.search("""f"data->'{_CHANGES}' <> '[]'::jsonb" """)
    assert _TYPE_COMPARED.search("""wg_events.c.event_type == "WorkerReported\"""")
    assert _TYPE_COMPARED.search("""if record.type == "WorkerReported":""")
    assert _TYPES_LISTED.search("""store.read_all(types=["WorkerGroupStartRequested"])""")


def test_the_type_index_leaves_out_the_stored_names_of_reports_and_polls() -> None:
    """``events/schema.py`` spells them out (the migrations' index predicate is written against
    it and depends on nothing in wgstore): they must stay the names those classes are stored
    under, or the index would start holding the bulk of the log."""
    from wgstore.events.schema import FREQUENT_TYPES
    from wgstore.events.worker_group import WorkerGroupPolled

    assert (type_name(WorkerReported), type_name(WorkerGroupPolled)) == FREQUENT_TYPES
