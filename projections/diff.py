"""What one event changed in a worker group's state, as readable (field, before, after) text.

``wgstore replay`` prints it under each event; any caller can use it to explain a stream.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from datetime import datetime
from typing import Any

import msgspec

from wgstore.projections.state import WorkerGroupState
from wgstore.projections.text import format_time, metrics_text

__all__ = ["diff_states"]

_SKIP = {"version", "position", "updated_at"}


def _short(value: Any, limit: int = 120) -> str:
    if value is None:
        return "-"
    if isinstance(value, datetime):
        return format_time(value)
    if isinstance(value, str):
        return value
    if isinstance(value, float):
        return f"{value:.4g}"
    if hasattr(value, "value") and isinstance(value.value, str):  # enums
        return str(value.value)
    text = json.dumps(
        msgspec.to_builtins(value, str_keys=True), sort_keys=True, ensure_ascii=False, default=str
    )
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _worker_status(status: Any) -> str:
    if status is None:
        return "-"
    if status.error is not None:
        return f"error ({status.error})"
    return "running" if status.running else "finished"


def _mapping_changes(
    name: str, old: Mapping[Any, Any], new: Mapping[Any, Any]
) -> list[tuple[str, str, str]]:
    changes = []
    for key in sorted(set(old) | set(new), key=str):
        if old.get(key) != new.get(key):
            if name == "latest_metrics":
                changes.append(
                    (
                        f"{name}[{key}]",
                        metrics_text(old.get(key) or {}) or "-",
                        metrics_text(new.get(key) or {}),
                    )
                )
            else:
                changes.append((f"{name}[{key}]", _short(old.get(key)), _short(new.get(key))))
    return changes


def diff_states(old: WorkerGroupState | None, new: WorkerGroupState) -> list[tuple[str, str, str]]:
    """What changed between two states, as (field, before, after) in readable text."""
    if old is None:
        return [
            ("status", "-", new.status.value),
            ("group", "-", new.group_id),
            ("run", "-", f"{new.run_id} (attempt {new.attempt})"),
            ("context", "-", _short(new.context, limit=200)),
        ]
    changes: list[tuple[str, str, str]] = []
    for field in dataclasses.fields(new):
        name = field.name
        if name in _SKIP:
            continue
        before, after = getattr(old, name), getattr(new, name)
        if before == after:
            continue
        if name == "poll_status":
            old_statuses = before.worker_statuses if before else {}
            for rank, status in sorted(after.worker_statuses.items()):
                if old_statuses.get(rank) != status:
                    changes.append(
                        (
                            f"worker[{rank}]",
                            _worker_status(old_statuses.get(rank)),
                            _worker_status(status),
                        )
                    )
        elif name == "workers":
            nodes = {w.node_id for w in after}
            changes.append(
                (
                    "workers",
                    f"{len(before)}",
                    f"{len(after)} on {len(nodes)} node(s): "
                    + ", ".join(f"rank {w.world_rank} pid {w.pid}" for w in after),
                )
            )
        elif isinstance(after, Mapping):
            changes.extend(_mapping_changes(name, before or {}, after))
        else:
            changes.append((name, _short(before), _short(after)))
    return changes
