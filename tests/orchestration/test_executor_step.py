"""The executor's pure step: event by event, what it dispatches and which polls fall due.

No store, no cluster, no clock: recorded events are built by hand (the projection tests'
builders) and ``now`` is a number.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from typing import Any

import msgspec
import pytest

from tests.projections.projection_builders import Stream, stopped
from wgstore.events import RecordedEvent
from wgstore.events.worker_group import StartStage, WorkerGroupStarted
from wgstore.orchestration.executor import step
from wgstore.orchestration.executor.commands import (
    ReleaseResources,
    ShutdownWorkerGroup,
    StartWorkerGroup,
    command_id_for,
)

EVERYTHING = step.Scope()


def _caused(record: RecordedEvent, command_id: Any) -> RecordedEvent:
    return msgspec.structs.replace(record, metadata={"causation_id": str(command_id)})


def _start_id(stream: Stream) -> Any:
    return command_id_for("StartWorkerGroup", stream.events[0].event_id)


def _as_executor_wrote_it(stream: Stream) -> list[RecordedEvent]:
    """The stream with every event after the request caused by the start (as a start appends)."""
    start = _start_id(stream)
    return [stream.events[0], *(_caused(r, start) for r in stream.events[1:])]


def _feed(
    records: Iterable[RecordedEvent],
    *,
    book: step.GroupBook | None = None,
    scope: step.Scope = EVERYTHING,
    catching_up: bool = False,
) -> tuple[step.GroupBook | None, list[Any], list[str]]:
    commands: list[Any] = []
    errors: list[str] = []
    for record in records:
        applied = step.apply_event(book, record, scope=scope, catching_up=catching_up)
        book = applied.book
        commands.extend(applied.commands)
        if applied.error:
            errors.append(applied.error)
    return book, commands, errors


class TestCommandsFromTheLog:
    def test_a_start_request_dispatches_one_start_and_marks_it_in_flight(self) -> None:
        stream = Stream("g1").requested()
        book, commands, _ = _feed(stream.events)

        assert [type(c) for c in commands] == [StartWorkerGroup]
        assert commands[0].command_id == _start_id(stream)
        assert book is not None and book.start_in_flight and book.run_id == "r1"

    def test_an_event_read_twice_dispatches_nothing_more(self) -> None:
        stream = Stream("g1").requested()
        book, _, _ = _feed(stream.events)
        again, commands, _ = _feed(stream.events, book=book)

        assert commands == [] and again == book

    def test_a_command_seen_once_is_not_dispatched_again(self) -> None:
        stream = Stream("g1").requested()
        book, (command,), _ = _feed(stream.events)
        assert book is not None

        assert step.dispatch(book, command) == (book, False)

    def test_the_own_start_s_builder_steps_do_not_release_while_it_runs(self) -> None:
        stream = Stream("g1").requested().placement_group().sync_actor().workers()
        book, commands, _ = _feed(_as_executor_wrote_it(stream))

        assert [type(c) for c in commands] == [StartWorkerGroup]
        assert book is not None and book.start_in_flight

    def test_the_start_s_own_launch_ends_it_in_flight(self) -> None:
        book, _, _ = _feed(_as_executor_wrote_it(Stream("g1").running()))

        assert book is not None and not book.start_in_flight

    def test_after_the_start_s_handler_raised_a_half_done_step_releases(self) -> None:
        stream = Stream("g1").requested().placement_group()
        book, _, _ = _feed(_as_executor_wrote_it(stream))
        assert book is not None
        book = step.start_failed(book)
        stream.sync_actor()

        _, commands, _ = _feed([_caused(stream.events[-1], _start_id(stream))], book=book)

        assert [(type(c), c.stage) for c in commands] == [(ReleaseResources, StartStage.WORKERS)]

    def test_a_shutdown_asked_while_starting_is_dispatched_at_once(self) -> None:
        stream = Stream("g1").requested().placement_group().shutdown_requested()
        _, commands, _ = _feed([*_as_executor_wrote_it(stream)[:2], stream.events[-1]])

        assert [type(c) for c in commands] == [StartWorkerGroup, ShutdownWorkerGroup]

    def test_an_event_whose_group_began_before_the_executor_read_is_ignored(self) -> None:
        stream = Stream("g1").running()
        book, commands, _ = _feed(stream.events[1:])

        assert book is None and commands == []

    def test_a_stream_the_fold_refuses_is_reported_once_and_then_left_alone(self) -> None:
        stream = Stream("g1").requested()
        stream.add(WorkerGroupStarted(start_time=stream.now, startup_s=1.0))  # no builder step
        stream.shutdown_requested()
        book, commands, errors = _feed(stream.events)

        assert book is not None and book.broken
        assert [type(c) for c in commands] == [StartWorkerGroup]
        assert len(errors) == 1 and "g1 is not a valid stream" in errors[0]
        assert not step.pollable(book)


class TestCatchUp:
    def test_a_done_start_is_skipped_and_only_the_latest_half_done_step_releases(self) -> None:
        stream = Stream("g1").requested().placement_group().sync_actor().workers()
        book, commands, _ = _feed(_as_executor_wrote_it(stream), catching_up=True)
        assert commands == [] and book is not None and len(book.pending) == 4

        book, commands_after = step.finish_catch_up(book)

        assert [(type(c), c.stage) for c in commands_after] == [
            (ReleaseResources, StartStage.INIT_TRAIN_CONTEXT)
        ]
        assert book.pending == ()

    def test_a_release_done_by_an_earlier_executor_is_not_repeated(self) -> None:
        stream = Stream("g1").requested().placement_group()
        records = _as_executor_wrote_it(stream)
        release = command_id_for("ReleaseResources", records[-1].event_id)
        stream.start_failed(StartStage.SYNC_ACTOR)
        records.append(_caused(stream.events[-1], release))

        book, _, _ = _feed(records, catching_up=True)
        assert book is not None
        _, commands = step.finish_catch_up(book)

        assert commands == ()

    def test_a_start_nobody_began_is_dispatched_after_catch_up(self) -> None:
        book, _, _ = _feed(Stream("g1").requested().events, catching_up=True)
        assert book is not None

        _, commands = step.finish_catch_up(book)

        assert [type(c) for c in commands] == [StartWorkerGroup]


class TestScope:
    def test_groups_of_other_runs_are_not_served(self) -> None:
        scope = step.Scope.of(run_ids={"r1"})
        ours = Stream("g1", run_id="r1").requested()
        theirs = Stream("g2", run_id="r2").requested().placement_group()

        book, commands, _ = _feed(ours.events, scope=scope)
        other, other_commands, _ = _feed(theirs.events, scope=scope)

        assert book is not None and [type(c) for c in commands] == [StartWorkerGroup]
        assert other is None and other_commands == []

    def test_groups_not_named_are_not_served_even_in_a_named_run(self) -> None:
        scope = step.Scope.of(group_ids={"g1"}, run_ids={"r1"})
        book, commands, _ = _feed(Stream("g2", run_id="r1").requested().events, scope=scope)

        assert book is None and commands == []
        assert not scope.everything and step.Scope.of().everything


def _running_book(**context: Any) -> step.GroupBook:
    stream = Stream("g1").requested(poll_interval_s=2.0, **context)
    stream.placement_group().sync_actor().workers().started().launched()
    book, _, _ = _feed(_as_executor_wrote_it(stream))
    assert book is not None
    return book


class TestPolls:
    def test_a_running_group_is_due_at_once_then_every_poll_interval(self) -> None:
        books = {"g1": _running_book()}

        first = step.schedule_polls(books, now=100.0)
        books.update(first.books)
        queued = step.schedule_polls(books, now=105.0)  # still queued: not due again
        books["g1"] = step.poll_taken(books["g1"])
        early = step.schedule_polls(books, now=101.0)
        due = step.schedule_polls(books, now=102.0)

        assert first.due == ("g1",) and books["g1"].next_poll_at == 102.0
        assert queued.due == () and early.due == () and due.due == ("g1",)

    def test_the_loop_sleeps_until_the_next_poll_but_never_long(self) -> None:
        book = dataclasses.replace(_running_book(), next_poll_at=10.2)

        assert step.next_wake_s([book], now=10.0) == pytest.approx(0.2)
        assert step.next_wake_s([book], now=0.0) == 0.5
        assert step.next_wake_s([book], now=11.0) == 0.005
        assert step.next_wake_s([], now=0.0) == 0.5

    def test_a_poll_still_in_flight_wakes_the_loop_for_the_next_one_but_never_spins(self) -> None:
        # The poll just scheduled appends nothing when nothing changed: only the loop's own
        # timeout brings the next poll, so it must end at the next poll's time, not 0.5 s later.
        queued = dataclasses.replace(_running_book(), next_poll_at=10.1, poll_queued=True)

        assert step.next_wake_s([queued], now=10.0) == pytest.approx(0.1)
        assert step.next_wake_s([queued], now=10.3) == 0.5  # overdue and still polling: no spin

    def test_a_group_is_not_polled_before_launch_after_its_workers_stopped_or_its_end(
        self,
    ) -> None:
        starting, _, _ = _feed(Stream("g1").requested().placement_group().events)
        assert starting is not None
        stream = Stream("g1").running().polled(stopped(0), stopped(1))
        all_stopped, _, _ = _feed(stream.events)
        assert all_stopped is not None
        ended, _, _ = _feed(Stream("g1").running().shutdown_requested().shut_down().events)
        assert ended is not None

        assert not step.pollable(starting)
        assert not step.pollable(all_stopped)
        assert not step.pollable(step.polls_done(_running_book()))
        schedule = step.schedule_polls({"g1": ended}, now=0.0)
        assert schedule.due == () and schedule.ended == ("g1",)
