"""``FakeRuntime``: an in-memory cluster for the executor, with scripted workers and faults.

It implements :class:`~wgstore.orchestration.runtimes.protocol.WorkerGroupRuntime` without Ray, so the
executor's logic (commands from the log, restarts, polls, shutdowns, callbacks) is tested in
milliseconds against a real store::

    runtime = FakeRuntime()
    runtime.configure("g1", script=FakeScript(reports=3), faults=FakeFaults(raise_at_poll={1: 2}))
    with RayExecutor(store, runtime=runtime) as executor:
        group = WorkerGroup.create(store, context, group_id="g1", executor=executor)

Time is driven by the test, never slept:

- **Workers advance one step per poll.** A worker's train function "runs" a
  :class:`FakeScript`: at each poll it answers, it makes its next report (appended to the store
  as the real worker does: ``WorkerReported`` with the same event id and metadata) and, once
  every report is made, finishes with ``return_value``. So a script of ``n`` reports finishes
  at its ``n + 1``-th poll, and a test waits for the log, not for the clock.
- **The health-check clock is the fake's own** (:meth:`FakeRuntime.advance`): a hanging
  worker is marked failed once the test advanced it past ``health_check_timeout_s``.
- **Gates** (:meth:`FakeRuntime.gate`) stop a start before a stage until the test opens them,
  e.g. to ask for shutdown while a group is starting.

Faults (:class:`FakeFaults`, per group, or the runtime's default): a start stage that fails,
placement that never becomes ready, a cluster too small, a worker that dies, raises or hangs at
poll ``k``, shutdown hooks that hang; and :meth:`FakeRuntime.lose_node` kills every actor of a
node (a preemption). Resources outlive executors, as on a real cluster, so a second executor on
the same ``FakeRuntime`` re-attaches by name, and the orphan sweep sees what a dead one left.
"""

from __future__ import annotations

import itertools
import threading
import uuid
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING, Any

from wgstore.events.worker_group import ErrorInfo, StartStage
from wgstore.orchestration.errors import (
    InsufficientClusterResourcesError,
    OrchestrationError,
    PlacementGroupTimeoutError,
)
from wgstore.orchestration.polling.health import HealthChecks
from wgstore.orchestration.runtimes.protocol import (
    ReservedPlacementGroup,
    StartedActor,
    StartedWorker,
    TrainSetup,
)
from wgstore.orchestration.runtimes.ranks import ActorMetadata
from wgstore.orchestration.runtimes.resource_names import (
    group_id_of,
    placement_group_name,
    sync_actor_name,
    worker_actor_name,
)
from wgstore.orchestration.train_fn.report_writer import report_event_id
from wgstore.projections.state import WorkerStatus

if TYPE_CHECKING:
    from wgstore.events.worker_group import WorkerGroupContext
    from wgstore.orchestration.train_context import TrainContext

__all__ = [
    "FakeActorDiedError",
    "FakeFaults",
    "FakeRuntime",
    "FakeScript",
    "FakeStartError",
    "Gate",
]


class FakeStartError(OrchestrationError):
    """A start stage failed because a :class:`FakeFaults` said so."""


class FakeActorDiedError(OrchestrationError):
    """A call reached a fake actor that is dead (killed, released, its node lost)."""


@dataclass(frozen=True, slots=True)
class FakeScript:
    """What every worker's train function does: ``reports`` reports, one per poll, then returns.

    Report ``i`` carries metrics ``{"index": i}``; with ``checkpoint`` the last one carries
    ``memory://<group_id>/report<i>`` (the same path on every rank, as Ray Train requires).
    """

    reports: int = 1
    return_value: Any = None
    checkpoint: bool = False


