"""``WorkerGroupRuntime``: everything the executor asks of the cluster, as one small interface.

The executor decides from the log (:mod:`~wgstore.orchestration.executor.step`) and appends what
happened (:mod:`~wgstore.orchestration.executor.handlers`); every call that touches the cluster goes
through a runtime. Two implement it: :class:`~wgstore.orchestration.runtimes.ray_runtime.RayRuntime`
(detached, named Ray actors and placement groups) and
:class:`~wgstore.orchestration.runtimes.fake_runtime.FakeRuntime` (in memory, scripted, with faults), so
the executor's logic is tested without a cluster, as Ray Train v2 tests its controller against a
dummy worker group.

Handles (placement groups, actors) are opaque to the executor: it only hands them back. A
runtime finds a group's resources by name (:mod:`~wgstore.orchestration.runtimes.resource_names`), so an
executor that restarts re-attaches with :meth:`WorkerGroupRuntime.find_workers` and the orphan
sweep works from :meth:`WorkerGroupRuntime.list_group_resources`.

Errors: a start step raises whatever went wrong (the handler records it as the failed stage);
``release_group`` and ``shutdown_workers`` do not raise for resources already gone.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:
    from wgstore.events import EventStore
    from wgstore.events.worker_group import ErrorInfo, WorkerGroupContext
    from wgstore.orchestration.runtimes.ranks import ActorMetadata
    from wgstore.orchestration.train_context import TrainContext
    from wgstore.projections.state import WorkerStatus

__all__ = [
    "ReservedPlacementGroup",
    "StartedActor",
    "StartedWorker",
    "TrainSetup",
    "WorkerGroupRuntime",
    "WorkerPoller",
]


@dataclass(frozen=True, slots=True)
class ReservedPlacementGroup:
    """A ready placement group: its handle, id (hex) and name."""

    handle: Any
    placement_group_id: str
    name: str


@dataclass(frozen=True, slots=True)
class StartedActor:
    """A live actor: its handle, id (hex) and name."""

    handle: Any
    actor_id: str
    name: str


@dataclass(frozen=True, slots=True)
class StartedWorker:
    """A live worker actor and where it runs (node, pid, accelerators)."""

    handle: Any
    metadata: ActorMetadata


@dataclass(frozen=True, slots=True)
class TrainSetup:
    """What every worker of a group needs to run its train function and store its reports.

    ``store`` is the executor's own store (a runtime in this process may append through it);
    ``store_url`` is the one workers in other processes open (a SQLite path made absolute).
    """

    context: WorkerGroupContext
    store: EventStore
    store_url: str
    hmac_key: bytes | None
    report_metadata: Mapping[str, Any]
    extra_sys_path: tuple[str, ...]


@runtime_checkable
class WorkerPoller(Protocol):
    """Polls the workers of one running group (Ray Train's health-check semantics)."""

    @property
    def finished(self) -> bool:
        """True when no worker is running any more."""
        ...

    def poll(self, wait_s: float) -> dict[int, WorkerStatus]:
        """Poll every running worker, waiting up to ``wait_s``; each worker's status by rank."""
        ...


@runtime_checkable
class WorkerGroupRuntime(Protocol):
    """What the executor does on a cluster; see the module docstring."""

    def connect(self) -> None:
        """Be ready to serve (connect to the cluster); idempotent."""
        ...

    def check_can_fit(self, group_id: str, context: WorkerGroupContext) -> None:
        """Raise ``InsufficientClusterResourcesError`` if the cluster can never fit the group."""
        ...

    def reserve_placement_group(
        self, group_id: str, bundles: Sequence[Mapping[str, float]], strategy: str, timeout_s: float
    ) -> ReservedPlacementGroup:
        """Reserve the group's placement group; raise ``PlacementGroupTimeoutError`` if not
        ready in time (the pending one is left for :meth:`release_group`)."""
        ...

    def start_sync_actor(self, group_id: str, *, timeout_s: float) -> StartedActor:
        """Start the group's sync actor and wait until it answers."""
        ...

    def start_workers(
        self,
        group_id: str,
        placement_group: ReservedPlacementGroup,
        context: WorkerGroupContext,
        *,
        timeout_s: float,
    ) -> list[StartedWorker]:
        """One worker per bundle, in bundle order, each answered with its metadata."""
        ...

    def init_train_contexts(
        self,
        workers: Sequence[Any],
        contexts: Sequence[TrainContext],
        setup: TrainSetup,
        *,
        timeout_s: float,
    ) -> None:
        """Load the train function on every worker and give each its context (rank order)."""
        ...

    def arm_training(self, workers: Sequence[Any], *, timeout_s: float) -> None:
        """Check every worker can start its train function; run no user code (a failure here
        fails the start at ``launch``)."""
        ...

    def start_training(self, workers: Sequence[Any], *, timeout_s: float) -> None:
        """Start the armed train functions; never raises (a death now is the polls' to see)."""
        ...

    def find_workers(self, actor_names: Mapping[int, str]) -> dict[int, Any]:
        """The live workers by rank, found by name (None for one that is gone)."""
        ...

    def poller(
        self,
        workers: Mapping[int, Any],
        actor_names: Mapping[int, str],
        health_check_timeout_s: float,
        known: Mapping[int, WorkerStatus],
    ) -> WorkerPoller:
        """A poller of these workers that starts from ``known`` (the log's last statuses)."""
        ...

    def shutdown_workers(
        self, actor_names: Mapping[int, str], patience_s: float
    ) -> dict[int, tuple[str, ErrorInfo | None]]:
        """Run every worker's shutdown hooks, waiting up to ``patience_s`` for them all.

        Returns world rank -> (``"stopped"`` with the first hook error, ``"killed"`` or
        ``"dead"``), in rank order.
        """
        ...

    def release_group(
        self, group_id: str, *, extra_handles: Iterable[Any] = (), wait_s: float = 15.0
    ) -> tuple[str, ...]:
        """Kill the group's actors (workers, then sync actor), remove its placement group, all
        found by name; returns ``actor:<name>`` / ``placement_group:<name>`` in release order."""
        ...

    def release_placement_group(self, placement_group_id: str, name: str) -> tuple[str, ...]:
        """Remove the placement group ``placement_group_id`` if it is still there (its actors
        go with it): what a group the log recorded but wgstore did not start holds (a Ray Train
        run whose driver died). Returns ``placement_group:<name>`` if it removed it, else ()."""
        ...

    def list_group_resources(self) -> dict[str, list[str]]:
        """Every live ``wgstore-*`` resource, by group id (for the orphan sweep)."""
        ...

    def describe_error(self, error: BaseException) -> ErrorInfo:
        """The ``ErrorInfo`` a failed start records for ``error`` (for a remote error: the
        original exception's type and message, with its traceback)."""
        ...
