"""Any callable Ray can pickle is a train function: lambdas and closures, restartable from the log.

A module-level function stays its readable import path. Anything else is pickled: the log holds
its qualified name, the bytes and their digest; the real-Ray test starts a lambda and a closure
in executor *processes* that never saw the functions (only the log), the second after the first
was SIGKILLed (on Postgres; the pickle's round trip through the log runs on both backends).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from examples.train import train_fn
from tests.orchestration.conftest import ON_POSTGRES, assert_nothing_left, make_context
from wgstore.events.worker_group import (
    WorkerGroupContext,
    WorkerGroupStartRequested,
    stream_id_for_group,
)
from wgstore.orchestration import TrainFnError, WorkerGroup, get_context
from wgstore.orchestration.train_fn.loading import load_pickled_train_fn


def make_closure(secret: str) -> Callable[[dict[str, Any]], dict[str, Any]]:
    def closure_fn(config: dict[str, Any]) -> dict[str, Any]:
        return {"secret": secret, "rank": get_context().world_rank}

    return closure_fn


def test_a_module_level_function_is_recorded_as_its_import_path() -> None:
    context = WorkerGroupContext(num_workers=1, train_fn=train_fn)
    assert context.train_fn == "examples.train:train_fn"
    assert context.train_fn_pickle is None and context.train_fn_digest is None


@pytest.mark.parametrize(
    ("fn", "name"),
    [
        (lambda config: 1, "<lambda>"),
        (make_closure("s"), "make_closure.<locals>.closure_fn"),
    ],
    ids=["a lambda", "a closure"],
)
def test_a_lambda_or_closure_is_pickled_with_its_name_and_digest(fn: Any, name: str) -> None:
    context = WorkerGroupContext(num_workers=1, train_fn=fn)
    assert context.train_fn == f"{__name__}:{name}"
    assert context.train_fn_pickle and len(context.train_fn_digest or "") == 64
    loaded = load_pickled_train_fn(
        context.train_fn, context.train_fn_pickle, context.train_fn_digest
    )
    assert callable(loaded)


def test_the_pickle_survives_the_log(store: Any) -> None:
    context = WorkerGroupContext(num_workers=1, train_fn=make_closure("kept"))
    store.append(
        "worker-group-x1", [WorkerGroupStartRequested(group_id="x1", run_id="r", context=context)]
    )
    back = next(iter(store.read_stream("worker-group-x1"))).event.context
    assert back == context


def test_changed_bytes_are_refused_before_they_are_loaded() -> None:
    context = WorkerGroupContext(num_workers=1, train_fn=lambda config: 1)
    with pytest.raises(ValueError, match="train_fn_digest does not match"):
        dataclasses.replace(context, train_fn_pickle=context.train_fn_pickle + b"x")  # type: ignore[operator]
    with pytest.raises(TrainFnError, match="does not match its recorded digest"):
        load_pickled_train_fn("f", b"not a pickle", context.train_fn_digest)


def test_a_callable_that_cannot_be_pickled_is_refused_with_how_to_fix_it() -> None:
    import threading

    lock = threading.Lock()
    with pytest.raises(ValueError, match="cannot be pickled"):
        WorkerGroupContext(num_workers=1, train_fn=lambda config: lock)


@pytest.mark.ray
@pytest.mark.slow
@ON_POSTGRES
def test_a_lambda_and_a_closure_start_again_in_a_second_executor_process_from_the_log(
    store: Any, store_url: str, tmp_path: Path, ray_up: None
) -> None:
    from tests.orchestration.test_restart import ExecutorProcess

    first = ExecutorProcess(store_url, tmp_path / "first.log")
    try:
        lam = WorkerGroup.create(
            store,
            make_context(2, train_fn=lambda config: {"double": config["step_sleep_s"] * 2}),
            executor="external",
            timeout_s=120,
        )
        closure = WorkerGroup.create(
            store,
            make_context(2, train_fn=make_closure("from a closure")),
            executor="external",
            timeout_s=120,
        )
        assert lam.wait(timeout_s=60).return_values == {0: {"double": 0.04}, 1: {"double": 0.04}}
        assert closure.wait(timeout_s=60).return_values[1] == {
            "secret": "from a closure",
            "rank": 1,
        }
    finally:
        first.kill()  # SIGKILL: the next executor knows the functions only from the log
    second = ExecutorProcess(store_url, tmp_path / "second.log")
    try:
        for old in (lam, closure):
            recorded = next(iter(store.read_stream(stream_id_for_group(old.group_id)))).event
            again = WorkerGroup.create(
                store,
                recorded.context,
                run_id=old.run_id,
                attempt=2,
                executor="external",
                timeout_s=120,
            )
            status = again.wait(timeout_s=60)
            assert status.errors == {}, second.output()
            assert status.return_values == old.poll_status().return_values
            assert again.state.context.train_fn_digest == recorded.context.train_fn_digest
            again.shutdown(reason="done", timeout_s=60)
            assert_nothing_left(again.group_id)
        lam.shutdown(reason="done", timeout_s=60)
        closure.shutdown(reason="done", timeout_s=60)
    finally:
        second.kill()
