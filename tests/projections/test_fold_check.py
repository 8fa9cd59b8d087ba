"""Every stream is read as its readers read it (issue 41, item 4), on both backends.

A log whose hashes all check out can still hold a stream no reader can read: an elastic Ray
Train run recorded a ``run-*`` stream beginning with ``ControllerStateChanged``, which `runs`,
`report` and serve refuse, and `verify` said ok. :func:`check_folds` names each such stream with
the version where its readers stop and why.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import pytest
from projection_builders import RunStream, Stream, append_stream

from tests.events.test_tamper import _rehash, _tamper
from wgstore.events import EventRegistry, EventStore, event_type
from wgstore.events.run import ControllerStateChanged
from wgstore.events.worker_group import WorkerGroupShutdownRequested, WorkerReported
from wgstore.projections.errors import ProjectionError
from wgstore.projections.fold_check import FoldCheck, UnreadableStream, check_folds
from wgstore.projections.queries import run_state


def _group(store: EventStore, group_id: str = "g1") -> str:
    stream = Stream(group_id, num_workers=2, start=datetime.now(UTC), step=timedelta(seconds=1))
    stream = stream.running().reported(0, loss=0.5).shutdown_requested().shut_down()
    append_stream(store, stream)
    return stream.stream_id


def _run(store: EventStore, run_id: str = "r1") -> str:
    stream = RunStream(run_id).created().to("SCHEDULING", "g1").to("RUNNING", "g1").finished("g1")
    store.append(stream.stream_id, [record.event for record in stream.events])
    return stream.stream_id


def test_a_log_every_reader_can_read_is_ok(store: EventStore) -> None:
    _group(store)
    _run(store)
    store.append("myapp-1", [WorkerGroupShutdownRequested(reason="a program's own stream")])
    assert check_folds(store) == FoldCheck(folded=2, decoded=1)
    assert check_folds(store).ok


def test_a_run_stream_that_does_not_begin_with_run_created_is_named(store: EventStore) -> None:
    """What the elastic Ray Train run recorded: hashes fine, no reader can read it."""
    _group(store)
    store.append(
        "run-elastic", [ControllerStateChanged(from_state="INITIALIZING", to_state="SCHEDULING")]
    )
    with pytest.raises(ProjectionError):
        run_state(store, "elastic")  # what `wgstore runs --run` and `report` do
    assert store.verify().ok  # the hashes say nothing of it
    check = check_folds(store)
    assert not check.ok
    position = store.head()
    assert check.unreadable == [
        UnreadableStream(
            "run-elastic",
            1,
            position,
            "ControllerStateChanged",
            "a run stream must begin with RunCreated at version 1",
        )
    ]
    assert str(check.unreadable[0]) == (
        f"stream 'run-elastic' cannot be read: its ControllerStateChanged at version 1 "
        f"(position {position}): a run stream must begin with RunCreated at version 1"
    )
    assert check.folded == 1
    assert check_folds(store, "run-elastic").unreadable == check.unreadable
    assert check_folds(store, "worker-group-g1") == FoldCheck(folded=1)


def test_a_worker_group_whose_lifecycle_breaks_is_named(store: EventStore) -> None:
    stream_id = _group(store)
    store.append(stream_id, [WorkerGroupShutdownRequested(reason="after the end")])
    [unreadable] = check_folds(store).unreadable
    assert (unreadable.stream_id, unreadable.event_type) == (
        stream_id,
        "WorkerGroupShutdownRequested",
    )
    assert unreadable.version == store.stream_version(stream_id)
    assert "is already SHUT_DOWN" in unreadable.reason


def _set(store: EventStore, stream_id: str, version: int, path: str, value: str) -> str:
    if store.is_postgres:
        return (
            f"UPDATE wg_events SET data = jsonb_set(data, '{{{path.replace('.', ',')}}}', "
            f"'{value}') WHERE stream_id = '{stream_id}' AND stream_version = {version}"
        )
    return (
        f"UPDATE wg_events SET data = json_set(data, '$.{path}', {value}) "
        f"WHERE stream_id = '{stream_id}' AND stream_version = {version}"
    )


def test_an_event_that_no_longer_decodes_is_named_in_any_stream(store: EventStore) -> None:
    """3 -> 3.0 in an integer field (issue 41, item 2): every read of the stream fails."""
    store.append("myapp-1", [WorkerReported(world_rank=0, index=3)])
    stream_id = _group(store)
    reported = next(r for r in store.read_stream(stream_id) if r.type == "WorkerReported")
    _tamper(
        store,
        _set(store, "myapp-1", 1, "index", "3.0"),
        _set(store, stream_id, reported.version, "world_rank", "0.0"),
        _rehash(store),
    )
    check = check_folds(store)
    assert [(u.stream_id, u.version, u.event_type) for u in check.unreadable] == [
        ("myapp-1", 1, "WorkerReported"),
        (stream_id, reported.version, "WorkerReported"),
    ]
    assert all("Expected `int`, got `float`" in u.reason for u in check.unreadable)
    assert check.unreadable[1].position == reported.position


NEWER = EventRegistry()


@event_type("RunCreatedByANewerWgstore", registry=NEWER)
@dataclass(frozen=True)
class NewerRunStart:
    """A type this process does not know, as a newer wgstore could write it first in a run."""

    run_id: str


NewerRunStart.__module__ = "wgstore.events.newer"  # wgstore's own namespace: run-* takes it


def test_a_run_stream_that_begins_with_an_unknown_type_is_decoded_not_folded(
    store_url: str,
) -> None:
    """Readers of this wgstore do not take it for a run (`runs` leaves it out): it is said
    which streams were not folded, and why."""
    with EventStore.open(store_url, registry=NEWER) as newer:
        newer.append("run-newer", [NewerRunStart(run_id="newer")])
    with EventStore.open(store_url) as store:
        _run(store)
        check = check_folds(store)
    assert check == FoldCheck(folded=1, not_runs=["run-newer"])
    assert check.ok
