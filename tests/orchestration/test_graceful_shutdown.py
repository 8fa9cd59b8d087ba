"""Shutdown gives workers Ray Train's patience and runs their shutdown hooks before killing them.

The hook writes a file, so the test sees it ran in the worker process; the log says per rank
whether the worker ended on its own (``stopped``) or was killed. Each case runs on one backend,
the cases taking turns (``ON_SQLITE`` / ``ON_POSTGRES``: the shutdown's Ray side is the same).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from tests.orchestration.conftest import ON_POSTGRES, ON_SQLITE, assert_nothing_left, make_context
from wgstore.events.worker_group import WorkerEnding, WorkerGroupContext
from wgstore.orchestration import WorkerGroup

pytestmark = [pytest.mark.ray]

FN = "tests.orchestration.parity_fns:hooked_fn"


def _wait_ready(out: Path, n: int) -> None:
    deadline = time.monotonic() + 60
    while len(list(out.glob("*.ready"))) < n:
        assert time.monotonic() < deadline, "workers never registered their hooks"
        time.sleep(0.05)


def _start(store: Any, executor: Any, out: Path, **overrides: Any) -> Any:
    config = {"out_dir": str(out), **overrides.pop("config", {})}
    context = make_context(2, train_fn=FN, config=config, **overrides)
    group = WorkerGroup.create(store, context, executor=executor)
    _wait_ready(out, 2)
    return group


@ON_SQLITE
def test_shutdown_runs_every_worker_s_hook_before_killing_it(
    store: Any, executor: Any, tmp_path: Path
) -> None:
    group = _start(store, executor, tmp_path)
    state = group.shutdown(reason="done")

    for rank in (0, 1):
        assert (tmp_path / f"rank{rank}.bye").read_text() == f"rank {rank} shut down cleanly\n"
    assert [(w.world_rank, w.ending, w.hook_error) for w in state.worker_endings] == [
        (0, WorkerEnding.STOPPED, None),
        (1, WorkerEnding.STOPPED, None),
    ]
    assert_nothing_left(group.group_id)


@ON_POSTGRES
def test_a_hook_slower_than_the_patience_is_killed_and_recorded_as_killed(
    store: Any, executor: Any, tmp_path: Path
) -> None:
    group = _start(store, executor, tmp_path, shutdown_patience_s=0.5, config={"hook_sleep_s": 120})
    began = time.monotonic()
    state = group.shutdown(reason="done")

    # the hook would hold the shutdown for 120 s; half of that leaves room for a loaded machine
    assert time.monotonic() - began < 60, "the shutdown waited for the hook, not the patience"
    assert {w.ending for w in state.worker_endings} == {WorkerEnding.KILLED}
    assert not list(tmp_path.glob("*.bye"))
    events = list(store.read_stream(state.stream_id))
    assert events[-1].event.patience_s == 0.5
    assert_nothing_left(group.group_id)


@ON_SQLITE
def test_a_raising_hook_is_recorded_and_the_group_still_shuts_down(
    store: Any, executor: Any, tmp_path: Path
) -> None:
    group = _start(store, executor, tmp_path, config={"hook_raise": True})
    state = group.shutdown(reason="done")

    assert {w.ending for w in state.worker_endings} == {WorkerEnding.STOPPED}
    errors = [w.hook_error for w in state.worker_endings]
    assert all(e is not None and e.type == "RuntimeError" for e in errors)
    assert "hook of rank 1 failed" in errors[1].message  # type: ignore[union-attr]
    assert "goodbye" in errors[1].traceback  # type: ignore[union-attr]
    assert_nothing_left(group.group_id)


@ON_POSTGRES
def test_zero_patience_kills_at_once_without_running_hooks(
    store: Any, executor: Any, tmp_path: Path
) -> None:
    group = _start(store, executor, tmp_path, shutdown_patience_s=0)
    state = group.shutdown(reason="done")
    assert {w.ending for w in state.worker_endings} == {WorkerEnding.KILLED}
    assert not list(tmp_path.glob("*.bye"))
    assert_nothing_left(group.group_id)


@pytest.mark.parametrize("bad", [-1, "5", True])
def test_a_negative_or_non_numeric_patience_is_refused(bad: Any) -> None:
    with pytest.raises(ValueError, match="shutdown_patience_s must be a number >= 0"):
        WorkerGroupContext(num_workers=1, train_fn="m:f", shutdown_patience_s=bad)
