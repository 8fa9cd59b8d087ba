"""What a train function sees: :func:`get_context` and :func:`report`. No Ray here.

Kept light (no ``wgstore.events`` import until an error is raised): every Ray worker process
imports it. Each worker actor runs one train function in a thread and holds one :class:`WorkerSession`.
``report()`` queues a numbered report in the session; the executor drains the queue when it polls
the worker and acknowledges what it has stored, so a report is stored exactly once even when the
executor is replaced between a poll and the append (reports are kept until acknowledged).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = ["Report", "TrainContext", "WorkerSession", "get_context", "report"]

MAX_PENDING_REPORTS = 10_000
"""``report()`` blocks while this many reports wait to be polled (backpressure)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class TrainContext:
    """The place of this worker in its group, and the group's train config.

    Ranks are assigned as Ray Train assigns them: workers sorted by node (first seen first) and
    then lowest GPU id; ``world_rank`` is the position, ``local_rank``/``local_world_size`` count
    workers on the same node IP, ``node_rank`` is the index of the node IP.
    """

    group_id: str
    world_rank: int
    local_rank: int
    node_rank: int
    world_size: int
    local_world_size: int
    config: Mapping[str, Any] = field(default_factory=dict)
    resume_checkpoint: str | None = None


@dataclass(frozen=True, slots=True)
class Report:
    """One call of ``report()``: its index on this worker (0, 1, ...), metrics and checkpoint."""

    index: int
    metrics: Mapping[str, Any]
    checkpoint: str | None = None


class WorkerSession:
    """The per-worker state behind :func:`get_context` and :func:`report`."""

    def __init__(self, context: TrainContext) -> None:
        self.context = context
        self._pending: list[Report] = []
        self._next_index = 0
        self._cond = threading.Condition()

    def report(self, metrics: Mapping[str, Any], checkpoint: str | None = None) -> None:
        """Queue a report; blocks while ``MAX_PENDING_REPORTS`` wait to be polled."""
        if not isinstance(metrics, Mapping):
            raise TypeError(f"report() takes a mapping of metrics, got {type(metrics).__name__}")
        if checkpoint is not None and not isinstance(checkpoint, str):
            raise TypeError(
                f"report(checkpoint=...) takes a path string or None, got {type(checkpoint)}"
            )
        try:
            clean = json.loads(json.dumps(dict(metrics), allow_nan=False))
        except (TypeError, ValueError) as error:
            raise TypeError(
                f"report() metrics must be JSON-able (numbers, strings, lists, dicts; no NaN): "
                f"{error}"
            ) from error
        with self._cond:
            while len(self._pending) >= MAX_PENDING_REPORTS:
                self._cond.wait(timeout=1.0)
            self._pending.append(Report(self._next_index, clean, checkpoint))
            self._next_index += 1

    def drain(self, acked_index: int) -> tuple[Report, ...]:
        """Forget reports up to ``acked_index`` (stored already) and return the rest."""
        with self._cond:
            self._pending = [r for r in self._pending if r.index > acked_index]
            self._cond.notify_all()
            return tuple(self._pending)


_session: WorkerSession | None = None
_session_lock = threading.Lock()


def _set_session(session: WorkerSession | None) -> None:
    global _session
    with _session_lock:
        _session = session


def _current_session() -> WorkerSession:
    session = _session
    if session is None:
        from wgstore.orchestration.errors import NotInWorkerError

        raise NotInWorkerError(
            "get_context() and report() only work inside a train function started by wgstore "
            "(WorkerGroup.create(...) or `wgstore run`); call them from the train function"
        )
    return session


def get_context() -> TrainContext:
    """The :class:`TrainContext` of the calling worker.

    Raises:
        NotInWorkerError: called outside a train function run by wgstore.
    """
    return _current_session().context


def report(metrics: Mapping[str, Any], checkpoint: str | None = None) -> None:
    """Report metrics (JSON-able) and optionally a checkpoint path; stored as ``WorkerReported``.

    Raises:
        NotInWorkerError: called outside a train function run by wgstore.
        TypeError: metrics that are not JSON-able, or a checkpoint that is not a string.
    """
    _current_session().report(metrics, checkpoint)
