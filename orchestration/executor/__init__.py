"""The executor: it follows the log, carries each command out on a cluster, appends what happened.

- :mod:`.commands`: the commands derived from the log (pure).
- :mod:`.step`: the executor's decisions as a pure step over the log (no I/O, clock or Ray).
- :mod:`.handlers`: one handler per command, over a
  :class:`~wgstore.orchestration.runtimes.protocol.WorkerGroupRuntime`.
- :mod:`.group_polls` and :mod:`.poll_times`: the running groups, their worker handles and
  polls, and which of them a loop turn has to poll (pure).
- :mod:`.ray_executor`: :class:`RayExecutor`, the loop around them (threads, leases, polls).

Names load on first use, so the pure modules import without Ray.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from wgstore._lazy import lazy_getattr

if TYPE_CHECKING:
    from wgstore.orchestration.executor.ray_executor import RayExecutor, run_executor

__all__ = ["RayExecutor", "run_executor"]

_LAZY = {
    "RayExecutor": "wgstore.orchestration.executor.ray_executor",
    "run_executor": "wgstore.orchestration.executor.ray_executor",
}

__getattr__ = lazy_getattr(__name__, _LAZY, globals())
