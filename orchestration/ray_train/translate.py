"""Ray Train's objects as wgstore's events and values: pure functions, duck-typed on Ray's classes.

Each function reads attributes of an object Ray Train hands to a callback (a controller state, a
worker, a poll status, a training error) and returns wgstore's event fields. Ray's own private
helpers are used where the text must equal what Ray's state actor shows (status details,
framework versions, run settings), so a recorded run reads exactly as Ray describes it.
"""

from __future__ import annotations

import inspect
import logging
import math
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from wgstore.events.run import (
    ControllerState,
    FailureKind,
    RankError,
    ResizeCause,
    ScalingConfig,
)
from wgstore.events.worker_group import ErrorInfo, StartStage, WorkerInfo
from wgstore.orchestration.train_fn.loading import IMPORT_PATH

__all__ = [
    "error_info",
    "failure_accounting",
    "jsonable",
    "preemption_nodes",
    "rank_errors",
    "resize_cause",
    "scaling_config",
    "state_name",
    "status_detail",
    "train_fn_path",
    "utc",
    "worker_info",
]

logger = logging.getLogger("wgstore.ray_train")


def utc(seconds: float) -> datetime:
    """A ``time.time()`` value as an aware UTC datetime."""
    return datetime.fromtimestamp(seconds, tz=UTC)


