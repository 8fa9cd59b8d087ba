"""Reading events of types this process does not know, and error text stored without colours."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
import sqlalchemy as sa

from wgstore.events import EventDecodeError, EventRegistry, EventStore, UnknownEvent, event_type
from wgstore.events.worker_group import (
    ErrorInfo,
    StartStage,
    WorkerGroupShutdownRequested,
    WorkerGroupStartFailed,
    strip_ansi,
)

OTHER_PROGRAM = EventRegistry()


@event_type("CheckpointPinned", version=2, registry=OTHER_PROGRAM)
@dataclass(frozen=True)
class CheckpointPinned:
    path: str
    step: int = 0


def test_an_event_of_an_unregistered_type_reads_back_as_its_raw_payload(
    store: EventStore,
) -> None:
    with EventStore.open(store.url, registry=OTHER_PROGRAM) as other:
        [pinned] = other.append("pins-42", [CheckpointPinned(path="/ckpt/3", step=7)])
    store.append("pins-42", [WorkerGroupShutdownRequested(reason="known")])
    [first, second] = store.read_stream("pins-42")
    assert first.event == UnknownEvent(
        type="CheckpointPinned", schema_version=2, data={"path": "/ckpt/3", "step": 7}
    )
    assert (first.type, first.position, first.hash) == (
        "CheckpointPinned",
        pinned.position,
        pinned.hash,
    )
    assert second.event == WorkerGroupShutdownRequested(reason="known")
    assert [r.event for r in store.read_all()] == [first.event, second.event]
    assert [r.type for r in store.read_all(types=["CheckpointPinned"])] == ["CheckpointPinned"]
    assert store.verify().ok


# Ray colours actor names in its error text; the report shows escape codes as boxes.
COLOURED = [
    ("\x1b[36mray::WgstoreWorker.run()\x1b[39m (pid=4242)", "ray::WgstoreWorker.run() (pid=4242)"),
    ("\x1b[1;31mValueError\x1b[0m: boom", "ValueError: boom"),
    ("\x1b[38;5;208morange\x1b[0m and \x1b[48;2;1;2;3mtrue colour\x1b[m", "orange and true colour"),
    ("progress\x1b[2K\x1b[1Gdone", "progressdone"),
    ("\x1b]0;window title\x07text", "text"),
    ("\x1b]8;;https://x.test\x1b\\link\x1b]8;;\x1b\\", "link"),
    ("\x1bMreverse index", "reverse index"),
]
CLEAN = [
    'Traceback (most recent call last):\n  File "t.py", line 3, in <module>\n    x[0]\n',
    "[Rank 1] loss=nan [36m is not an escape without ESC; unicode stays: é ✓",
    "",
]


@pytest.mark.parametrize(("coloured", "clean"), COLOURED)
def test_an_error_info_made_from_coloured_text_stores_none_of_the_escapes(
    coloured: str, clean: str
) -> None:
    info = ErrorInfo(type="\x1b[31mRayTaskError\x1b[0m", message=coloured, traceback=coloured)
    assert (info.type, info.message, info.traceback) == ("RayTaskError", clean, clean)
    assert strip_ansi(coloured) == clean


@pytest.mark.parametrize("text", CLEAN)
def test_text_without_escapes_is_kept_whole(text: str) -> None:
    info = ErrorInfo(type="ValueError", message=text, traceback=text)
    assert (info.message, info.traceback) == (text, text)


def test_an_error_info_from_an_exception_with_colours_is_clean() -> None:
    try:
        raise RuntimeError("\x1b[36mray::WgstoreWorker.poll()\x1b[39m failed")
    except RuntimeError as error:
        info = ErrorInfo.from_exception(error)
    assert info.message == "ray::WgstoreWorker.poll() failed"
    assert "\x1b" not in info.traceback
    assert "ray::WgstoreWorker.poll() failed" in info.traceback
    assert "Traceback (most recent call last)" in info.traceback


def test_a_coloured_error_is_stored_without_escape_codes(store: EventStore) -> None:
    error = ErrorInfo(
        type="ActorDiedError",
        message="\x1b[36mray::WgstoreWorker\x1b[39m died",
        traceback="Traceback (most recent call last):\n  \x1b[1mFile\x1b[0m x\n",
    )
    store.append("worker-group-x", [WorkerGroupStartFailed(stage=StartStage.WORKERS, error=error)])
    data = "data::text" if store.is_postgres else "data"
    with store.engine.connect() as connection:
        stored = connection.execute(sa.text(f"SELECT {data} FROM wg_events")).scalar_one()
    assert "\\u001b" not in stored.lower() and "\x1b" not in stored
    assert "ray::WgstoreWorker died" in stored
    [read] = store.read_stream("worker-group-x")
    assert read.event.error.message == "ray::WgstoreWorker died"


def test_read_all_of_a_stream_prefix_skips_other_streams_and_counts_only_its_own(
    store: EventStore,
) -> None:
    for index in range(5):
        store.append(f"run-{index}", [WorkerGroupShutdownRequested(reason=f"run {index}")])
        store.append(f"worker-group-{index}", [WorkerGroupShutdownRequested(reason=f"g {index}")])
    owned = list(store.read_all(streams="worker-group-"))
    assert [r.stream_id for r in owned] == [f"worker-group-{i}" for i in range(5)]
    first_two = list(store.read_all(streams="worker-group-", limit=2))
    assert first_two == owned[:2]
    assert list(store.read_all(after=owned[2].position, streams="worker-group-")) == owned[3:]


@event_type("WorkerGroupShutdownRequested", version=1, registry=OTHER_PROGRAM)
@dataclass(frozen=True)
class ClashingShutdown:
    """Another program's event under one of wgstore's type names, with another payload: this
    process cannot decode it as its own class."""

    reason: int


def test_read_all_keep_sees_every_row_in_order_and_decodes_only_what_it_keeps(
    store: EventStore,
) -> None:
    store.append("worker-group-a", [WorkerGroupShutdownRequested(reason="mine")])
    with EventStore.open(store.url, registry=OTHER_PROGRAM) as other:
        other.append("notes-1", [ClashingShutdown(reason=7)])
    store.append("worker-group-b", [WorkerGroupShutdownRequested(reason="also mine")])
    with pytest.raises(EventDecodeError):
        list(store.read_all())  # decoded, the other program's row fails
    offered: list[tuple[int, str, str]] = []

    def keep(position: int, stream_id: str, type_: str) -> bool:
        offered.append((position, stream_id, type_))
        return stream_id.startswith("worker-group-")

    kept = list(store.read_all(keep=keep))
    assert [r.event.reason for r in kept] == ["mine", "also mine"]
    assert offered == [
        (1, "worker-group-a", "WorkerGroupShutdownRequested"),
        (2, "notes-1", "WorkerGroupShutdownRequested"),
        (3, "worker-group-b", "WorkerGroupShutdownRequested"),
    ]
    assert list(store.read_all(after=1, limit=1, keep=lambda *_: False)) == []


@pytest.mark.parametrize("transactional", [False, True])
def test_a_subscription_to_a_stream_prefix_sees_only_those_streams_and_reaches_the_head(
    store: EventStore, transactional: bool
) -> None:
    seen: list[str] = []

    def handler(*args: object) -> None:
        batch = args[-1]
        assert isinstance(batch, list) and batch  # never called with nothing
        seen.extend(record.stream_id for record in batch)

    subscription = store.subscription("groups-only", streams="worker-group-")
    store.append("worker-group-a", [WorkerGroupShutdownRequested(reason="1")])
    with EventStore.open(store.url, registry=OTHER_PROGRAM) as other:
        other.append("notes", [CheckpointPinned(path="/x")])
    assert subscription.process(handler, transactional=transactional, batch_size=1) == 1
    assert seen == ["worker-group-a"]
    assert subscription.checkpoint() == store.head()
    store.append("run-1", [WorkerGroupShutdownRequested(reason="2")])  # only moves the checkpoint
    assert subscription.process(handler, transactional=transactional) == 0
    assert seen == ["worker-group-a"]
    assert subscription.checkpoint() == store.head()