@dataclass(frozen=True, slots=True)
class FakeFaults:
    """Faults of one group. Poll numbers count the polls a worker answered, from 1.

    Attributes:
        fail_stage: the start step that raises :class:`FakeStartError` (``placement_group``
            raises at reservation, ``launch`` when training is armed).
        placement_never_ready: the placement group is created but never ready: the reservation
            raises ``PlacementGroupTimeoutError``, leaving it pending for the release.
        cannot_fit: the cluster can never fit the group (``InsufficientClusterResourcesError``).
        die_at_poll: rank -> the poll at which the worker's actor dies (the poll raises).
        raise_at_poll: rank -> the poll at which its train function raises ``RuntimeError``.
        hang_at_poll: rank -> the poll from which its polls never answer.
        shutdown_hang: ranks whose shutdown hooks never return (they end ``killed``).
    """

    fail_stage: StartStage | None = None
    placement_never_ready: bool = False
    cannot_fit: bool = False
    die_at_poll: Mapping[int, int] = field(default_factory=dict)
    raise_at_poll: Mapping[int, int] = field(default_factory=dict)
    hang_at_poll: Mapping[int, int] = field(default_factory=dict)
    shutdown_hang: frozenset[int] = frozenset()


class Gate:
    """Holds a start before one stage until :meth:`open`; :attr:`reached` is set on arrival."""

    def __init__(self) -> None:
        self.reached = threading.Event()
        self._open = threading.Event()

    def open(self) -> None:
        """Let the start go on."""
        self._open.set()

    def pass_through(self, timeout_s: float) -> None:
        """Arrive (set :attr:`reached`) and wait until the test opens the gate."""
        self.reached.set()
        if not self._open.wait(timeout_s):
            raise FakeStartError(f"the test did not open the gate within {timeout_s}s")


_HANG = object()


class _Actor:
    """A fake actor (worker or sync actor) in the fake cluster."""

    def __init__(self, runtime: FakeRuntime, name: str, group_id: str, node_id: str) -> None:
        self.runtime = runtime
        self.name = name
        self.group_id = group_id
        self.node_id = node_id
        self.actor_id = uuid.uuid4().hex
        self.pid = next(runtime._pids)
        self.alive = True
        self.preempted = False
        """Died with its node (:meth:`FakeRuntime.lose_node`): Ray's ``RayActorError.preempted``."""

    def __repr__(self) -> str:
        return f"<fake actor {self.name} {'alive' if self.alive else 'dead'}>"

    def check_alive(self) -> None:
        if not self.alive:
            raise FakeActorDiedError(f"The actor {self.name} died (fake).")


class _Worker(_Actor):
    """A fake worker: its train function advances one step per answered poll."""

    def __init__(
        self, runtime: FakeRuntime, name: str, group_id: str, node_id: str, rank: int
    ) -> None:
        super().__init__(runtime, name, group_id, node_id)
        self.bundle_index = rank
        self.context: TrainContext | None = None
        self.setup: TrainSetup | None = None
        self.armed = False
        self.started = False
        self.running = False
        self.polls = 0
        self.reports = 0
        self.unmade_reports: deque[Callable[[], object]] = deque()
        """Reports the steps made and no poll has appended yet, in order (the appends happen
        once the poll let go of the runtime's lock: :meth:`FakePoller.poll`)."""
        self._report_lock = threading.Lock()
        self.error: ErrorInfo | None = None
        self.return_value: Any = None

    def answer_poll(self) -> WorkerStatus | object:
        """One poll: the status, ``_HANG``, or raises when the actor is (now) dead."""
        self.check_alive()
        faults = self.runtime.faults_of(self.group_id)
        rank = self.context.world_rank if self.context is not None else self.bundle_index
        self.polls += 1
        if faults.die_at_poll.get(rank) == self.polls:
            self.alive = False
            self.check_alive()
        hang_at = faults.hang_at_poll.get(rank)
        if hang_at is not None and self.polls >= hang_at:
            return _HANG
        if self.armed and not self.started:
            self.started = self.running = True  # a poll starts an armed function (the real one)
        elif self.running:
            self._step(rank, faults)
        return WorkerStatus(
            running=self.running,
            error=self.error,
            return_value=None if self.running else self.return_value,
        )

    def _step(self, rank: int, faults: FakeFaults) -> None:
        script = self.runtime.script_of(self.group_id)
        if faults.raise_at_poll.get(rank) == self.polls:
            self.running = False
            self.error = ErrorInfo(
                type="RuntimeError",
                message=f"rank {rank} raised at poll {self.polls} (fake)",
                traceback="Traceback (most recent call last):\nRuntimeError (fake)\n",
            )
            return
        if self.reports < script.reports:
            self.unmade_reports.append(self._report(self.reports, script))
            self.reports += 1
            return
        self.running = False
        self.return_value = script.return_value

    def append_reports(self) -> None:
        """Append the reports made and not appended yet, in order; one that fails stays first.

        Under this worker's own lock, so two pollers of one group (the old and the new executor
        in a takeover) cannot append its reports out of order, as one real worker never does.
        """
        with self._report_lock:
            while self.unmade_reports:
                self.unmade_reports[0]()
                self.unmade_reports.popleft()

    def _report(self, index: int, script: FakeScript) -> Callable[[], object]:
        """Report ``index`` of this worker: the append that makes it (the worker's own append,
        as the real worker's ``WorkerReported``: same event id and metadata)."""
        from wgstore.events import NewEvent
        from wgstore.events.streams import group_stream
        from wgstore.events.worker_group import WorkerReported

        assert self.setup is not None and self.context is not None
        rank = self.context.world_rank
        last = index == script.reports - 1
        checkpoint = (
            f"memory://{self.group_id}/report{index}" if last and script.checkpoint else None
        )
        event = NewEvent(
            WorkerReported(
                world_rank=rank,
                index=index,
                metrics={"index": index},
                checkpoint=checkpoint,
            ),
            event_id=report_event_id(self.group_id, rank, index),
            metadata={
                **dict(self.setup.report_metadata),
                "actor": self.name,
                "source": "worker",
                "world_rank": rank,
            },
        )
        return partial(self.setup.store.append, group_stream(self.group_id), [event])


