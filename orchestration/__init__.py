"""Worker groups on Ray, every step an event: ``WorkerGroup.create()`` -> ``ActiveWorkerGroup``.

The executor (:class:`RayExecutor`) derives commands from the log, carries them out on Ray and
appends what happened. Inside a train function: :func:`get_context` and :func:`report`.

Rooms, each with one concern: :mod:`.executor` (commands, the pure step, handlers, the loop),
:mod:`.run` (the run controller and its decider, elastic sizing), :mod:`.polling`,
:mod:`.runtimes` (Ray, in memory, and what both share), :mod:`.leases`, :mod:`.orphans` (gc,
resume, supervise), :mod:`.train_fn` and :mod:`.ray_train` (the recorder of Ray Train runs).
The library faces stay here: ``worker_group``, ``builder``, ``callbacks``, ``train_context``.

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
    from wgstore.orchestration.errors import (
        OrchestrationError,
        ReportNotStoredError,
        TrainFnError,
        WorkerGroupStartError,
        WorkerGroupTimeoutError,
    )
    from wgstore.orchestration.executor.commands import (
        Command,
        ReleaseResources,
        ShutdownWorkerGroup,
        StartWorkerGroup,
        derive_commands,
    )
    from wgstore.orchestration.executor.ray_executor import RayExecutor, run_executor
    from wgstore.orchestration.orphans.gc import collect_garbage
    from wgstore.orchestration.orphans.resume import resume_orphan
    from wgstore.orchestration.orphans.supervise import supervise
    from wgstore.orchestration.run.controller import RunController
    from wgstore.orchestration.run.training import RunResult, resume_run, run_training, start_run
    from wgstore.orchestration.runtimes.fake_runtime import FakeRuntime
    from wgstore.orchestration.runtimes.protocol import WorkerGroupRuntime
    from wgstore.orchestration.runtimes.ray_runtime import RayRuntime
    from wgstore.orchestration.train_context import (
        TrainContext,
        get_context,
        on_shutdown,
        preemption_notice,
        report,
    )
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
    "collect_garbage",
    "derive_commands",
    "get_context",
    "on_shutdown",
    "preemption_notice",
    "report",
    "resume_orphan",
    "resume_run",
    "run_executor",
    "run_training",
    "start_run",
    "supervise",
]

_LAZY = {
    "WorkerGroupContext": "wgstore.events.worker_group",
    "FailureConfig": "wgstore.events.run",
    "ScalingConfig": "wgstore.events.run",
    "RunController": "wgstore.orchestration.run.controller",
    "Command": "wgstore.orchestration.executor.commands",
    "ReleaseResources": "wgstore.orchestration.executor.commands",
    "ShutdownWorkerGroup": "wgstore.orchestration.executor.commands",
    "StartWorkerGroup": "wgstore.orchestration.executor.commands",
    "derive_commands": "wgstore.orchestration.executor.commands",
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
    "RayExecutor": "wgstore.orchestration.executor.ray_executor",
    "run_executor": "wgstore.orchestration.executor.ray_executor",
    "FakeRuntime": "wgstore.orchestration.runtimes.fake_runtime",
    "RayRuntime": "wgstore.orchestration.runtimes.ray_runtime",
    "WorkerGroupRuntime": "wgstore.orchestration.runtimes.protocol",
    "WorkerGroupStateBuilder": "wgstore.orchestration.builder",
    "WorkerGroupCallback": "wgstore.orchestration.callbacks",
    "RunResult": "wgstore.orchestration.run.training",
    "run_training": "wgstore.orchestration.run.training",
    "start_run": "wgstore.orchestration.run.training",
    "resume_run": "wgstore.orchestration.run.training",
    "collect_garbage": "wgstore.orchestration.orphans.gc",
    "resume_orphan": "wgstore.orchestration.orphans.resume",
    "supervise": "wgstore.orchestration.orphans.supervise",
}


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))


__getattr__ = lazy_getattr(__name__, _LAZY, globals())
