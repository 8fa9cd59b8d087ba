"""Ray Train's own run and attempt records, rebuilt from the log of a recorded run. Pure.

Ray Train keeps ``TrainRun`` and ``TrainRunAttempt`` (``ray.train.v2._internal.state.schema``)
in a state actor, in memory: they are gone with the cluster. A run recorded by
``RecordingCallback`` holds everything they say; :func:`ray_train_run` and
:func:`ray_train_run_attempt` give them back as the JSON Ray's state actor would show
(``model_dump(mode="json")``), with Ray's ids and status names, from the run stream and each
attempt's worker-group stream.

Where each field lives in the log:

- ``TrainRun``: ``id``/``name``/``job_id``/``controller_actor_id``/``start_time_ns``/
  ``controller_log_file_path``/``framework_versions``/``run_settings`` in ``RunCreated.ray``;
  ``status`` is :attr:`RunState.status`; ``status_detail`` the ``reason`` of the last
  ``ControllerStateChanged`` into a state Ray tracks (Ray's scheduling text, the error);
  ``end_time_ns`` the ``ray_time_ns`` metadata of the transition into the terminal state.
- ``TrainRunAttempt``: ``attempt_id`` is Ray's ``run_attempt_id`` (the metadata
  ``ray_attempt_id`` of ``WorkerGroupStartRequested``; the group id in logs from before it);
  Ray starts a group again under the same attempt id after a failed start, and its state actor
  keeps the last start: :func:`ray_train_run_attempts` keeps the last group of each id;
  ``start_time_ns``/``end_time_ns`` the ``ray_time_ns`` metadata of
  ``WorkerGroupStartRequested``/``WorkerGroupShutdownRequested``; ``status`` from the group's
  fold (PENDING before ``WorkersStarted``, RUNNING, then ABORTED for an abort, ERRORED when the
  last poll had errors, else FINISHED); ``status_detail`` Ray's scheduling text while PENDING,
  the shutdown reason (Ray's grouped error text) when ERRORED; ``resources`` the context's
  ``resources_per_worker`` per worker; ``workers`` from ``WorkersStarted`` (log paths in its
  metadata ``ray_worker_log_file_paths``), ALIVE until the attempt ends, then DEAD.

An attempt whose start failed is ERRORED here with the start's error (Ray's state actor leaves
it PENDING).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from wgstore.events.records import RecordedEvent
from wgstore.events.run import ControllerStateChanged
from wgstore.events.worker_group import (
    WorkerGroupShutdownRequested,
    WorkerGroupStartRequested,
    WorkersStarted,
)
from wgstore.projections.run_state import RunState, project_run
from wgstore.projections.state import WorkerGroupState, project_worker_group

__all__ = [
    "DETAILED_STATES",
    "RAY_SUB_STATES",
    "ray_train_run",
    "ray_train_run_attempt",
    "ray_train_run_attempts",
    "scheduling_detail",
]

RAY_SUB_STATES = frozenset({"RESCHEDULING", "SHUTTING_DOWN", "PREEMPTING"})
"""Controller states Ray's state actor does not show (the run keeps its status and detail)."""

DETAILED_STATES = frozenset({"SCHEDULING", "ERRORED", "ABORTED"})
"""Run states whose status detail Ray's state actor shows (the scheduling text, the error)."""


def scheduling_detail(num_workers: int, resources_per_worker: Mapping[str, float]) -> str:
    """Ray's status detail of a run or attempt waiting for its workers."""
    return f"Scheduling {num_workers} workers, each requiring: {dict(resources_per_worker)}."


def _time_ns(record: RecordedEvent) -> int:
    value = record.metadata.get("ray_time_ns")
    if isinstance(value, int):
        return value
    return int(record.recorded_at.timestamp() * 1_000_000_000)


