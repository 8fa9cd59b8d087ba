"""Ray Train's objects as wgstore's events, each translation pinned without a Ray cluster.

Written for the survivors of ``make mutate`` (issue 15). Ray's exception classes are the real
ones (they import without a cluster); the controller state, scaling decision and worker are
stand-ins (``SimpleNamespace``) with the attributes the translation reads, since Ray builds the
real ones only inside a running controller.
"""

from __future__ import annotations

import functools
import math
from datetime import UTC, datetime
from types import SimpleNamespace
from typing import Any

import pytest

from wgstore.events.run import RankError
from wgstore.events.worker_group import ErrorInfo, StartStage, WorkerInfo
from wgstore.orchestration.ray_train import translate

exceptions = pytest.importorskip("ray.train.v2.api.exceptions")
internal = pytest.importorskip("ray.train.v2._internal.exceptions")
ray_exceptions = pytest.importorskip("ray.exceptions")


def test_a_time_time_value_is_an_aware_utc_datetime() -> None:
    assert translate.utc(0.0) == datetime(1970, 1, 1, tzinfo=UTC)
    assert translate.utc(1.5).tzinfo is UTC and translate.utc(1.5).microsecond == 500000


class _Scalar:
    def __init__(self, value: Any) -> None:
        self.value = value

    def item(self) -> Any:
        return self.value


class _NotAScalar:
    def item(self) -> Any:
        raise TypeError("only one element tensors can be converted")

    def __str__(self) -> str:
        return "tensor([1, 2])"


def test_json_values_keep_their_type_and_the_rest_becomes_text() -> None:
    assert translate.jsonable(None) is None
    assert translate.jsonable(True) is True
    assert translate.jsonable(7) == 7 and translate.jsonable("s") == "s"
    assert translate.jsonable(2.5) == 2.5
    assert translate.jsonable(math.inf) == "inf"
    assert translate.jsonable({3}) == [3] and translate.jsonable(frozenset({4})) == [4]
    assert translate.jsonable(_NotAScalar()) == "tensor([1, 2])"
    assert translate.jsonable(SimpleNamespace(item=5)) == str(SimpleNamespace(item=5))


def test_nesting_deeper_than_the_depth_becomes_text_at_the_limit() -> None:
    assert translate.jsonable([[1]], depth=1) == ["[1]"]
    assert translate.jsonable({"a": {"b": 1}}, depth=1) == {"a": "{'b': 1}"}
    assert translate.jsonable([[1]], depth=2) == [[1]]
    assert translate.jsonable({"a": {"b": 1}}, depth=2) == {"a": {"b": 1}}
    assert translate.jsonable(1.5, depth=0) == 1.5  # scalars never count against the depth
    assert translate.jsonable(_Scalar([1]), depth=1) == "[1]"  # .item() is one level down
    assert translate.jsonable(_Scalar([1]), depth=2) == [1]


def _nested(levels: int, inner: Any) -> Any:
    for _ in range(levels):
        inner = [inner]
    return inner


def test_by_default_eight_levels_are_kept_and_the_ninth_becomes_text() -> None:
    assert translate.jsonable(_nested(9, 1)) == _nested(8, "[1]")


def _state(name: str, **attrs: Any) -> Any:
    return SimpleNamespace(_state_type=SimpleNamespace(state_name=name), **attrs)


def test_a_controller_state_is_named_as_ray_names_it() -> None:
    assert translate.state_name(_state("RESTARTING")) == "RESTARTING"


def test_the_status_detail_is_what_ray_s_state_actor_shows() -> None:
    decision = SimpleNamespace(num_workers=2, resources_per_worker={"CPU": 1})
    scheduling = _state("SCHEDULING", scaling_decision=decision)
    assert translate.status_detail(scheduling) == (
        "Scheduling 2 workers, each requiring: {'CPU': 1}."
    )
    assert translate.status_detail(_state("SCHEDULING")) == ""
    assert translate.status_detail(_state("SCHEDULING", scaling_decision=object())) == ""
    failed = _state("ERRORED", training_failed_error=RuntimeError("it broke"))
    assert translate.status_detail(failed) == "it broke"
    assert translate.status_detail(_state("RUNNING")) == ""