def jsonable(value: Any, depth: int = 8) -> Any:
    """``value`` as JSON the log can store: numbers, text, lists and string-keyed dicts.

    NumPy-like scalars become Python numbers (``.item()``), non-finite floats their text
    (``"nan"``), tuples lists, and anything else its ``str()``: metrics and return values stay
    readable instead of failing the append.
    """
    if value is None or isinstance(value, bool | int | str):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value)
    if depth <= 0:
        return str(value)
    if isinstance(value, Mapping):
        return {str(key): jsonable(item, depth - 1) for key, item in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [jsonable(item, depth - 1) for item in value]
    item = getattr(value, "item", None)
    if callable(item):
        try:
            return jsonable(item(), depth - 1)
        except Exception:  # noqa: BLE001 - not a scalar after all
            pass
    return str(value)


def state_name(state: Any) -> str:
    """Ray's name of a controller state (``SCHEDULING``, ``RUNNING``...)."""
    return str(state._state_type.state_name)


def error_info(error: BaseException) -> ErrorInfo:
    """An exception as :class:`ErrorInfo` (its traceback when it has one).

    Ray Train hands a train function's exception over wrapped in ``UserExceptionWithTraceback``,
    whose ``str()`` is the whole traceback: it is unwrapped, so the error reads as what the user
    raised (``RuntimeError: rank 1 fails once``), with the traceback Ray formatted on the worker
    (the one that names the user's frames).
    """
    from ray.train.v2._internal.exceptions import UserExceptionWithTraceback

    base = getattr(error, "_base_exc", None)
    if isinstance(error, UserExceptionWithTraceback) and isinstance(base, BaseException):
        info = ErrorInfo.from_exception(base)  # its frames were lost on the way from the worker
        traceback = getattr(error, "_traceback_str", None) or info.traceback
        return ErrorInfo(type=info.type, message=info.message, traceback=str(traceback))
    return ErrorInfo.from_exception(error)


def rank_errors(training_failed_error: Any) -> tuple[RankError, ...]:
    """Every failed rank's error of a Ray ``TrainingFailedError`` (-1: the controller's)."""
    failures = getattr(training_failed_error, "worker_failures", None)
    if isinstance(failures, Mapping):
        return tuple(
            RankError(world_rank=int(rank), error=error_info(error))
            for rank, error in sorted(failures.items())
        )
    cause = getattr(training_failed_error, "controller_failure", None) or training_failed_error
    if cause is None:
        return ()
    return (RankError(world_rank=-1, error=error_info(cause)),)


def status_detail(state: Any) -> str:
    """What Ray's state actor shows as the run's ``status_detail`` for entering ``state``."""
    name = state_name(state)
    if name == "SCHEDULING":
        decision = getattr(state, "scaling_decision", None)
        if decision is not None and hasattr(decision, "num_workers"):
            from ray.train.v2._internal.state.state_manager import (
                _get_scheduling_status_detail,
            )

            return str(
                _get_scheduling_status_detail(decision.num_workers, decision.resources_per_worker)
            )
        return ""
    error = getattr(state, "training_failed_error", None)
    return str(error) if error is not None else ""


def failure_accounting(
    error: Any, counts: dict[str, int], failure_config: Any
) -> tuple[FailureKind, int, int]:
    """``(failure_kind, failures_so_far, limit)`` as Ray 2.60's ``DefaultFailurePolicy`` counts.

    ``counts`` (kind -> failures so far) is updated. A failure Ray never retries (a controller
    error that is not a start failure) is counted as Ray logs it: 1 of a limit of 0.
    """
    from ray.train.v2._internal.execution.failure_handling.default import (
        RETRYABLE_CONTROLLER_ERRORS,
        _is_preemption_failure,
    )
    from ray.train.v2.api.exceptions import ControllerError, WorkerGroupError

    if isinstance(error, ControllerError):
        if not isinstance(error.controller_failure, RETRYABLE_CONTROLLER_ERRORS):
            return FailureKind.START, 1, 0
        kind, limit = FailureKind.START, failure_config.controller_failure_limit
    elif _is_preemption_failure(error):
        kind, limit = FailureKind.PREEMPTION, getattr(failure_config, "max_preemption_failures", -1)
    elif isinstance(error, WorkerGroupError):
        kind, limit = FailureKind.WORKER_GROUP, failure_config.max_failures
    else:
        return FailureKind.WORKER_GROUP, 1, 0
    counts[kind] = counts.get(kind, 0) + 1
    return kind, counts[kind], int(limit)


def start_stage(error: Any) -> StartStage:
    """The start step a Ray start failure stopped at (placement group timeout, else workers)."""
    cause = getattr(error, "controller_failure", error)
    if type(cause).__name__ == "WorkerGroupStartupTimeoutError":
        return StartStage.PLACEMENT_GROUP
    return StartStage.WORKERS


def worker_info(worker: Any) -> WorkerInfo:
    """One Ray Train ``Worker`` (actor, metadata, distributed context) as :class:`WorkerInfo`."""
    context = worker.distributed_context
    metadata = worker.metadata
    return WorkerInfo(
        world_rank=context.world_rank,
        local_rank=context.local_rank,
        node_rank=context.node_rank,
        local_world_size=context.local_world_size,
        world_size=context.world_size,
        node_id=metadata.node_id,
        node_ip=metadata.node_ip,
        pid=int(metadata.pid),
        actor_id=worker.actor._actor_id.hex(),
        actor_name="",
        gpu_ids=tuple(str(gpu) for gpu in metadata.gpu_ids),
    )


def train_fn_path(fn: Any) -> str | Any:
    """How an attempt's train function is recorded: ``module:qualname`` of the user's function.

    Ray wraps the user's function (``functools.wraps``); the wrapper is unwrapped. A function
    with an import path (``examples.train:train_fn``, or ``__main__:train_func`` for a script)
    is recorded by that path, without pickle bytes. A lambda or a closure has none: the callable
    itself is returned, and :class:`WorkerGroupContext` pickles it (as for any callable).
    """
    fn = inspect.unwrap(fn)
    module = getattr(fn, "__module__", None) or "__main__"
    qualname = getattr(fn, "__qualname__", None) or type(fn).__qualname__
    path = f"{module}:{qualname}"
    return path if IMPORT_PATH.match(path) else fn


def scaling_config(scaling: Any) -> ScalingConfig:
    """Ray Train's ``ScalingConfig`` as the run's :class:`~wgstore.events.run.ScalingConfig`:
    an elastic one (``num_workers=(min, max)``) as ``min_workers`` and ``num_workers`` = max."""
    elastic = bool(getattr(scaling, "elasticity_enabled", False))
    return ScalingConfig(
        num_workers=int(scaling.max_workers) if elastic else int(scaling.num_workers),
        resources_per_worker=dict(scaling._resources_per_worker_not_none),
        placement_strategy=str(scaling.placement_strategy),
        min_workers=int(scaling.min_workers) if elastic else None,
        elastic_resize_monitor_interval_s=float(
            getattr(scaling, "elastic_resize_monitor_interval_s", 60.0)
        ),
    )


def resize_cause(
    scheduled_from: ControllerState | None,
    previous_workers: int | None,
    num_workers: int,
    last_failure_kind: str | None,
) -> ResizeCause:
    """Why Ray's scaling policy chose ``num_workers``, from the state the controller scheduled
    from (Ray: INITIALIZING, RESIZING, RESTARTING or RESCHEDULING before SCHEDULING)."""
    if previous_workers is None or scheduled_from in (None, ControllerState.INITIALIZING):
        return ResizeCause.INITIAL
    if scheduled_from is ControllerState.RESIZING:
        return ResizeCause.GREW if num_workers > previous_workers else ResizeCause.SHRANK
    if scheduled_from is ControllerState.RESCHEDULING:
        return ResizeCause.START_RETRY
    if last_failure_kind == FailureKind.PREEMPTION:
        return ResizeCause.PREEMPTION
    return ResizeCause.FAILURE


def preemption_nodes(preemption_info: Any) -> dict[str, tuple[int, ...]]:
    """Ray's ``PreemptionInfo.preempted_node_to_ranks`` as node id -> ranks."""
    nodes = getattr(preemption_info, "preempted_node_to_ranks", None) or {}
    return {str(node): tuple(sorted(int(r) for r in ranks)) for node, ranks in nodes.items()}
