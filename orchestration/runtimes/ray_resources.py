"""Ray resources of a worker group, named from its group id so any executor can find them.

Names come from :mod:`~wgstore.orchestration.runtimes.resource_names` (re-exported here): placement group
``wgstore-<group_id>``, workers ``wgstore-<group_id>-<bundle index>``, sync actor
``wgstore-<group_id>-sync``; all ``lifetime="detached"``, actors in the namespace
:data:`NAMESPACE`. Lookups use the GCS tables (``ray.util.list_named_actors``,
``ray.util.placement_group_table``), which work without the dashboard.
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import ray
from ray.util.placement_group import PlacementGroup, placement_group, remove_placement_group
from ray.util.scheduling_strategies import (
    NodeAffinitySchedulingStrategy,
    PlacementGroupSchedulingStrategy,
)

from wgstore.orchestration.errors import (
    InsufficientClusterResourcesError,
    PlacementGroupTimeoutError,
)
from wgstore.orchestration.runtimes.actors import SyncActor, WgstoreWorker
from wgstore.orchestration.runtimes.feasibility import insufficient_resources
from wgstore.orchestration.runtimes.ranks import ActorMetadata
from wgstore.orchestration.runtimes.resource_names import (
    _PREFIX,
    NAMESPACE,
    group_id_of,
    placement_group_name,
    sync_actor_name,
    worker_actor_name,
)

__all__ = [
    "NAMESPACE",
    "check_cluster_can_fit",
    "ensure_ray",
    "group_id_of",
    "list_group_resources",
    "placement_group_name",
    "release_group",
    "reserve_placement_group",
    "shutdown_workers",
    "start_sync_actor",
    "start_workers",
    "sync_actor_name",
    "worker_actor_name",
]

# Any: Ray's annotations of remote classes do not follow .options(...).remote(...)
_WorkerActor: Any = ray.remote(WgstoreWorker)
_SyncActor: Any = ray.remote(SyncActor)


def ensure_ray(address: str | None = None, *, log_to_driver: bool = False) -> None:
    """Connect to Ray if not yet connected: ``address``, else ``RAY_ADDRESS``, else a local one.

    ``log_to_driver``: print what this job's actors print (the train function's output, each
    line prefixed by Ray with the worker's rank) on this process's stdout and stderr. Only the
    first connection decides.
    """
    if ray.is_initialized():
        return
    address = address or os.environ.get("RAY_ADDRESS") or None
    if address:
        ray.init(address=address, namespace=NAMESPACE, log_to_driver=log_to_driver)
    else:
        ray.init(namespace=NAMESPACE, include_dashboard=False, log_to_driver=log_to_driver)


def _actor_resources(resources: Mapping[str, float]) -> dict[str, Any]:
    rest = {k: float(v) for k, v in resources.items() if k not in ("CPU", "GPU", "memory")}
    options: dict[str, Any] = {
        "num_cpus": float(resources.get("CPU", 0)),
        "num_gpus": float(resources.get("GPU", 0)),
    }
    if "memory" in resources:
        options["memory"] = resources["memory"]
    if rest:
        options["resources"] = rest
    return options


def _max_cluster_resources() -> dict[str, float] | None:
    try:
        from ray._private.state import state as ray_state

        found = ray_state.get_max_resources_from_cluster_config()
        result = None if found is None else {k: float(v) for k, v in found.items()}
    except Exception:  # noqa: BLE001 - no autoscaler config (a fixed cluster)
        return None
    return result


def check_cluster_can_fit(
    resources_per_worker: Mapping[str, float], num_workers: int, strategy: str
) -> None:
    """Fail at once when the cluster can never fit the group (see :mod:`.feasibility`).

    Raises:
        InsufficientClusterResourcesError: with Ray Train's message naming the resource.
    """
    nodes = [
        dict(node.get("Resources") or {})
        for node in ray.nodes()  # type: ignore[no-untyped-call]
        if node.get("Alive")
    ]
    reason = insufficient_resources(
        resources_per_worker,
        num_workers,
        strategy,
        max_cluster_resources=_max_cluster_resources(),
        nodes=nodes,
    )
    if reason is not None:
        raise InsufficientClusterResourcesError(reason)


def reserve_placement_group(
    group_id: str, bundles: Sequence[Mapping[str, float]], strategy: str, timeout_s: float
) -> PlacementGroup:
    """Create the group's placement group and wait until it is ready.

    Raises:
        PlacementGroupTimeoutError: not ready within ``timeout_s``. The pending placement group
            is left for :func:`release_group` (so the release lists it).
    """
    pg = placement_group(
        [dict(b) for b in bundles],
        strategy=strategy,
        name=placement_group_name(group_id),
        lifetime="detached",
    )
    if not pg.wait(timeout_seconds=timeout_s):
        total: dict[str, float] = {}
        for bundle in bundles:
            for key, amount in bundle.items():
                total[key] = total.get(key, 0.0) + float(amount)
        available = ray.available_resources()  # type: ignore[no-untyped-call]
        raise PlacementGroupTimeoutError(
            f"placement group {placement_group_name(group_id)} ({len(bundles)} bundles, "
            f"{total} in all, strategy {strategy}) was not ready within {timeout_s}s; the "
            f"cluster has {available} available. Ask for fewer workers or "
            "resources, add nodes, or raise placement_timeout_s"
        )
    result: PlacementGroup = pg
    return result


def start_sync_actor(
    group_id: str, *, failpoints: Mapping[str, Any] | None = None, timeout_s: float = 60.0
) -> Any:
    """Start the sync actor on this driver's node and wait until it answers.

    Pinned there (a hard node affinity, as Ray Train's label selector on the node id): with a
    soft one Ray may place it on another node, and that node's loss then fails every rank.
    """
    name = sync_actor_name(group_id)
    actor = _SyncActor.options(
        name=name,
        namespace=NAMESPACE,
        lifetime="detached",
        num_cpus=0,
        max_restarts=0,
        scheduling_strategy=NodeAffinitySchedulingStrategy(
            node_id=ray.get_runtime_context().get_node_id(), soft=False
        ),
    ).remote(name, dict(failpoints or {}))
    ray.get(actor.ping.remote(), timeout=timeout_s)
    return actor


def start_workers(
    group_id: str,
    pg: PlacementGroup,
    num_workers: int,
    resources_per_worker: Mapping[str, float],
    *,
    failpoints: Mapping[str, Any] | None = None,
    timeout_s: float = 60.0,
    runtime_env: Mapping[str, Any] | None = None,
) -> list[tuple[Any, ActorMetadata]]:
    """One worker actor per placement-group bundle; returns (handle, metadata) in bundle order.

    Raises:
        ray.exceptions.RayActorError: a worker died while starting.
        ray.exceptions.GetTimeoutError: workers did not answer within ``timeout_s``.
    """
    options = _actor_resources(resources_per_worker)
    if runtime_env:
        options["runtime_env"] = _uploaded(_json_copy(runtime_env))
    actors = []
    for index in range(num_workers):
        name = worker_actor_name(group_id, index)
        actors.append(
            _WorkerActor.options(
                name=name,
                namespace=NAMESPACE,
                lifetime="detached",
                max_restarts=0,
                max_concurrency=2,
                scheduling_strategy=PlacementGroupSchedulingStrategy(
                    placement_group=pg, placement_group_bundle_index=index
                ),
                **options,
            ).remote(name, index, dict(failpoints or {}))
        )
    metas = ray.get([a.get_metadata.remote() for a in actors], timeout=timeout_s)
    return list(zip(actors, metas, strict=True))


def _json_copy(value: Mapping[str, Any]) -> dict[str, Any]:
    import json

    copied: dict[str, Any] = json.loads(json.dumps(dict(value)))
    return copied


def _uploaded(runtime_env: dict[str, Any]) -> dict[str, Any]:
    """``runtime_env`` with a local ``working_dir`` uploaded to the cluster (a ``gcs://`` URI).

    Ray uploads local directories only for a job's runtime_env (``ray.init``); an actor's must
    name a URI. The executor uploads the directory as ``ray.init`` would; it must see the path.
    """
    working_dir = runtime_env.get("working_dir")
    if not isinstance(working_dir, str) or "://" in working_dir:
        return runtime_env
    if not os.path.isdir(working_dir):
        raise FileNotFoundError(
            f"runtime_env working_dir {working_dir!r} is not a directory on the executor's "
            "machine; give an absolute path the executor can read, or a URI (s3://, gcs://)"
        )
    from ray._private.runtime_env.working_dir import upload_working_dir_if_needed

    uploaded: dict[str, Any] = upload_working_dir_if_needed(
        dict(runtime_env), include_gitignore=True
    )
    return uploaded


def list_group_resources() -> dict[str, list[str]]:
    """Every live wgstore resource in the cluster, by group id: ``actor:<name>``, ``placement_group:<name>``."""
    found: dict[str, list[str]] = {}
    for entry in ray.util.list_named_actors(all_namespaces=True):
        if entry.get("namespace") != NAMESPACE:
            continue
        group = group_id_of(entry["name"])
        if group is not None:
            found.setdefault(group, []).append(f"actor:{entry['name']}")
    for info in ray.util.placement_group_table().values():
        name = info.get("name") or ""
        group = group_id_of(name)
        if group is not None and info.get("state") != "REMOVED" and name == f"{_PREFIX}{group}":
            found.setdefault(group, []).append(f"placement_group:{name}")
    return found


def _live_names(group_id: str) -> list[str]:
    return list_group_resources().get(group_id, [])


def shutdown_workers(
    actor_names: Mapping[int, str], patience_s: float
) -> dict[int, tuple[str, Any]]:
    """Ask every worker to run its shutdown hooks; wait up to ``patience_s`` for them.

    Ray Train 2.60's ``_shutdown_workers``: ``actor.shutdown.remote()`` on every worker, wait up
    to ``patience_s``, then (in :func:`release_group`) every worker is killed. With
    ``patience_s == 0`` nobody is asked and every worker counts as killed.

    Args:
        actor_names: world rank -> the worker's actor name.
        patience_s: seconds to wait for the hooks of all workers together.

    Returns:
        world rank -> (ending, hook error): ``"stopped"`` (hooks done, with the first hook's
        ``ErrorInfo`` or None), ``"killed"`` (still running when the patience ran out) or
        ``"dead"`` (the actor was gone or died meanwhile).
    """
    result: dict[int, tuple[str, Any]] = {}
    refs: dict[Any, int] = {}
    for rank, name in actor_names.items():
        if patience_s <= 0:
            result[rank] = ("killed", None)
            continue
        try:
            handle = ray.get_actor(name, namespace=NAMESPACE)
        except ValueError:
            result[rank] = ("dead", None)
            continue
        refs[handle.shutdown.remote()] = rank
    if refs:
        ready, _ = ray.wait(list(refs), num_returns=len(refs), timeout=patience_s)
        for ref in ready:
            try:
                result[refs[ref]] = ("stopped", ray.get(ref))
            except Exception:  # noqa: BLE001 - the actor died before or while shutting down
                result[refs[ref]] = ("dead", None)
        for rank in refs.values():
            result.setdefault(rank, ("killed", None))
    return dict(sorted(result.items()))


def release_placement_group(placement_group_id: str, name: str) -> tuple[str, ...]:
    """Remove placement group ``placement_group_id`` if it is not removed yet; Ray kills the
    actors in it. Returns ``("placement_group:<name>",)`` if it removed it, else ``()``."""
    from ray._raylet import PlacementGroupID

    info = ray.util.placement_group_table().get(placement_group_id)
    if info is None or info.get("state") == "REMOVED":
        return ()
    try:
        remove_placement_group(PlacementGroup(PlacementGroupID(bytes.fromhex(placement_group_id))))
    except Exception as error:  # noqa: BLE001 - removed concurrently
        print(f"wgstore: removing placement group {name}: {error}", file=sys.stderr)
        return ()
    return (f"placement_group:{name or placement_group_id}",)


def release_group(
    group_id: str, *, extra_actors: Iterable[Any] = (), wait_s: float = 15.0
) -> tuple[str, ...]:
    """Kill the group's actors (workers, then the sync actor), remove its placement group.

    Everything is found by name, so this releases resources no event recorded (an executor that
    died between creating and recording). Waits until the GCS tables show them gone.

    Returns:
        What was released, as ``actor:<name>`` / ``placement_group:<name>``, in release order.
    """
    released: list[str] = []
    names = [
        e["name"]
        for e in ray.util.list_named_actors(all_namespaces=True)
        if e.get("namespace") == NAMESPACE and group_id_of(e["name"]) == group_id
    ]
    names.sort(key=lambda n: (n.endswith("-sync"), len(n), n))  # workers first, then sync
    for name in names:
        try:
            handle = ray.get_actor(name, namespace=NAMESPACE)
        except ValueError:
            continue
        ray.kill(handle, no_restart=True)
        released.append(f"actor:{name}")
    for handle in extra_actors:  # handles whose names are gone already: make sure
        with contextlib.suppress(Exception):  # already dead is fine
            ray.kill(handle, no_restart=True)
    from ray._raylet import PlacementGroupID

    for pg_id, info in ray.util.placement_group_table().items():
        if info.get("name") == placement_group_name(group_id) and info.get("state") != "REMOVED":
            try:
                remove_placement_group(PlacementGroup(PlacementGroupID(bytes.fromhex(pg_id))))
            except Exception as error:  # noqa: BLE001 - removed concurrently
                print(f"wgstore: removing {info.get('name')}: {error}", file=sys.stderr)
                continue
            released.append(f"placement_group:{placement_group_name(group_id)}")
    deadline = time.monotonic() + wait_s
    while _live_names(group_id) and time.monotonic() < deadline:
        time.sleep(0.05)
    return tuple(released)
