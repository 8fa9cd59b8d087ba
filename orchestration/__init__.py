"""Worker groups on Ray, every step an event: ``WorkerGroup.create()`` -> ``ActiveWorkerGroup``.

The executor (:class:`RayExecutor`) derives commands from the log, carries them out on Ray and
appends what happened. Inside a train function: :func:`get_context` and :func:`report`.

Every name loads on first use (PEP 562), so a Ray worker process imports only what it needs
(``get_context``/``report`` and the worker class) and the pure modules import without Ray.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from wgstore._lazy import lazy_getattr

if TYPE_CHECKING:
    from wgstore.events.run import FailureConfig, ScalingConfig
    from wgstore.events.worker_group import WorkerGroupContext
    from wgstore.orchestration.builder import WorkerGroupStateBuilder
    from wgstore.orchestration.callbacks import WorkerGroupCallback
    from wgstore.orchestration.commands import (
        Command,
        ReleaseResources,
        ShutdownWorkerGroup,
        StartWorkerGroup,
        derive_commands,
    )
    from wgstore.orchestration.controller import RunController
    from wgstore.orchestration.errors import (
        OrchestrationError,
        ReportNotStoredError,
        TrainFnError,
        WorkerGroupStartError,
        WorkerGroupTimeoutError,
    )
    from wgstore.orchestration.executor import RayExecutor, run_executor
    from wgstore.orchestration.fake_runtime import FakeRuntime
    from wgstore.orchestration.ray_runtime import RayRuntime
    from wgstore.orchestration.runtime import WorkerGroupRuntime
    from wgstore.orchestration.train_context import (
        TrainContext,
        get_context,
        on_shutdown,
        preemption_notice,
        report,
    )
    from wgstore.orchestration.training import RunResult, resume_run, run_training, start_run
    from wgstore.orchestration.worker_group import ActiveWorkerGroup, WorkerGroup

__all__ = [
    "ActiveWorkerGroup",
    "Command",
    "FailureConfig",
    "FakeRuntime",
    "OrchestrationError",
    "RayExecutor",
    "RayRuntime",
    "ReleaseResources",
    "ReportNotStoredError",
    "RunController",
    "RunResult",
    "ScalingConfig",
    "ShutdownWorkerGroup",
    "StartWorkerGroup",
    "TrainContext",
    "TrainFnError",
    "WorkerGroup",
    "WorkerGroupCallback",
    "WorkerGroupContext",
    "WorkerGroupRuntime",
    "WorkerGroupStartError",
    "WorkerGroupStateBuilder",
    "WorkerGroupTimeoutError",
    "derive_commands",
    "get_context",
    "on_shutdown",
    "preemption_notice",
    "report",
    "resume_run",
    "run_executor",
    "run_training",
    "start_run",
]

_LAZY = {
    "WorkerGroupContext": "wgstore.events.worker_group",
    "FailureConfig": "wgstore.events.run",
    "ScalingConfig": "wgstore.events.run",
    "RunController": "wgstore.orchestration.controller",
    "Command": "wgstore.orchestration.commands",
    "ReleaseResources": "wgstore.orchestration.commands",
    "ShutdownWorkerGroup": "wgstore.orchestration.commands",
    "StartWorkerGroup": "wgstore.orchestration.commands",
    "derive_commands": "wgstore.orchestration.commands",
    "TrainContext": "wgstore.orchestration.train_context",
    "get_context": "wgstore.orchestration.train_context",
    "report": "wgstore.orchestration.train_context",
    "preemption_notice": "wgstore.orchestration.train_context",
    "on_shutdown": "wgstore.orchestration.train_context",
    "OrchestrationError": "wgstore.orchestration.errors",
    "ReportNotStoredError": "wgstore.orchestration.errors",
    "TrainFnError": "wgstore.orchestration.errors",
    "WorkerGroupStartError": "wgstore.orchestration.errors",
    "WorkerGroupTimeoutError": "wgstore.orchestration.errors",
    "ActiveWorkerGroup": "wgstore.orchestration.worker_group",
    "WorkerGroup": "wgstore.orchestration.worker_group",
    "RayExecutor": "wgstore.orchestration.executor",
    "run_executor": "wgstore.orchestration.executor",
    "FakeRuntime": "wgstore.orchestration.fake_runtime",
    "RayRuntime": "wgstore.orchestration.ray_runtime",
    "WorkerGroupRuntime": "wgstore.orchestration.runtime",
    "WorkerGroupStateBuilder": "wgstore.orchestration.builder",
    "WorkerGroupCallback": "wgstore.orchestration.callbacks",
    "RunResult": "wgstore.orchestration.training",
    "run_training": "wgstore.orchestration.training",
    "start_run": "wgstore.orchestration.training",
    "resume_run": "wgstore.orchestration.training",
}


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))


__getattr__ = lazy_getattr(__name__, _LAZY, globals())
