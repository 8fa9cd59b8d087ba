"""The poll recorder stores changes only and accounts for every poll: pure, no Ray."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from wgstore.events.worker_group import ErrorInfo
from wgstore.orchestration.poll_recorder import PollRecorder, WorkerObservation

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
