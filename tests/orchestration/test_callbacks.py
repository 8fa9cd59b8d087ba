"""Executor hooks (``WorkerGroupCallback``) run in Ray Train's order; a raising one is recorded.

The executor on ``FakeRuntime`` (hooks are the executor's logic, not Ray's) and a real store: a
recording callback lists every hook call; a second callback raises in some hooks, and the group
still starts, polls and shuts down, with ``CallbackFailed`` in the log for each raise.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from wgstore.events.worker_group import WorkerGroupContext
from wgstore.orchestration import RayExecutor, WorkerGroup, WorkerGroupCallback
from wgstore.orchestration.callbacks import invoke_callbacks
from wgstore.orchestration.runtimes.fake_runtime import FakeRuntime, FakeScript
from wgstore.projections.state import TrainingOutcome, WorkerGroupStatus


class Recorder(WorkerGroupCallback):
    def __init__(self) -> None:
        self.calls: list[str] = []

    def __getattribute__(self, name: str) -> Any:
        if name.startswith(("before_worker_group", "after_worker_group")):
            calls = object.__getattribute__(self, "calls")
            return lambda *args: calls.append(name)
        return object.__getattribute__(self, name)


class Raiser(WorkerGroupCallback):
    def after_worker_group_start(self, state: Any) -> None:
        raise RuntimeError("hook after start broke")

    def before_worker_group_shutdown(self, state: Any) -> None:
        raise KeyError("hook before shutdown broke")

    def before_worker_group_abort(self, context: Any) -> None:
        raise ValueError("hook before abort broke")


def _context() -> WorkerGroupContext:
    return WorkerGroupContext(
        num_workers=2, train_fn="examples.train:train_fn", poll_interval_s=0.01
    )


@pytest.fixture
def runtime() -> FakeRuntime:
    return FakeRuntime(script=FakeScript(reports=2))


@pytest.fixture
def hooked(store: Any, runtime: FakeRuntime) -> Iterator[tuple[RayExecutor, Recorder]]:
    recorder = Recorder()
    ex = RayExecutor(
        store, runtime=runtime, callbacks=[Raiser(), recorder], read_models_interval_s=None
    ).start()
    yield ex, recorder
    ex.stop()
    assert ex.errors == []


def _without_polls(calls: list[str]) -> list[str]:
    return [c for c in calls if c != "after_worker_group_poll_status"]


def test_hooks_run_in_ray_s_order_and_raising_ones_are_recorded(
    store: Any, runtime: FakeRuntime, hooked: tuple[RayExecutor, Recorder]
) -> None:
    executor, recorder = hooked
    group = WorkerGroup.create(store, _context(), executor=executor)
    status = group.wait(timeout_s=20)
    state = group.shutdown(reason="done")

    assert status.finished and state.status is WorkerGroupStatus.SHUT_DOWN
    assert state.outcome is TrainingOutcome.FINISHED
    assert _without_polls(recorder.calls) == [
        "before_worker_group_start",
        "after_worker_group_start",
        "after_worker_group_training_start",
        "before_worker_group_shutdown",
        "after_worker_group_shutdown",
    ]
    assert "after_worker_group_poll_status" in recorder.calls
    failures = [(f.hook, f.error.type) for f in state.callback_failures]
    assert failures == [
        ("after_worker_group_start", "RuntimeError"),
        ("before_worker_group_shutdown", "KeyError"),
    ]
    assert all(f.callback.endswith("Raiser") for f in state.callback_failures)
    assert "hook after start broke" in state.callback_failures[0].error.traceback
    assert runtime.list_group_resources() == {}


def test_abort_runs_the_abort_hooks_instead_of_the_shutdown_hooks(
    store: Any, runtime: FakeRuntime, hooked: tuple[RayExecutor, Recorder]
) -> None:
    executor, recorder = hooked
    runtime.default_script = FakeScript(reports=10_000)
    group = WorkerGroup.create(store, _context(), executor=executor)
    state = group.abort()

    assert state.status is WorkerGroupStatus.SHUT_DOWN and state.aborted
    assert state.outcome is TrainingOutcome.ABORTED
    assert _without_polls(recorder.calls)[-2:] == [
        "before_worker_group_abort",
        "after_worker_group_abort",
    ]
    assert "before_worker_group_shutdown" not in recorder.calls
    assert [f.hook for f in state.callback_failures] == [
        "after_worker_group_start",
        "before_worker_group_abort",
    ]
    assert runtime.list_group_resources() == {}


def test_an_unknown_hook_name_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown hook 'before_lunch'"):
        invoke_callbacks([WorkerGroupCallback()], "before_lunch")