def test_an_exception_becomes_error_info_with_its_traceback() -> None:
    try:
        raise ValueError("bad value")
    except ValueError as error:
        info = translate.error_info(error)
    assert (info.type, info.message) == ("ValueError", "bad value")
    assert info.traceback is not None and "raise ValueError" in info.traceback


def test_rank_errors_name_every_failed_rank_in_order_or_the_controller() -> None:
    failed = exceptions.WorkerGroupError(
        "two ranks failed", {1: RuntimeError("b"), 0: ValueError("a")}
    )
    errors = translate.rank_errors(failed)
    assert [(e.world_rank, e.error.type, e.error.message) for e in errors] == [
        (0, "ValueError", "a"),
        (1, "RuntimeError", "b"),
    ]
    cause = internal.WorkerGroupStartupFailedError("a worker died")
    (only,) = translate.rank_errors(exceptions.ControllerError(cause))
    assert (only.world_rank, only.error.type) == (-1, "WorkerGroupStartupFailedError")
    (plain,) = translate.rank_errors(KeyError("k"))
    assert isinstance(plain, RankError) and (plain.world_rank, plain.error.type) == (
        -1,
        "KeyError",
    )
    assert translate.rank_errors(None) == ()


def _config(**limits: Any) -> Any:
    return SimpleNamespace(**{"max_failures": 4, "controller_failure_limit": 3, **limits})


def test_failures_are_counted_per_kind_against_ray_s_limits() -> None:
    counts: dict[str, int] = {}
    config = _config(max_preemption_failures=2)
    timeout = exceptions.ControllerError(internal.WorkerGroupStartupTimeoutError(2))
    worker = exceptions.WorkerGroupError("x", {0: RuntimeError("a")})
    preempted = exceptions.WorkerGroupError("x", {0: ray_exceptions.RayActorError(preempted=True)})

    assert translate.failure_accounting(timeout, counts, config) == ("start", 1, 3)
    assert translate.failure_accounting(timeout, counts, config) == ("start", 2, 3)
    assert translate.failure_accounting(worker, counts, config) == ("worker_group", 1, 4)
    assert translate.failure_accounting(preempted, counts, config) == ("preemption", 1, 2)
    assert counts == {"start": 2, "worker_group": 1, "preemption": 1}
    assert translate.failure_accounting(preempted, {}, _config()) == ("preemption", 1, -1)


def test_a_failure_ray_never_retries_counts_as_one_of_zero_and_is_not_added() -> None:
    counts: dict[str, int] = {"start": 1}
    fatal = exceptions.ControllerError(ValueError("cannot import the train function"))

    assert translate.failure_accounting(fatal, counts, _config()) == ("start", 1, 0)
    assert translate.failure_accounting(RuntimeError("?"), counts, _config()) == (
        "worker_group",
        1,
        0,
    )
    assert counts == {"start": 1}


def test_a_start_timeout_stopped_at_the_placement_group_and_any_other_at_the_workers() -> None:
    timeout = internal.WorkerGroupStartupTimeoutError(2)
    failed = internal.WorkerGroupStartupFailedError("a worker died")

    assert translate.start_stage(exceptions.ControllerError(timeout)) is StartStage.PLACEMENT_GROUP
    assert translate.start_stage(timeout) is StartStage.PLACEMENT_GROUP
    assert translate.start_stage(exceptions.ControllerError(failed)) is StartStage.WORKERS


def test_a_ray_worker_becomes_worker_info() -> None:
    worker = SimpleNamespace(
        distributed_context=SimpleNamespace(
            world_rank=3, local_rank=1, node_rank=1, local_world_size=2, world_size=4
        ),
        metadata=SimpleNamespace(node_id="n1", node_ip="10.0.0.2", pid="4242", gpu_ids=[0, "1"]),
        actor=SimpleNamespace(_actor_id=bytes.fromhex("abcd")),
    )

    assert translate.worker_info(worker) == WorkerInfo(
        world_rank=3,
        local_rank=1,
        node_rank=1,
        local_world_size=2,
        world_size=4,
        node_id="n1",
        node_ip="10.0.0.2",
        pid=4242,
        actor_id="abcd",
        actor_name="",
        gpu_ids=("0", "1"),
    )


