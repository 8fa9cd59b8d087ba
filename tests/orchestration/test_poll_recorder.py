"""The poll recorder stores changes only and accounts for every poll: pure, no Ray."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime, timedelta

import pytest

from wgstore.events.worker_group import ErrorInfo
from wgstore.orchestration.polling.recorder import PollRecorder, WorkerObservation, WorkerPoll

T0 = datetime(2026, 1, 1, tzinfo=UTC)
RUN = WorkerObservation(running=True)
DONE = WorkerObservation(running=False)


def at(seconds: int) -> datetime:
    return T0 + timedelta(seconds=seconds)


def test_unchanged_polls_are_not_stored_but_counted_on_the_next_change() -> None:
    recorder = PollRecorder({0: RUN, 1: RUN})
    assert recorder.observe({0: RUN, 1: RUN}, at(1)) is None
    assert recorder.observe({0: RUN, 1: RUN}, at(2)) is None
    event = recorder.observe({0: DONE, 1: RUN}, at(3))
    assert event is not None
    assert (event.poll_seq, event.unchanged_polls, event.unchanged_since) == (3, 2, at(1))
    assert [(c.world_rank, c.running) for c in event.changes] == [(0, False)]


def test_an_error_is_a_change_and_the_same_error_again_is_not() -> None:
    boom = WorkerObservation(running=False, error=ErrorInfo(type="E", message="boom"))
    recorder = PollRecorder({0: RUN})
    first = recorder.observe({0: boom}, at(1))
    assert first is not None and first.changes[0].error == boom.error
    assert recorder.observe({0: boom}, at(2)) is None


def test_flush_records_the_trailing_unchanged_polls_so_every_poll_is_accounted_for() -> None:
    recorder = PollRecorder({0: RUN}, last_poll_seq=10)
    for second in range(1, 5):
        assert recorder.observe({0: RUN}, at(second)) is None
    flushed = recorder.flush()
    assert flushed is not None
    assert (flushed.poll_seq, flushed.unchanged_polls, flushed.changes) == (14, 3, ())
    assert flushed.polled_at == at(4) and flushed.unchanged_since == at(1)
    assert recorder.flush() is None


def test_two_changes_in_a_row_claim_no_unchanged_poll_between_them() -> None:
    recorder = PollRecorder({0: RUN, 1: RUN})
    assert recorder.observe({0: RUN, 1: RUN}, at(1)) is None
    first = recorder.observe({0: DONE, 1: RUN}, at(2))
    second = recorder.observe({0: DONE, 1: DONE}, at(3))
    assert first is not None and second is not None
    assert (first.poll_seq, first.unchanged_polls, first.unchanged_since) == (2, 1, at(1))
    assert (second.poll_seq, second.unchanged_polls, second.unchanged_since) == (3, 0, None)
    assert [c.world_rank for c in second.changes] == [1]  # rank 0's change was recorded
    assert recorder.poll_seq == 3
    assert recorder.flush() is None  # no trailing unchanged polls after a change


def test_a_fresh_recorder_records_every_worker_on_its_first_poll() -> None:
    recorder = PollRecorder()
    assert recorder.poll_seq == 0
    event = recorder.observe({1: RUN, 0: DONE}, at(1))
    assert event is not None
    assert [(c.world_rank, c.running) for c in event.changes] == [(0, False), (1, True)]
    assert (event.poll_seq, event.polled_at, event.unchanged_polls) == (1, at(1), 0)
    assert recorder.flush() is None


def test_flushing_one_trailing_unchanged_poll_stands_for_no_other() -> None:
    recorder = PollRecorder({0: RUN}, last_poll_seq=2)
    assert recorder.observe({0: RUN}, at(5)) is None
    flushed = recorder.flush()
    assert flushed is not None
    assert (flushed.poll_seq, flushed.polled_at, flushed.unchanged_polls) == (3, at(5), 0)
    assert flushed.unchanged_since is None


def test_unchanged_polls_after_a_flush_are_counted_afresh() -> None:
    recorder = PollRecorder({0: RUN})
    recorder.observe({0: RUN}, at(1))
    recorder.observe({0: RUN}, at(2))
    assert recorder.flush() is not None
    assert recorder.observe({0: RUN}, at(3)) is None
    event = recorder.observe({0: DONE}, at(4))
    assert event is not None
    assert (event.unchanged_polls, event.unchanged_since) == (1, at(3))


def test_worker_observation_is_the_projections_worker_status_and_other_names_raise() -> None:
    from wgstore.orchestration.polling import recorder as poll_recorder
    from wgstore.projections.state import WorkerStatus

    assert poll_recorder.WorkerObservation is WorkerStatus
    with pytest.raises(AttributeError, match="has no attribute 'Nope'"):
        poll_recorder.Nope  # noqa: B018


def test_a_worker_poll_is_a_frozen_slotted_value() -> None:
    poll = WorkerPoll(running=True)
    assert (poll.error, poll.return_value) == (None, None)
    with pytest.raises(dataclasses.FrozenInstanceError):
        poll.running = False  # type: ignore[misc]
    assert not hasattr(poll, "__dict__")
