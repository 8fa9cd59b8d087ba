"""Names of a worker group's Ray resources, derived from its group id. Pure (no Ray).

Placement group ``wgstore-<group_id>``, workers ``wgstore-<group_id>-<bundle index>``, sync actor
``wgstore-<group_id>-sync``, actors in the namespace :data:`NAMESPACE`. Any executor (and the
in-memory :class:`~wgstore.orchestration.runtimes.fake_runtime.FakeRuntime`) finds a group's resources by
these names, so one module makes and parses them.
"""

from __future__ import annotations

import os
import re

__all__ = [
    "NAMESPACE",
    "group_id_of",
    "placement_group_name",
    "sync_actor_name",
    "worker_actor_name",
]

NAMESPACE = os.environ.get("WGSTORE_RAY_NAMESPACE", "wgstore")
"""The Ray namespace of every wgstore actor."""

_PREFIX = "wgstore-"
_NAME = re.compile(r"^wgstore-(?P<group>[A-Za-z0-9_]+)(?:-(?P<part>\d+|sync))?$")


def placement_group_name(group_id: str) -> str:
    """``wgstore-<group_id>``."""
    return f"{_PREFIX}{group_id}"


def worker_actor_name(group_id: str, bundle_index: int) -> str:
    """``wgstore-<group_id>-<bundle index>``."""
    return f"{_PREFIX}{group_id}-{bundle_index}"


def sync_actor_name(group_id: str) -> str:
    """``wgstore-<group_id>-sync``."""
    return f"{_PREFIX}{group_id}-sync"


def group_id_of(name: str) -> str | None:
    """The group id in a wgstore resource name, or None for other names."""
    match = _NAME.match(name)
    return match.group("group") if match else None
