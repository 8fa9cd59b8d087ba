"""Given events, then the poll history: the full status at every recorded poll."""

from __future__ import annotations

import pytest
from projection_builders import Stream, error, stopped

from wgstore.projections import (
    ProjectionError,
    WorkerStatus,
    fold_poll_history,
    project_worker_group,
)


def test_a_group_never_polled_has_an_empty_history() -> None:
    assert fold_poll_history(Stream().running().events) == []


def test_every_recorded_poll_carries_the_full_status_of_every_worker() -> None:
    stream = Stream(num_workers=3).running().polled().reported(0, loss=1.0)
    stream.polled(stopped(2, error("oom")), unchanged=9).shutdown_requested()
    stream.polled(stopped(0), stopped(1), unchanged=2).shut_down()
    history = fold_poll_history(stream.events)
    assert [p.poll_seq for p in history] == [1, 11, 14]
    assert [p.polls for p in history] == [1, 10, 3]
    assert [p.status.num_running for p in history] == [3, 2, 0]
    assert history[1].status.worker_statuses[2] == WorkerStatus(False, error("oom"))
    assert history[1].status.worker_statuses[0] == WorkerStatus(True)
    assert history[2].status.finished
    assert history[2].status.errors == {2: error("oom")}


def test_each_record_keeps_its_changes_and_the_span_of_unchanged_polls_before_it() -> None:
    stream = Stream().running().polled().polled(stopped(1), unchanged=5)
    last = fold_poll_history(stream.events)[-1]
    event = stream.events[-1]
    assert last.changes == (stopped(1),)
    assert last.unchanged_polls == 5
    assert last.unchanged_since == event.event.unchanged_since
    assert last.polled_at == event.event.polled_at
    assert (last.version, last.position) == (event.version, event.position)


def test_the_last_record_matches_the_state_poll_status() -> None:
    stream = Stream(num_workers=4).running().polled(stopped(3)).polled(stopped(1, error()))
    state = project_worker_group(stream.events)
    assert fold_poll_history(stream.events)[-1].status == state.poll_status


def test_the_history_refuses_an_invalid_stream() -> None:
    with pytest.raises(ProjectionError, match="no worker has world rank 9"):
        fold_poll_history(Stream().running().polled(stopped(9)).events)


def test_the_history_continues_from_a_state() -> None:
    stream = Stream().running().polled().polled(stopped(0))
    state = project_worker_group(stream.events[:-1])
    tail = fold_poll_history(stream.events[-1:], state)
    assert tail == fold_poll_history(stream.events)[-1:]
