"""Checkpoint reports are consistent across ranks, as Ray Train's consolidation requires.

All ranks report the same checkpoint path for one report index (or none); a rank reporting a
different path is refused with a clear error and nothing of it is stored.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.orchestration.conftest import assert_nothing_left, make_context
from wgstore.events.worker_group import stream_id_for_group
from wgstore.orchestration import WorkerGroup

pytestmark = [pytest.mark.ray]

FN = "tests.orchestration.parity_fns:checkpoint_fn"


def _reports(store: Any, group_id: str) -> list[Any]:
    return [
        e.event
        for e in store.read_stream(stream_id_for_group(group_id))
        if e.type == "WorkerReported"
    ]


def test_ranks_reporting_the_same_checkpoint_are_all_stored(store: Any, executor: Any) -> None:
    group = WorkerGroup.create(
        store, make_context(2, train_fn=FN, config={"same": True}), executor=executor
    )
    status = group.wait(timeout_s=60)
    assert status.return_values == {0: {"refused": None}, 1: {"refused": None}}
    assert sorted((r.world_rank, r.checkpoint) for r in _reports(store, group.group_id)) == [
        (0, "memory://ckpt/0"),
        (1, "memory://ckpt/0"),
    ]
    assert group.shutdown(reason="done").latest_checkpoint == "memory://ckpt/0"
    assert_nothing_left(group.group_id)


def test_a_rank_reporting_another_checkpoint_at_the_same_index_is_refused(
    store: Any, executor: Any
) -> None:
    group = WorkerGroup.create(store, make_context(2, train_fn=FN), executor=executor)
    status = group.wait(timeout_s=60)

    # Whichever rank reports first sets the index's path (rank 0 on a quiet machine, either
    # under load); the other is refused and nothing of it is stored.
    ((first, path),) = [(r.world_rank, r.checkpoint) for r in _reports(store, group.group_id)]
    other = 1 - first
    assert path == f"memory://ckpt/rank{first}"
    assert status.return_values[first] == {"refused": None}
    refusal = status.return_values[other]["refused"]
    assert refusal is not None
    assert f"report 0 of rank {other} carries checkpoint 'memory://ckpt/rank{other}'" in refusal
    assert f"rank {first} reported 'memory://ckpt/rank{first}'" in refusal
    assert "was not stored" in refusal
    group.shutdown(reason="done")
    assert_nothing_left(group.group_id)
