"""Train functions are named by import path; lambdas and closures are refused. No Ray."""

from __future__ import annotations

import pytest

from examples.train import train_fn
from wgstore.orchestration import TrainFnError, get_context, report
from wgstore.orchestration.context import TrainContext, WorkerSession
from wgstore.orchestration.errors import NotInWorkerError
from wgstore.orchestration.loading import import_path_of, resolve_train_fn


def test_a_module_level_function_is_named_by_its_import_path_and_resolves_back() -> None:
    assert import_path_of(train_fn) == "examples.train:train_fn"
    assert resolve_train_fn("examples.train:train_fn") is train_fn


def test_a_lambda_is_refused_with_a_message_that_says_what_to_do() -> None:
    with pytest.raises(TrainFnError, match=r"lambda.*module level"):
        import_path_of(lambda config: None)
    with pytest.raises(TrainFnError, match="lambda"):
        resolve_train_fn("examples.train:lambda_fn")


def test_a_closure_is_refused() -> None:
    def inner(config: dict[str, object]) -> None:
        return None

    with pytest.raises(TrainFnError, match="closure or nested function"):
        import_path_of(inner)


def test_a_missing_module_or_attribute_or_non_function_is_a_train_fn_error() -> None:
    with pytest.raises(TrainFnError, match=r"cannot import module 'examples\.nope'") as caught:
        resolve_train_fn("examples.nope:train_fn")
    assert isinstance(caught.value.__cause__, ModuleNotFoundError)
    with pytest.raises(TrainFnError, match="has no attribute"):
        resolve_train_fn("examples.train:nope")
    with pytest.raises(TrainFnError, match="not a function"):
        resolve_train_fn("examples.train:not_a_function")


def test_get_context_and_report_outside_a_worker_say_where_they_work() -> None:
    with pytest.raises(NotInWorkerError, match="inside a train function"):
        get_context()
    with pytest.raises(NotInWorkerError):
        report({"loss": 1.0})


def test_reports_are_numbered_kept_until_acknowledged_and_must_be_json() -> None:
    session = WorkerSession(
        TrainContext(
            group_id="g", world_rank=0, local_rank=0, node_rank=0, world_size=1, local_world_size=1
        )
    )
    session.report({"loss": 1.0})
    session.report({"loss": 0.5}, checkpoint="/ckpt/1")
    assert [r.index for r in session.drain(-1)] == [0, 1]
    assert [r.index for r in session.drain(-1)] == [0, 1]  # not acknowledged: still there
    assert [r.index for r in session.drain(0)] == [1]
    assert session.drain(1) == ()
    with pytest.raises(TypeError, match="JSON-able"):
        session.report({"loss": object()})
    with pytest.raises(TypeError, match="JSON-able"):
        session.report({"loss": float("nan")})