class CallableTrainer:
    def __call__(self) -> None:
        pass


def test_callables_without_a_module_or_a_qualname_are_named_by_what_they_have() -> None:
    instance = CallableTrainer()  # an instance has a module but no __qualname__: its class's
    assert translate.train_fn_path(instance) == f"{__name__}:CallableTrainer"

    def nameless() -> None:
        pass

    nameless.__module__ = None  # type: ignore[assignment]
    nameless.__qualname__ = "nameless"
    assert translate.train_fn_path(nameless) == "__main__:nameless"
    assert translate.train_fn_path(functools.partial(print)) == "functools:partial"
    anonymous = lambda: None  # noqa: E731 - what the test is about
    assert translate.train_fn_path(anonymous) is anonymous


def test_a_wrapped_closure_is_kept_unwrapped_for_pickling() -> None:
    def make() -> Any:
        def inner() -> None:
            pass

        return inner

    closure = make()

    @functools.wraps(closure)
    def wrapper() -> None:  # what Ray's construct_train_func makes
        closure()

    assert translate.train_fn_path(wrapper) is closure


def test_error_info_of_a_rank_error_is_the_same_as_of_the_exception() -> None:
    error = RuntimeError("same")
    (ranked,) = translate.rank_errors(exceptions.WorkerGroupError("x", {0: error}))
    expected = ErrorInfo.from_exception(error)
    assert (ranked.error.type, ranked.error.message) == (expected.type, expected.message)


def _wrapped_by_ray(error: BaseException) -> Any:
    """``error`` as a Ray Train worker hands it to the controller: Ray's own wrapper, built by
    Ray's code, through a pickle round trip (the user exception's frames are lost on the way,
    which is why Ray keeps the traceback as text)."""
    import pickle

    util = pytest.importorskip("ray.train.v2._internal.util")
    try:
        raise error
    except type(error) as raised:
        wrapped = util.construct_user_exception_with_traceback(raised)
    return pickle.loads(pickle.dumps(wrapped))


def test_a_train_function_error_reads_as_what_the_user_raised_not_rays_wrapper() -> None:
    wrapped = _wrapped_by_ray(RuntimeError("rank 1 fails once"))
    assert isinstance(wrapped, internal.UserExceptionWithTraceback)
    assert str(wrapped).startswith("Traceback (most recent call last)")  # what was stored before
    info = translate.error_info(wrapped)
    assert (info.type, info.message) == ("RuntimeError", "rank 1 fails once")
    assert str(info) == "RuntimeError: rank 1 fails once"
    assert info.traceback == str(wrapped)  # the traceback Ray formatted on the worker, kept
    assert info.ray_text() == str(wrapped)  # Ray's error string is unchanged
    assert "raise error" in info.traceback  # the user's frame, from Ray's text


def test_a_wrapper_without_its_text_keeps_the_user_exceptions_own_traceback() -> None:
    try:
        raise ValueError("no text")
    except ValueError as raised:
        wrapped = internal.UserExceptionWithTraceback(raised, "")
    info = translate.error_info(wrapped)
    assert (info.type, info.message) == ("ValueError", "no text")
    assert 'raise ValueError("no text")' in info.traceback


def test_rank_errors_unwrap_each_ranks_user_exception() -> None:
    failed = exceptions.WorkerGroupError(
        "rank 1 failed", {1: _wrapped_by_ray(RuntimeError("rank 1 fails once"))}
    )
    (ranked,) = translate.rank_errors(failed)
    assert (ranked.world_rank, str(ranked.error)) == (1, "RuntimeError: rank 1 fails once")
    assert "raise error" in ranked.error.traceback


def test_only_rays_wrapper_is_unwrapped() -> None:
    """Another exception that happens to hold a ``_base_exc`` stays itself."""
    other = RuntimeError("outer")
    other._base_exc = ValueError("inner")  # type: ignore[attr-defined]
    assert str(translate.error_info(other)) == "RuntimeError: outer"
