"""The committed checkpoint of a group, over generated report histories (no database).

Each rank reports steps 0, 1, ... until it dies at a random step; the ranks' reports interleave
at random. Whatever the history, the group's ``latest_checkpoint`` is one every rank reported
(at one report index, one path among the ranks that carried one) and the highest such.
"""

from __future__ import annotations

from dataclasses import dataclass

from hypothesis import given, settings
from hypothesis import strategies as st
from projection_builders import Stream

from wgstore.events.worker_group import WorkerReported
from wgstore.projections import project_worker_group
from wgstore.projections.snapshots import decode_state, encode_state


@dataclass(frozen=True)
class History:
    num_workers: int
    reports: list[WorkerReported]
    """In log order."""


def _path(step: int, rank: int, odd: bool) -> str:
    # an odd rank names its own path: only a foreign writer's log can hold that
    return f"/ckpt/step{step}" + (f"-rank{rank}" if odd else "")


@st.composite
def histories(draw: st.DrawFn, *, every_rank_checkpoints: bool) -> History:
    num_workers = draw(st.integers(1, 4))
    per_rank: list[list[WorkerReported]] = []
    for rank in range(num_workers):
        steps = draw(st.integers(0, 8))  # the rank dies (or stops) after this many reports
        reports = []
        for step in range(steps):
            if every_rank_checkpoints:
                checkpoint: str | None = _path(step, rank, odd=False)
            else:
                kind = draw(st.sampled_from(["same", "same", "none", "odd"]))
                checkpoint = None if kind == "none" else _path(step, rank, odd=kind == "odd")
            reports.append(
                WorkerReported(
                    world_rank=rank, index=step, metrics={"step": step}, checkpoint=checkpoint
                )
            )
        per_rank.append(reports)
    merged: list[WorkerReported] = []
    cursors = [0] * num_workers
    while any(cursors[r] < len(per_rank[r]) for r in range(num_workers)):
        ready = [r for r in range(num_workers) if cursors[r] < len(per_rank[r])]
        rank = draw(st.sampled_from(ready))
        merged.append(per_rank[rank][cursors[rank]])
        cursors[rank] += 1
    return History(num_workers, merged)


def _stream(history: History) -> Stream:
    stream = Stream(num_workers=history.num_workers).running()
    for report in history.reports:
        stream.add(report)
    return stream


def _committable(history: History) -> dict[int, str]:
    """Report index -> path, for the indexes every rank reported, carrying one agreed path."""
    by_index: dict[int, list[WorkerReported]] = {}
    for report in history.reports:
        by_index.setdefault(report.index, []).append(report)
    found = {}
    for index, reports in by_index.items():
        if {r.world_rank for r in reports} != set(range(history.num_workers)):
            continue
        paths = {r.checkpoint for r in reports} - {None}
        if len(paths) == 1:
            found[index] = paths.pop()
    return found


def _check(history: History) -> None:
    stream = _stream(history)
    state = project_worker_group(stream.events)
    committable = _committable(history)
    if not committable:
        assert state.latest_checkpoint is None and state.checkpoint_index is None
        return
    index = state.checkpoint_index
    assert index is not None and index == max(committable)
    assert state.latest_checkpoint == committable[index]
    # every rank reported that index, and each carried that path or none
    at_index = [r for r in history.reports if r.index == index]
    assert sorted(r.world_rank for r in at_index) == list(range(history.num_workers))
    assert all(r.checkpoint in (None, state.latest_checkpoint) for r in at_index)
    # committed when the last of them was recorded
    last = max(
        e.version
        for e in stream.events
        if isinstance(e.event, WorkerReported) and e.event.index == index
    )
    assert state.checkpoint_committed_at == stream.events[last - 1].recorded_at


@settings(max_examples=300, deadline=None)
@given(histories(every_rank_checkpoints=True))
def test_the_committed_checkpoint_is_the_highest_step_every_rank_reported(
    history: History,
) -> None:
    _check(history)
    state = project_worker_group(_stream(history).events)
    steps = [
        max((r.index for r in history.reports if r.world_rank == rank), default=-1)
        for rank in range(history.num_workers)
    ]
    # the user's case: the retry starts from the step the slowest (or dead) rank reached
    expected = None if min(steps) < 0 else f"/ckpt/step{min(steps)}"
    assert state.latest_checkpoint == expected


@settings(max_examples=300, deadline=None)
@given(histories(every_rank_checkpoints=False))
def test_ranks_without_a_checkpoint_count_and_disagreeing_paths_commit_nothing(
    history: History,
) -> None:
    _check(history)


@settings(max_examples=150, deadline=None)
@given(histories(every_rank_checkpoints=False), st.data())
def test_a_snapshot_taken_between_reports_continues_to_the_same_commit(
    history: History, data: st.DataObject
) -> None:
    events = _stream(history).events
    k = data.draw(st.integers(1, len(events)))
    snapshot = decode_state(encode_state(project_worker_group(events[:k])))
    assert project_worker_group(events[k:], snapshot) == project_worker_group(events)