def ray_train_run(records: Iterable[RecordedEvent]) -> dict[str, Any]:
    """Ray's ``TrainRun`` of a recorded run, from the events of its ``run-<id>`` stream."""
    records = list(records)
    state: RunState = project_run(records)
    ray = dict(state.ray)
    detail: str | None = None
    end_time_ns: int | None = None
    for record in records:
        event = record.event
        if isinstance(event, ControllerStateChanged) and event.to_state not in RAY_SUB_STATES:
            detail = (event.reason or None) if event.to_state in DETAILED_STATES else None
            if event.to_state in ("FINISHED", "ERRORED", "ABORTED"):
                end_time_ns = _time_ns(record)
    if state.status.value == "ABORTED" and state.abort_reason:
        detail = state.abort_reason
    return {
        "id": state.run_id,
        "name": ray.get("name", state.name),
        "job_id": ray.get("job_id"),
        "controller_actor_id": ray.get("controller_actor_id"),
        "status": state.status.value,
        "status_detail": detail,
        "start_time_ns": ray.get("start_time_ns"),
        "end_time_ns": end_time_ns,
        "controller_log_file_path": ray.get("controller_log_file_path"),
        "framework_versions": dict(ray.get("framework_versions") or {}),
        "run_settings": ray.get("run_settings"),
    }


def _attempt_status(state: WorkerGroupState) -> tuple[str, str | None]:
    context = state.context
    if state.start_failure is not None:
        return "ERRORED", str(state.start_failure.error)
    if state.aborted:
        return "ABORTED", state.shutdown_reason
    if state.shutdown_reason is not None:
        poll = state.poll_status
        if poll is not None and poll.errors:
            return "ERRORED", state.shutdown_reason
        return "FINISHED", None
    if state.workers:
        return "RUNNING", None
    return "PENDING", scheduling_detail(context.num_workers, context.resources_per_worker)


def _gpu_id(value: str) -> int | str:
    return int(value) if value.isdigit() else value


def ray_train_run_attempt(records: Sequence[RecordedEvent]) -> dict[str, Any]:
    """Ray's ``TrainRunAttempt`` of one recorded attempt, from its worker-group stream."""
    state = project_worker_group(records)
    status, detail = _attempt_status(state)
    start_ns = end_ns = None
    attempt_id = state.group_id
    log_paths: list[Any] = []
    worker_resources: list[Any] = []
    for record in records:
        event = record.event
        if isinstance(event, WorkerGroupStartRequested):
            start_ns = _time_ns(record)
            attempt_id = str(record.metadata.get("ray_attempt_id") or state.group_id)
        elif isinstance(event, WorkersStarted):
            log_paths = list(record.metadata.get("ray_worker_log_file_paths") or [])
            worker_resources = list(record.metadata.get("ray_worker_resources") or [])
        elif isinstance(event, WorkerGroupShutdownRequested) and end_ns is None:
            end_ns = _time_ns(record)
    if state.start_failure is not None and end_ns is None:
        end_ns = _time_ns(records[-1])
    resources = dict(state.context.resources_per_worker)
    alive = "ALIVE" if status == "RUNNING" else "DEAD"
    workers = [
        {
            "world_rank": worker.world_rank,
            "local_rank": worker.local_rank,
            "node_rank": worker.node_rank,
            "actor_id": worker.actor_id,
            "node_id": worker.node_id,
            "node_ip": worker.node_ip,
            "pid": worker.pid,
            "gpu_ids": [_gpu_id(gpu) for gpu in worker.gpu_ids],
            "status": alive,
            "resources": {
                "resources": worker_resources[i] if i < len(worker_resources) else resources
            },
            "log_file_path": log_paths[i] if i < len(log_paths) else None,
        }
        for i, worker in enumerate(state.workers)
    ]
    return {
        "run_id": state.run_id,
        "attempt_id": attempt_id,
        "status": status,
        "status_detail": detail,
        "start_time_ns": start_ns,
        "end_time_ns": end_ns,
        "resources": [{"resources": resources} for _ in range(state.context.num_workers)],
        "workers": workers,
    }


def ray_train_run_attempts(
    groups: Iterable[Sequence[RecordedEvent]],
) -> dict[str, dict[str, Any]]:
    """Ray's ``TrainRunAttempt`` of every attempt of a run, by Ray's attempt id, from the
    streams of its groups in the run's order: a group started again under the same attempt id
    (a failed start, tried again) replaces the one before, as in Ray's state actor."""
    attempts: dict[str, dict[str, Any]] = {}
    for records in groups:
        attempt = ray_train_run_attempt(records)
        attempts[attempt["attempt_id"]] = attempt  # (in the place of its first start, as Ray's)
    return attempts
