"""Events and values as people read them: the text every view of the log shares.

Used by the CLI (tables, ``replay``, ``events``), by :mod:`wgstore.projections.timeline` (the
report page) and open to any caller: nothing here prints.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from enum import Enum
from typing import Any
from uuid import UUID

import msgspec

from wgstore.events import RecordedEvent, UnknownEvent
from wgstore.projections.rows import Row

__all__ = [
    "describe",
    "event_json",
    "format_time",
    "json_default",
    "json_line",
    "metrics_text",
]


def format_time(moment: datetime | None) -> str:
    """A UTC moment as ``2024-05-01 14:30:00.123Z`` (or ``-`` when unknown)."""
    if moment is None:
        return "-"
    if moment.tzinfo is not None:
        moment = moment.astimezone(UTC)
    return moment.strftime("%Y-%m-%d %H:%M:%S.%f")[:-3] + "Z"


def _number(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def metrics_text(metrics: Mapping[str, Any], limit: int = 6) -> str:
    """``acc=0.9 loss=0.1`` for the first ``limit`` metrics by name.

    By name, not as stored: PostgreSQL's ``jsonb`` reorders keys, so both backends read alike.
    """
    items = [f"{key}={_number(value)}" for key, value in sorted(metrics.items())[:limit]]
    if len(metrics) > limit:
        items.append(f"(+{len(metrics) - limit} more)")
    return " ".join(items)


def _resources(resources: Mapping[str, float]) -> str:
    return ",".join(f"{name}={_number(amount)}" for name, amount in resources.items()) or "none"


def _polled(event: Any) -> str:
    parts = []
    for change in event.changes:
        if change.error is not None:
            parts.append(f"rank {change.world_rank} failed ({change.error})")
        elif change.running:
            parts.append(f"rank {change.world_rank} running")
        else:
            parts.append(f"rank {change.world_rank} finished")
    text = f"poll #{event.poll_seq}: " + ("; ".join(parts) or "no change")
    if event.unchanged_polls:
        text += f" (after {event.unchanged_polls} unchanged polls)"
    return text


def _run_created(event: Any) -> str:
    text = f"run {event.run_id}" + (f" {event.name!r}" if event.name else "")
    if event.scaling_config is not None:
        scaling = event.scaling_config
        text += f": {scaling.num_workers} workers x {_resources(scaling.resources)}"
    budget = event.failure_config.max_failures
    text += f", max_failures {'unlimited' if budget < 0 else budget}"
    if event.context is not None:
        text += f", {event.context.train_fn}"
    else:
        text += ", recorded from Ray Train"
    return text


def describe(event: Any) -> str:
    """A one-line, human summary of an event's fields."""
    if isinstance(event, UnknownEvent):
        raw = msgspec.json.encode(event.data, order="sorted").decode()
        return f"(type not registered in this process) {raw}"
    name = type(event).__name__
    if name == "WorkerGroupStartRequested":
        ctx = event.context
        return (
            f"group {event.group_id}, run {event.run_id}, attempt {event.attempt}: "
            f"{ctx.num_workers} workers x {_resources(ctx.resources_per_worker)}, {ctx.train_fn}"
        )
    if name == "PlacementGroupReserved":
        return (
            f"{event.name}: {len(event.bundles)} bundles, {event.strategy}, "
            f"waited {event.wait_s:.2f}s"
        )
    if name == "SyncActorStarted":
        return str(event.name)
    if name == "WorkersStarted":
        nodes = {worker.node_id for worker in event.workers}
        return f"{len(event.workers)} workers on {len(nodes)} node(s)"
    if name == "WorkerGroupStarted":
        return f"started in {event.startup_s:.2f}s"
    if name == "TrainingLaunched":
        return str(event.train_fn)
    if name == "WorkerGroupStartFailed":
        return f"at stage {event.stage}: {event.error}"
    if name == "WorkerGroupPolled":
        return _polled(event)
    if name == "WorkerReported":
        text = f"rank {event.world_rank} report #{event.index}: {metrics_text(event.metrics)}"
        return text + (f" checkpoint {event.checkpoint}" if event.checkpoint else "")
    if name == "WorkerGroupShutdownRequested":
        return f"reason: {event.reason}"
    if name == "WorkerGroupShutDown":
        return f"released in {event.duration_s:.2f}s"
    if name == "ControllerStateChanged":
        text = f"{event.from_state} -> {event.to_state}"
        return text + (f" ({event.reason})" if event.reason else "")
    if name == "RunErrored":
        ranks = ", ".join(str(e.world_rank) for e in event.errors)
        return str(event.error) + (f" (failed ranks {ranks})" if ranks else "")
    if name == "RunCreated":
        return _run_created(event)
    if name == "ControllerStarted":
        text = f"controller {event.controller_id} on {event.host or '?'} pid {event.pid}"
        return text + (" (resumed)" if event.resumed else "")
    if name == "FailureDecisionMade":
        limit = "unlimited" if event.limit < 0 else str(event.limit)
        text = (
            f"{event.decision} after {event.failure_kind} failure {event.failures_so_far} of "
            f"{limit}, group {event.group_id}"
        )
        return text + (f": {event.reason}" if event.reason else "")
    if name == "RunFinished":
        return "finished" + (f" (group {event.group_id})" if event.group_id else "")
    if name == "RunAborted":
        return f"reason: {event.reason}"
    if name == "TrainerRecorded":
        text = f"{event.trainer.rpartition(':')[2]} with {event.train_loop}"
        if event.datasets:
            text += f", datasets {', '.join(sorted(event.datasets))}"
        return text + ("" if event.resumable else f"; not resumable: {event.not_resumable_reason}")
    data = msgspec.to_builtins(event)
    if isinstance(data, dict):
        return " ".join(f"{key}={value}" for key, value in data.items() if value not in ("", None))
    return str(data)


def event_json(record: RecordedEvent) -> dict[str, Any]:
    """One event as a JSON-ready dict (the same fields as the ``wg_events`` row, data decoded).

    An event of a type this process does not know has its payload as stored under ``data``.
    """
    event = record.event
    data = event.data if isinstance(event, UnknownEvent) else msgspec.to_builtins(event)
    return {
        "position": record.position,
        "stream_id": record.stream_id,
        "version": record.version,
        "event_id": str(record.event_id),
        "type": record.type,
        "schema_version": record.schema_version,
        "recorded_at": record.recorded_at.isoformat(),
        "data": data,
        "metadata": dict(record.metadata),
        "hash": record.hash,
    }


def json_default(value: Any) -> Any:
    """Turn the values databases and events hold into JSON: times, ids, bytes, enums, decimals,
    and the views' typed rows (their :meth:`~wgstore.projections.rows.Row.to_json`)."""
    if isinstance(value, Row):
        return value.to_json()
    if isinstance(value, datetime):
        if value.tzinfo is None:
            value = value.replace(tzinfo=UTC)
        return value.isoformat()
    if isinstance(value, date):
        return value.isoformat()
    if isinstance(value, timedelta):
        return value.total_seconds()
    if isinstance(value, UUID):
        return str(value)
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value).hex()
    if isinstance(value, Enum):
        return value.value
    if isinstance(value, Decimal):
        return float(value)
    if isinstance(value, set | frozenset | tuple):
        return list(value)
    try:
        return msgspec.to_builtins(value)
    except TypeError:
        return str(value)


def json_line(value: Any) -> str:
    """One JSON document on one line (sorted keys), for ``--json`` output."""
    return json.dumps(value, default=json_default, sort_keys=True, ensure_ascii=False)
