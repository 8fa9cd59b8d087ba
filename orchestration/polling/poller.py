"""Polling the workers of one group with Ray Train's health-check semantics (Ray module).

- A poll task still running is reused by the next poll; it keeps its first start time.
- A poll that raised (the actor died) marks the worker ``running=False`` with
  ``WorkerHealthCheckFailedError``; the worker is not polled again.
- A poll hanging longer than ``health_check_timeout_s`` keeps ``running=True`` but carries
  ``WorkerHealthCheckTimeoutError`` (Ray Train's "marking the worker as dead").
- A worker that reported ``running=False`` is not polled again.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

import ray

from wgstore.events.worker_group import ErrorInfo
from wgstore.orchestration.polling.recorder import (
    PREEMPTED_NOTE,
    WorkerObservation,
    WorkerPoll,
    health_check_failed,
    health_check_timed_out,
)

__all__ = ["GroupPoller", "health_check_failed", "remote_error_info"]


def remote_error_info(error: BaseException) -> ErrorInfo:
    """An ``ErrorInfo`` naming the original exception of a Ray task error, with its traceback."""
    cause = getattr(error, "cause", None)
    if isinstance(error, ray.exceptions.RayTaskError) and isinstance(cause, BaseException):
        return ErrorInfo(type=type(cause).__name__, message=str(cause), traceback=str(error))
    return ErrorInfo.from_exception(error)


class GroupPoller:
    """Polls every worker of one group; keeps hanging polls and stopped workers across polls.

    Args:
        workers: world rank -> actor handle (None for an actor that could not be found).
        names: world rank -> actor name (for messages).
        health_check_timeout_s: how long a poll may hang before the worker is marked failed.
        known: world rank -> the last known observation (as the log has it).
    """

    def __init__(
        self,
        workers: Mapping[int, Any],
        names: Mapping[int, str],
        health_check_timeout_s: float,
        known: Mapping[int, WorkerObservation] | None = None,
    ) -> None:
        self._workers = dict(workers)
        self._names = dict(names)
        self._timeout_s = health_check_timeout_s
        self._last: dict[int, WorkerObservation] = {
            rank: WorkerObservation(running=True) for rank in self._workers
        }
        self._last.update(known or {})
        self._ongoing: dict[int, tuple[float, Any]] = {}
        for rank, handle in self._workers.items():
            if handle is None and self._last[rank].running:
                self._last[rank] = WorkerObservation(
                    running=False,
                    error=health_check_failed(f"Worker actor {self._names[rank]} is gone."),
                )

    @property
    def finished(self) -> bool:
        """True when no worker is running any more."""
        return not any(obs.running for obs in self._last.values())

    def poll(self, wait_s: float) -> dict[int, WorkerObservation]:
        """Poll every running worker; returns each worker's status."""
        for rank, handle in self._workers.items():
            if self._last[rank].running and rank not in self._ongoing and handle is not None:
                self._ongoing[rank] = (
                    time.monotonic(),
                    handle.poll_status.remote(),
                )
        refs = [ref for _, ref in self._ongoing.values()]
        ready: list[Any] = []
        if refs:
            ready, _ = ray.wait(refs, num_returns=len(refs), timeout=wait_s)
        ready_set = set(ready)
        for rank, (started, ref) in list(self._ongoing.items()):
            if ref in ready_set:
                del self._ongoing[rank]
                try:
                    result: WorkerPoll = ray.get(ref)
                except Exception as error:  # noqa: BLE001 - the actor died or the call failed
                    info = remote_error_info(error)
                    detail = f"Worker: {self._names[rank]}\n{info}"
                    if getattr(error, "preempted", False):  # Ray's RayActorError.preempted
                        detail += f"\n{PREEMPTED_NOTE}"
                    self._last[rank] = WorkerObservation(
                        running=False, error=health_check_failed(detail, info.traceback)
                    )
                    continue
                self._last[rank] = WorkerObservation(
                    running=result.running, error=result.error, return_value=result.return_value
                )
            elif time.monotonic() - started > self._timeout_s:
                self._last[rank] = WorkerObservation(
                    running=True, error=health_check_timed_out(self._timeout_s, self._names[rank])
                )
        return dict(self._last)
