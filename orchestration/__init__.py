"""Worker groups on Ray, every step an event: ``WorkerGroup.create()`` -> ``ActiveWorkerGroup``.

The executor (:class:`RayExecutor`) derives commands from the log, carries them out on Ray and
appends what happened. Inside a train function: :func:`get_context` and :func:`report`.

Names that need Ray load lazily, so ``wgstore.orchestration.commands`` (pure) and the train-side
``get_context``/``report`` import without starting anything.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from wgstore.events.worker_group import WorkerGroupContext
from wgstore.orchestration.commands import (
    Command,
    ReleaseResources,
    ShutdownWorkerGroup,
    StartWorkerGroup,
    derive_commands,
)
from wgstore.orchestration.context import TrainContext, get_context, report
from wgstore.orchestration.errors import (
    OrchestrationError,
    TrainFnError,
    WorkerGroupStartError,
    WorkerGroupTimeoutError,
)

if TYPE_CHECKING:
    from wgstore.orchestration.builder import WorkerGroupStateBuilder
    from wgstore.orchestration.executor import RayExecutor, run_executor
    from wgstore.orchestration.run import RunResult, run_training
    from wgstore.orchestration.worker_group import ActiveWorkerGroup, WorkerGroup

__all__ = [
    "ActiveWorkerGroup",
    "Command",
    "OrchestrationError",
    "RayExecutor",
    "ReleaseResources",
    "RunResult",
    "ShutdownWorkerGroup",
    "StartWorkerGroup",
    "TrainContext",
    "TrainFnError",
    "WorkerGroup",
    "WorkerGroupContext",
    "WorkerGroupStartError",
    "WorkerGroupStateBuilder",
    "WorkerGroupTimeoutError",
    "derive_commands",
    "get_context",
    "report",
    "run_executor",
    "run_training",
]

_LAZY = {
    "ActiveWorkerGroup": "wgstore.orchestration.worker_group",
    "WorkerGroup": "wgstore.orchestration.worker_group",
    "RayExecutor": "wgstore.orchestration.executor",
    "run_executor": "wgstore.orchestration.executor",
    "WorkerGroupStateBuilder": "wgstore.orchestration.builder",
    "RunResult": "wgstore.orchestration.run",
    "run_training": "wgstore.orchestration.run",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'wgstore.orchestration' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value
