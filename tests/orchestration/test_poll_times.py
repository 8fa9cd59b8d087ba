"""``PollTimes`` answers what the full scan answers (``schedule_polls`` and ``next_wake_s`` over
every book), turn after turn, while books are added, changed, polled and dropped. No store, no
clock: ``now`` is a number and the books are built by the step tests' helpers."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.orchestration.test_executor_step import _feed, _running_book
from tests.projections.projection_builders import Stream
from wgstore.orchestration.executor import step
from wgstore.orchestration.executor.poll_times import PollTimes

GROUPS = ["g0", "g1", "g2"]


def _kinds() -> dict[str, step.GroupBook]:
    starting, _, _ = _feed(Stream("g1").requested().placement_group().events)
    ended, _, _ = _feed(Stream("g1").running().shutdown_requested().shut_down().events)
    assert starting is not None and ended is not None
    running = _running_book()  # polled every 2 s
    return {
        "running": running,
        "starting": starting,
        "ended": ended,
        "finished": step.polls_done(running),
    }


KINDS = _kinds()

a_time = st.integers(min_value=0, max_value=12).map(lambda n: n / 4)  # ties happen
a_book = st.builds(
    lambda kind, at, queued: dataclasses.replace(KINDS[kind], next_poll_at=at, poll_queued=queued),
    st.sampled_from(["running", "running", "running", "starting", "ended", "finished"]),
    a_time,
    st.booleans(),
)
a_move = st.one_of(
    st.tuples(st.just("put"), st.sampled_from(GROUPS), a_book),
    st.tuples(st.just("taken"), st.sampled_from(GROUPS), st.none()),
    st.tuples(st.just("drop"), st.sampled_from(GROUPS), st.none()),
    st.tuples(st.just("wait"), st.none(), a_time),
    st.tuples(st.just("turn"), st.booleans(), st.none()),
)


@settings(max_examples=500)
@given(st.lists(a_move, min_size=10, max_size=80))
def test_poll_times_decides_as_the_full_scan_every_turn(moves: list[tuple]) -> None:
    books: dict[str, step.GroupBook] = {}
    times = PollTimes()
    now = 0.0
    for move, arg, value in moves:
        if move == "put":
            books[arg] = value
            times.changed(arg)
        elif move == "taken" and arg in books:
            books[arg] = step.poll_taken(books[arg])
            times.changed(arg)
        elif move == "drop" and arg in books:
            del books[arg]
            times.changed(arg)
        elif move == "wait":
            now += value
        assert times.next_wake_s(books, now) == step.next_wake_s(books.values(), now)
        if move != "turn":
            continue
        expected = step.schedule_polls(dict(books), now)
        got = times.schedule(books, now)
        assert sorted(got.due) == sorted(expected.due)
        assert got.books == expected.books
        assert sorted(got.ended) == sorted(expected.ended)
        books.update(got.books)
        for group_id in got.ended:  # as the executor: dropped unless its lane is still busy
            if arg:
                del books[group_id]
            times.changed(group_id)
        assert times.next_wake_s(books, now) == step.next_wake_s(books.values(), now)


def test_a_turn_looks_only_at_what_changed_or_fell_due(monkeypatch: pytest.MonkeyPatch) -> None:
    """Of 500 running groups polled every 2 s, a turn between their times looks at none."""
    running = KINDS["running"]
    books = {f"g{n}": dataclasses.replace(running, next_poll_at=n / 250) for n in range(500)}
    times = PollTimes()
    for group_id in books:
        times.changed(group_id)
    first = times.schedule(books, now=0.0)  # only g0 is due at 0
    books.update(first.books)
    assert first.due == ("g0",)
    looked: list[int] = []
    real = step.schedule_polls

    def counting(subset: dict[str, step.GroupBook], now: float) -> step.PollSchedule:
        looked.append(len(subset))
        return real(subset, now)

    monkeypatch.setattr("wgstore.orchestration.executor.poll_times.schedule_polls", counting)
    quiet = times.schedule(books, now=0.001)
    due = times.schedule(books, now=0.01)  # g1 and g2 fell due (at 0.004 and 0.008)
    assert quiet.due == () and looked[0] == 0
    assert sorted(due.due) == ["g1", "g2"] and looked[1] == 2
    assert times.next_wake_s(books, 0.01) == step.next_wake_s(books.values(), 0.01)
