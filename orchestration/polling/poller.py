"""Polling the workers of one group on Ray, by Ray Train's health-check rules (Ray module).

The rules are :mod:`wgstore.orchestration.polling.health`'s (pure, shared with the in-memory
runtime); a poll task still running is reused by the next poll and keeps its first start time.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

import ray

from wgstore.events.worker_group import ErrorInfo
from wgstore.orchestration.polling.health import HealthChecks
from wgstore.orchestration.polling.recorder import WorkerObservation, WorkerPoll

__all__ = ["GroupPoller", "remote_error_info"]


def remote_error_info(error: BaseException) -> ErrorInfo:
    """An ``ErrorInfo`` naming the original exception of a Ray task error, with its traceback."""
    cause = getattr(error, "cause", None)
    if isinstance(error, ray.exceptions.RayTaskError) and isinstance(cause, BaseException):
        return ErrorInfo(type=type(cause).__name__, message=str(cause), traceback=str(error))
    return ErrorInfo.from_exception(error)


class GroupPoller:
    """Polls every worker of one group; keeps hanging polls and stopped workers across polls.

    The rules are :class:`~wgstore.orchestration.polling.health.HealthChecks`'; this class sends
    the polls and reads their answers on Ray.

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
        missing = [rank for rank, handle in self._workers.items() if handle is None]
        self._health = HealthChecks(
            {rank: names[rank] for rank in self._workers}, health_check_timeout_s, known, missing
        )
        self._ongoing: dict[int, Any] = {}  # rank -> the ref of its outstanding poll

    @property
    def finished(self) -> bool:
        """True when no worker is running any more."""
        return self._health.finished

    def poll(self, wait_s: float) -> dict[int, WorkerObservation]:
        """Poll every running worker; returns each worker's status."""
        for rank in self._health.to_poll():
            self._ongoing[rank] = self._workers[rank].poll_status.remote()
            self._health.sent(rank, time.monotonic())
        refs = list(self._ongoing.values())
        ready: list[Any] = []
        if refs:
            ready, _ = ray.wait(refs, num_returns=len(refs), timeout=wait_s)
        ready_set = set(ready)
        for rank, ref in list(self._ongoing.items()):
            if ref not in ready_set:
                continue
            del self._ongoing[rank]
            try:
                result: WorkerPoll = ray.get(ref)
            except Exception as error:  # noqa: BLE001 - the actor died or the call failed
                info = remote_error_info(error)
                preempted = bool(getattr(error, "preempted", False))  # RayActorError.preempted
                self._health.died(rank, str(info), info.traceback, preempted=preempted)
                continue
            self._health.answered(
                rank,
                WorkerObservation(
                    running=result.running, error=result.error, return_value=result.return_value
                ),
            )
        self._health.check_timeouts(time.monotonic())
        return self._health.statuses()