class FakePoller:
    """:class:`~wgstore.orchestration.polling.poller.GroupPoller` over fake workers: the same
    :class:`~wgstore.orchestration.polling.health.HealthChecks`, on the fake's clock."""

    def __init__(
        self,
        runtime: FakeRuntime,
        workers: Mapping[int, Any],
        names: Mapping[int, str],
        health_check_timeout_s: float,
        known: Mapping[int, WorkerStatus],
    ) -> None:
        self._runtime = runtime
        self._group_id = next((group_id_of(n) or "" for n in names.values()), "")
        self._workers: dict[int, _Worker | None] = dict(workers)
        missing = [rank for rank, worker in self._workers.items() if worker is None]
        self._health = HealthChecks(
            {rank: names[rank] for rank in self._workers}, health_check_timeout_s, known, missing
        )

    @property
    def finished(self) -> bool:
        """True when no worker is running any more."""
        return self._health.finished

    def poll(self, wait_s: float) -> dict[int, WorkerStatus]:
        """Poll every running worker once (``wait_s`` is not waited: answers are immediate).

        The workers' steps run under the runtime's lock; the reports they made are appended
        after it is let go, before the poll returns (a report is in the log before the poll
        that says its worker went on). Real workers append their reports in their own
        processes, concurrently: a lock held across the appends made every poll and start of
        every group of a runtime wait for one another's database round trips (the fleet
        benchmark made a process's reports one at a time). A worker's reports are appended in
        the order it made them, whichever poller (two executors poll one group during a
        takeover) appends them (:meth:`_Worker.append_reports`). An append that fails fails the
        poll, and the reports not appended are appended by the next poll (same event ids).
        """
        polled: list[_Worker] = []
        with self._runtime._lock:
            for rank in self._health.to_poll():
                worker = self._workers[rank]
                assert worker is not None  # a missing worker is not running
                polled.append(worker)
                try:
                    answer = worker.answer_poll()
                except FakeActorDiedError as error:
                    self._health.died(rank, str(error), preempted=worker.preempted)
                    continue
                if answer is _HANG:
                    self._health.sent(rank, self._runtime.clock)  # never answered
                    continue
                assert isinstance(answer, WorkerStatus)
                self._health.answered(rank, answer)
            self._health.check_timeouts(self._runtime.clock)
            self._runtime._polls[self._group_id] = self._runtime._polls.get(self._group_id, 0) + 1
            answers = self._health.statuses()
        for worker in polled:
            worker.append_reports()
        return answers


