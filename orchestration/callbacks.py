"""Hooks for library users: :class:`WorkerGroupCallback`, Ray Train's interface of the same name.

Pass callbacks to :class:`~wgstore.orchestration.executor.ray_executor.RayExecutor` (``callbacks=[...]``); the
executor calls them in Ray Train 2.60's order as it carries out a group's commands:

- start: ``before_worker_group_start(context)`` before the placement group is asked for;
  ``after_worker_group_start(state)`` after ``build()`` (``WorkerGroupStarted``);
  ``after_worker_group_training_start(state)`` once ``TrainingLaunched`` is in the log;
- each poll: ``after_worker_group_poll_status(group_id, poll_status)``;
- shutdown: ``before_worker_group_shutdown(state)`` before the workers' shutdown hooks and the
  kill, ``after_worker_group_shutdown(context)`` after ``WorkerGroupShutDown``; for an
  ``abort()`` ``before_worker_group_abort(context)`` / ``after_worker_group_abort(context)``
  instead, as Ray's ``WorkerGroup.abort()`` does.

A hook that raises is recorded as ``CallbackFailed`` (hook, callback, error with traceback) and
the group goes on as if it had not raised: Ray 2.60 routes a hook error to its failure policy,
wgstore keeps the lifecycle in the log's hands and leaves the decision to the caller. Hooks run
in the executor's threads; the ``state`` they get is the group as the log has it then.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from wgstore.events.worker_group import CallbackFailed, WorkerGroupContext
    from wgstore.projections.state import WorkerGroupPollStatus, WorkerGroupState

__all__ = ["HOOKS", "WorkerGroupCallback", "invoke_callbacks"]

HOOKS = (
    "before_worker_group_start",
    "after_worker_group_start",
    "after_worker_group_training_start",
    "after_worker_group_poll_status",
    "before_worker_group_shutdown",
    "after_worker_group_shutdown",
    "before_worker_group_abort",
    "after_worker_group_abort",
)
"""Every hook, in the order a group's life calls them."""


class WorkerGroupCallback:
    """Subclass and override the hooks you need; each default does nothing."""

    def before_worker_group_start(self, context: WorkerGroupContext) -> None:
        """Before the placement group is asked for."""

    def after_worker_group_start(self, state: WorkerGroupState) -> None:
        """After ``build()``: placement group, sync actor and ranked workers are up."""

    def after_worker_group_training_start(self, state: WorkerGroupState) -> None:
        """After the train function was launched on every worker."""

    def after_worker_group_poll_status(
        self, group_id: str, poll_status: WorkerGroupPollStatus
    ) -> None:
        """After each poll of a running group (recorded or not)."""

    def before_worker_group_shutdown(self, state: WorkerGroupState) -> None:
        """Before the workers are asked to stop and killed (workers may be dead already)."""

    def after_worker_group_shutdown(self, context: WorkerGroupContext) -> None:
        """After every resource of the group was released."""

    def before_worker_group_abort(self, context: WorkerGroupContext) -> None:
        """Before an aborted group's workers are stopped and killed."""

    def after_worker_group_abort(self, context: WorkerGroupContext) -> None:
        """After an aborted group's resources were released."""


def invoke_callbacks(
    callbacks: Sequence[WorkerGroupCallback], hook: str, *args: Any
) -> list[CallbackFailed]:
    """Call ``hook`` on every callback in order; every one runs even if an earlier one raised.

    Returns:
        One ``CallbackFailed`` per hook that raised (empty when none did).
    """
    from wgstore.events.worker_group import CallbackFailed, ErrorInfo

    if hook not in HOOKS:
        raise ValueError(f"unknown hook {hook!r}; the hooks are {', '.join(HOOKS)}")
    failed: list[CallbackFailed] = []
    for callback in callbacks:
        try:
            getattr(callback, hook)(*args)
        except Exception as error:  # noqa: BLE001 - recorded, the group goes on
            failed.append(
                CallbackFailed(
                    hook=hook,
                    callback=f"{type(callback).__module__}.{type(callback).__qualname__}",
                    error=ErrorInfo.from_exception(error),
                )
            )
    return failed
