"""The executor's pure step: the guards and fields the event-by-event tests left unchecked.

Written for the survivors of ``make mutate`` (issue 15): what the book remembers of the log
(causations, the start's id), which checks stop a command that is no longer needed, a scope
limited one way only, the defaults a fresh book starts from, and immutability. No store, no
cluster, no clock.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import msgspec
import pytest

from tests.projections.projection_builders import RunStream, Stream
from wgstore.events import RecordedEvent
from wgstore.orchestration.executor import step
from wgstore.orchestration.executor.commands import StartWorkerGroup, command_id_for

EVERYTHING = step.Scope()


def _caused(record: RecordedEvent, command_id: Any) -> RecordedEvent:
    return msgspec.structs.replace(record, metadata={"causation_id": str(command_id)})


def _feed(records: Any, book: step.GroupBook | None = None, **kw: Any) -> step.GroupBook | None:
    kw.setdefault("scope", EVERYTHING)
    kw.setdefault("catching_up", False)
    for record in records:
        book = step.apply_event(book, record, **kw).book
    return book


def _start(stream: Stream) -> Any:
    return command_id_for("StartWorkerGroup", stream.events[0].event_id)


def test_the_book_remembers_each_causation_id_once_and_events_without_one_add_none() -> None:
    stream = Stream("g1").requested().placement_group().sync_actor()
    start = _start(stream)
    records = [stream.events[0], *(_caused(r, start) for r in stream.events[1:])]

    book = _feed(records)

    assert book is not None
    assert book.causations == frozenset({str(start)})
    assert book.start_command_id == start and book.start_causation == str(start)


def test_a_book_without_a_start_request_has_no_start_causation() -> None:
    assert step.GroupBook("g1").start_causation is None


def test_a_start_no_event_names_is_still_not_dispatched_once_the_group_is_running() -> None:
    # written by a start that recorded no causation ids: only the state says it is done
    book = _feed(Stream("g1").running().events, catching_up=True)
    assert book is not None and isinstance(book.pending[0], StartWorkerGroup)
    assert book.causations == frozenset()

    after, commands = step.finish_catch_up(book)

    assert commands == () and after.seen_commands == frozenset()


def test_a_book_that_has_folded_nothing_dispatches_nothing() -> None:
    caught_up = _feed(Stream("g1").requested().events, catching_up=True)
    assert caught_up is not None
    (command,) = caught_up.pending
    book = step.GroupBook("g1")

    assert step.dispatch(book, command) == (book, False)
    assert step.dispatch(dataclasses.replace(caught_up, pending=()), command)[1]


def test_an_event_of_another_stream_leaves_the_book_as_it_is() -> None:
    book = _feed(Stream("g1").requested().events)
    assert book is not None
    # a later version than the book's: only the stream id tells it is not the group's
    run_event = RunStream("r1").created().to("SCHEDULING", "g1").events[-1]
    assert book.state is not None and run_event.version > book.state.version

    applied = step.apply_event(book, run_event, scope=EVERYTHING, catching_up=False)

    assert applied == step.Applied(book)


def test_a_scope_limited_by_one_side_only_is_not_everything() -> None:
    assert not step.Scope.of(group_ids={"g1"}).everything
    assert not step.Scope.of(run_ids={"r1"}).everything
    assert step.Scope.of().everything


def test_a_fresh_book_belongs_to_no_run_and_is_due_for_a_poll_at_any_clock_reading() -> None:
    book = step.GroupBook("g1")
    assert (book.run_id, book.next_poll_at, book.pending) == ("", 0.0, ())
    stream = Stream("g1").requested(poll_interval_s=2.0)
    stream.placement_group().sync_actor().workers().started().launched()
    running = _feed(stream.events)
    assert running is not None

    assert step.schedule_polls({"g1": running}, now=0.0).due == ("g1",)


def test_a_poll_queued_and_due_right_now_does_not_make_the_loop_spin() -> None:
    stream = Stream("g1").running()
    book = _feed(stream.events)
    assert book is not None
    queued = dataclasses.replace(book, next_poll_at=10.0, poll_queued=True)

    assert step.next_wake_s([queued], now=10.0) == 0.5


def _values() -> list[Any]:
    book = step.GroupBook("g1")
    return [
        step.Scope(),
        book,
        step.Applied(book),
        step.PollSchedule(books={}, due=(), ended=()),
    ]


@pytest.mark.parametrize("index", range(4), ids=["Scope", "GroupBook", "Applied", "PollSchedule"])
def test_the_step_s_values_are_immutable_and_slotted(index: int) -> None:
    value = _values()[index]
    name = dataclasses.fields(value)[0].name
    with pytest.raises(dataclasses.FrozenInstanceError):
        setattr(value, name, getattr(value, name))
    assert not hasattr(value, "__dict__")