class FakeRuntime:
    """An in-memory :class:`~wgstore.orchestration.runtimes.protocol.WorkerGroupRuntime` (module docs).

    Args:
        script: what every group's workers do unless :meth:`configure` says otherwise.
        faults: the faults of every group unless :meth:`configure` says otherwise.
        nodes: how many nodes the workers are spread over (bundle ``i`` on ``fake-node-<i % nodes>``).
        gate_timeout_s: how long a gated start waits for the test before it fails.
    """

    def __init__(
        self,
        *,
        script: FakeScript | None = None,
        faults: FakeFaults | None = None,
        nodes: int = 1,
        gate_timeout_s: float = 30.0,
    ) -> None:
        if nodes < 1:
            raise ValueError(f"nodes must be >= 1, got {nodes}")
        self.default_script = script or FakeScript()
        self.default_faults = faults or FakeFaults()
        self.nodes = nodes
        self.gate_timeout_s = gate_timeout_s
        self.clock = 0.0
        """The health-check clock, in seconds; moved only by :meth:`advance`."""
        self.calls: list[tuple[str, str]] = []
        """Every cluster-changing call, as ``(method, group_id)``, in order."""
        self._lock = threading.RLock()
        self._scripts: dict[str, FakeScript] = {}
        self._faults: dict[str, FakeFaults] = {}
        self._gates: dict[tuple[str, StartStage], Gate] = {}
        self._actors: dict[str, _Actor] = {}
        self._placement_groups: dict[str, str] = {}  # name -> "READY" | "PENDING"
        self._placement_group_ids: dict[str, str] = {}  # id -> name
        self._polls: dict[str, int] = {}
        self._pids = itertools.count(1000)
        self.connected = False

    # ------------------------------------------------------------------ the test's controls

    def configure(
        self, group_id: str, *, script: FakeScript | None = None, faults: FakeFaults | None = None
    ) -> FakeRuntime:
        """Give one group its own script and/or faults; returns self."""
        with self._lock:
            if script is not None:
                self._scripts[group_id] = script
            if faults is not None:
                self._faults[group_id] = faults
        return self

    def script_of(self, group_id: str) -> FakeScript:
        """The script of ``group_id``'s workers."""
        return self._scripts.get(group_id, self.default_script)

    def faults_of(self, group_id: str) -> FakeFaults:
        """The faults of ``group_id``."""
        return self._faults.get(group_id, self.default_faults)

    def gate(self, group_id: str, stage: StartStage) -> Gate:
        """A gate the start of ``group_id`` waits at before ``stage`` (made on first ask)."""
        with self._lock:
            return self._gates.setdefault((group_id, stage), Gate())

    def advance(self, seconds: float) -> None:
        """Move the health-check clock forward."""
        with self._lock:
            self.clock += seconds

    def lose_node(self, node_id: str) -> list[str]:
        """Every actor on ``node_id`` dies (a preempted node); returns their names."""
        with self._lock:
            lost = [a for a in self._actors.values() if a.node_id == node_id and a.alive]
            for actor in lost:
                actor.alive = False
                actor.preempted = True
            return sorted(a.name for a in lost)

    def kill(self, name: str) -> None:
        """The actor ``name`` dies (its process is gone; its name stays until released)."""
        with self._lock:
            self._actors[name].alive = False

    def polls(self, group_id: str) -> int:
        """How many polls the group's pollers made so far."""
        with self._lock:
            return self._polls.get(group_id, 0)

    def workers(self, group_id: str) -> list[_Worker]:
        """The group's live worker actors, by bundle index."""
        with self._lock:
            found = [
                a
                for a in self._actors.values()
                if isinstance(a, _Worker) and a.group_id == group_id
            ]
        return sorted(found, key=lambda w: w.bundle_index)

    # ------------------------------------------------------------------ the runtime

    def _enter(self, method: str, group_id: str, stage: StartStage | None = None) -> None:
        with self._lock:
            self.calls.append((method, group_id))
        if stage is None:
            return
        with self._lock:
            gate = self._gates.get((group_id, stage))
        if gate is not None:
            gate.pass_through(self.gate_timeout_s)
        if self.faults_of(group_id).fail_stage is stage:
            raise FakeStartError(f"the {stage.value} step of group {group_id} failed (fake)")

    def connect(self) -> None:
        """Nothing to connect to."""
        self.connected = True

    def check_can_fit(self, group_id: str, context: WorkerGroupContext) -> None:
        """Raise ``InsufficientClusterResourcesError`` if the group's faults say so."""
        if self.faults_of(group_id).cannot_fit:
            raise InsufficientClusterResourcesError(
                f"the fake cluster cannot fit {context.num_workers} workers "
                f"of {dict(context.resources_per_worker)}"
            )

    def reserve_placement_group(
        self, group_id: str, bundles: Sequence[Mapping[str, float]], strategy: str, timeout_s: float
    ) -> ReservedPlacementGroup:
        """A placement group that is ready at once (unless faults say otherwise)."""
        self._enter("reserve_placement_group", group_id, StartStage.PLACEMENT_GROUP)
        name = placement_group_name(group_id)
        never = self.faults_of(group_id).placement_never_ready
        with self._lock:
            self._placement_groups[name] = "PENDING" if never else "READY"
        if never:
            raise PlacementGroupTimeoutError(
                f"placement group {name} ({len(bundles)} bundles, strategy {strategy}) was not "
                f"ready within {timeout_s}s (fake: it never is)"
            )
        placement_group_id = uuid.uuid4().hex
        with self._lock:
            self._placement_group_ids[placement_group_id] = name
        return ReservedPlacementGroup(handle=name, placement_group_id=placement_group_id, name=name)

    def start_sync_actor(self, group_id: str, *, timeout_s: float) -> StartedActor:
        """A live sync actor on the first node."""
        self._enter("start_sync_actor", group_id, StartStage.SYNC_ACTOR)
        actor = _Actor(self, sync_actor_name(group_id), group_id, "fake-node-0")
        with self._lock:
            self._actors[actor.name] = actor
        return StartedActor(handle=actor, actor_id=actor.actor_id, name=actor.name)

    def start_workers(
        self,
        group_id: str,
        placement_group: ReservedPlacementGroup,
        context: WorkerGroupContext,
        *,
        timeout_s: float,
    ) -> list[StartedWorker]:
        """One fake worker per bundle, spread over the nodes."""
        self._enter("start_workers", group_id, StartStage.WORKERS)
        started = []
        with self._lock:
            for index in range(context.num_workers):
                node = f"fake-node-{index % self.nodes}"
                worker = _Worker(self, worker_actor_name(group_id, index), group_id, node, index)
                self._actors[worker.name] = worker
                meta = ActorMetadata(
                    actor_name=worker.name,
                    actor_id=worker.actor_id,
                    node_id=node,
                    node_ip=f"10.0.0.{index % self.nodes + 1}",
                    pid=worker.pid,
                    hostname=node,
                )
                started.append(StartedWorker(worker, meta))
        return started

    def init_train_contexts(
        self,
        workers: Sequence[Any],
        contexts: Sequence[TrainContext],
        setup: TrainSetup,
        *,
        timeout_s: float,
    ) -> None:
        """Give each worker its context and the store its reports go to."""
        group_id = contexts[0].group_id if contexts else ""
        self._enter("init_train_contexts", group_id, StartStage.INIT_TRAIN_CONTEXT)
        with self._lock:
            for worker, context in zip(workers, contexts, strict=True):
                worker.check_alive()
                worker.context = context
                worker.setup = setup

    def arm_training(self, workers: Sequence[Any], *, timeout_s: float) -> None:
        """Arm every worker's script."""
        group_id = workers[0].group_id if workers else ""
        self._enter("arm_training", group_id, StartStage.LAUNCH)
        with self._lock:
            for worker in workers:
                worker.check_alive()
                worker.armed = True

    def start_training(self, workers: Sequence[Any], *, timeout_s: float) -> None:
        """Start every armed, live worker's script (a dead one is the polls' to see)."""
        group_id = workers[0].group_id if workers else ""
        self._enter("start_training", group_id)
        with self._lock:
            for worker in workers:
                if worker.alive and worker.armed and not worker.started:
                    worker.started = worker.running = True

    def find_workers(self, actor_names: Mapping[int, str]) -> dict[int, Any]:
        """The live workers by rank, found by name."""
        with self._lock:
            found = {rank: self._actors.get(name) for rank, name in actor_names.items()}
        return {rank: a if a is not None and a.alive else None for rank, a in found.items()}

    def poller(
        self,
        workers: Mapping[int, Any],
        actor_names: Mapping[int, str],
        health_check_timeout_s: float,
        known: Mapping[int, WorkerStatus],
    ) -> FakePoller:
        """A :class:`FakePoller` of these workers."""
        return FakePoller(self, workers, actor_names, health_check_timeout_s, known)

    def shutdown_workers(
        self, actor_names: Mapping[int, str], patience_s: float
    ) -> dict[int, tuple[str, ErrorInfo | None]]:
        """``stopped`` for live workers, ``dead`` for dead ones, ``killed`` for hung hooks."""
        result: dict[int, tuple[str, ErrorInfo | None]] = {}
        with self._lock:
            for rank, name in sorted(actor_names.items()):
                actor = self._actors.get(name)
                if patience_s <= 0:
                    result[rank] = ("killed", None)
                elif actor is None or not actor.alive:
                    result[rank] = ("dead", None)
                elif rank in self.faults_of(actor.group_id).shutdown_hang:
                    result[rank] = ("killed", None)
                else:
                    result[rank] = ("stopped", None)
            group_id = next((group_id_of(n) or "" for n in actor_names.values()), "")
            self.calls.append(("shutdown_workers", group_id))
        return result

    def release_group(
        self, group_id: str, *, extra_handles: Iterable[Any] = (), wait_s: float = 15.0
    ) -> tuple[str, ...]:
        """Forget the group's actors (workers, then sync) and placement group; names released."""
        released: list[str] = []
        with self._lock:
            self.calls.append(("release_group", group_id))
            names = [a.name for a in self._actors.values() if a.group_id == group_id]
            names.sort(key=lambda n: (n.endswith("-sync"), len(n), n))  # workers first
            for name in names:
                actor = self._actors.pop(name)
                if actor.alive:  # a dead actor's name is gone from Ray's tables already
                    released.append(f"actor:{name}")
                actor.alive = False
            for handle in extra_handles:
                if isinstance(handle, _Actor):
                    handle.alive = False
            pg = placement_group_name(group_id)
            if self._placement_groups.pop(pg, None) is not None:
                released.append(f"placement_group:{pg}")
        return tuple(released)

    def release_placement_group(self, placement_group_id: str, name: str) -> tuple[str, ...]:
        """Forget the placement group of that id, if the fake still holds it."""
        with self._lock:
            self.calls.append(("release_placement_group", placement_group_id))
            held = self._placement_group_ids.pop(placement_group_id, None)
            if held is None or self._placement_groups.pop(held, None) is None:
                return ()
        return (f"placement_group:{name or held}",)

    def list_group_resources(self) -> dict[str, list[str]]:
        """Every fake actor and placement group still held, by group id."""
        found: dict[str, list[str]] = {}
        with self._lock:
            for actor in self._actors.values():
                if not actor.alive:
                    continue
                found.setdefault(actor.group_id, []).append(f"actor:{actor.name}")
            for name in self._placement_groups:
                found.setdefault(name.removeprefix("wgstore-"), []).append(
                    f"placement_group:{name}"
                )
        return found

    def describe_error(self, error: BaseException) -> ErrorInfo:
        """The error as it was raised (nothing remote to unwrap)."""
        return ErrorInfo.from_exception(error)
