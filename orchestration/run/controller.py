"""``RunController``: the thin loop around :func:`~wgstore.orchestration.run.decide.decide`.

It takes the run's lease, records itself (``ControllerStarted``), then repeats: read the run
stream and the stream of the run's current worker group, decide, and append the decision in one
atomic append over both streams: the run events with ``expected_version`` = the run's version (a
``ConcurrencyError`` on it means another controller acted first: re-read, decide again, and
usually find nothing to do) and the group events they imply (ids derived from the decision, so
a retry is idempotent). When a step finds nothing to do it waits for the next event on its own
streams, the run's and its groups' (``store.watch_streams``: one follower per store object
wakes each controller only for its streams, so a process driving many runs reads each event
once, not once per run). Reports (``WorkerReported``) do not wake it unless ``on_update`` wants
them: they never change a decision (their checkpoints are read when the group has ended, which
another event says). With nothing to wake it, it re-checks its lease every ``lease_s / 3``, and
wakes at the lease's deadline if the keeper could not renew it.

The lease fences: every append the controller makes carries it (``fence=``), so the database
refuses it once the lease has passed to another holder, however long this process was paused;
a decision that touches the run and a group (a retry's new attempt) is one atomic append over
both streams. A thread renews the lease every ``lease_s / 3`` whatever the loop is doing
(connecting to Ray, say); a controller that lost it stops (:class:`RunLeaseLostError`).

Worker groups are carried out by an executor: by default a :class:`RayExecutor` in this process
scoped to the run (``run_ids={run_id}``), or ``"external"`` when a standalone
``wgstore executor`` serves the store. Ctrl-C (``KeyboardInterrupt``) in :meth:`RunController.run`
aborts the run: ``ControllerStateChanged(→ABORTED)`` and ``RunAborted(reason="interrupted")``,
and the live group is aborted and waited for.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import time
import uuid
from collections.abc import Callable, Collection
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Literal

from wgstore.events import (
    ANY,
    AppendRequest,
    ConcurrencyError,
    DuplicateEventError,
    EventStore,
    Fence,
    FencedError,
    NewEvent,
)
from wgstore.events.leases import Lease, lease_of, take_lease
from wgstore.events.run import (
    ControllerStarted,
    ControllerState,
    ControllerStateChanged,
    RunAborted,
)
from wgstore.events.streams import group_stream, run_stream
from wgstore.events.worker_group import WorkerGroupShutdownRequested
from wgstore.orchestration.errors import (
    RunLeaseHeldError,
    RunLeaseLostError,
    RunNotFoundError,
    WorkerGroupTimeoutError,
)
from wgstore.orchestration.leases.keeper import LeaseKeeper
from wgstore.orchestration.run.decide import Decision, decide, looks_due
from wgstore.projections.run_state import RunState, evolve_run
from wgstore.projections.state import WorkerGroupState, WorkerGroupStatus, evolve

if TYPE_CHECKING:
    from wgstore.events.stream_watch import StreamWatch
    from wgstore.orchestration.executor.ray_executor import RayExecutor
    from wgstore.orchestration.run.cluster_probe import ClusterProbe
    from wgstore.orchestration.run.scaling import ClusterView

__all__ = ["RunController", "abort_events", "read_run"]

log = logging.getLogger("wgstore.controller")


_LIVE = (WorkerGroupStatus.REQUESTED, WorkerGroupStatus.STARTING, WorkerGroupStatus.RUNNING)
_NEVER_DECIDES = frozenset({"WorkerReported"})
"""Event types that never change what :func:`decide` returns: they do not wake the loop."""


def _now() -> datetime:
    return datetime.now(UTC)


def read_run(store: EventStore, run_id: str, state: RunState | None = None) -> RunState:
    """The run's state, folding only what is new after ``state``.

    Raises:
        RunNotFoundError: no stream ``run-<run_id>``.
    """
    start = state.version + 1 if state is not None else 1
    for record in store.read_stream(run_stream(run_id), from_version=start):
        state = evolve_run(state, record)
    if state is None:
        raise RunNotFoundError(
            f"no run {run_id!r} in this store (no stream {run_stream(run_id)}); `wgstore runs` "
            "lists the runs, `wgstore run` starts one"
        )
    return state


def abort_events(run: RunState, reason: str) -> list[NewEvent]:
    """The run events that abort ``run``: the controller moves to ABORTED, then ``RunAborted``."""
    ids = [
        uuid.uuid5(uuid.NAMESPACE_URL, f"{run.stream_id}:{run.version + n}:abort") for n in (1, 2)
    ]
    return [
        NewEvent(
            ControllerStateChanged(
                from_state=run.controller_state,
                to_state=ControllerState.ABORTED,
                reason=reason,
                group_id=run.current_group_id,
            ),
            event_id=ids[0],
        ),
        NewEvent(RunAborted(reason=reason), event_id=ids[1]),
    ]


def _held_error(run_id: str, held: Lease | None) -> RunLeaseHeldError:
    holder = held.holder if held else "another controller"
    until = held.expires_at.isoformat(timespec="seconds") if held else "soon"
    where = ""
    if held is not None and held.process is not None:
        where = f" (pid {held.process.pid} on {held.process.host})"
    return RunLeaseHeldError(
        f"run {run_id} is held by {holder}{where}, whose lease expires at {until}; it is still "
        "working on the run. Wait for it to end, or resume the run after that time if that "
        "process is gone (--wait waits for it)"
    )


class RunController:
    """Drives one run from its log to the end: lease, decide, append, wait.

    Args:
        store: the store holding the run (its stream ``run-<run_id>`` must exist).
        run_id: the run.
        executor: ``None`` runs a :class:`RayExecutor` in this process for this run's groups
            (connecting to Ray: ``RAY_ADDRESS`` or a local instance); a ``RayExecutor`` to use
            (started if it is not); ``"external"`` when another process serves the store.
        lease_s: the lease length (default: the run's ``lease_s``).
        on_update: called with the current group's state whenever it changed.
        extra_sys_path: for the in-process executor (see :class:`RayExecutor`).
        clock: the wall clock (UTC), for tests.
        lease_wait_s: when another holder's lease is live, wait up to this long for it to
            expire (default 0: refuse at once). A holder on this host whose process is gone is
            taken over at once either way.
        take_lease_from: a lease handed over to this controller (a supervisor's).
        probe: how an elastic run's controller looks at the cluster (what fits, nodes going);
            default :class:`~wgstore.orchestration.run.cluster_probe.RayClusterProbe` (this
            process's Ray). A fixed run never looks.
    """

    def __init__(
        self,
        store: EventStore,
        run_id: str,
        *,
        executor: RayExecutor | Literal["external"] | None = None,
        lease_s: float | None = None,
        on_update: Callable[[WorkerGroupState], None] | None = None,
        extra_sys_path: Collection[str] | None = None,
        clock: Callable[[], datetime] = _now,
        lease_wait_s: float = 0.0,
        take_lease_from: Fence | None = None,
        probe: ClusterProbe | None = None,
    ) -> None:
        self.store = store
        self.lease_wait_s = lease_wait_s
        self._handed = take_lease_from
        self.run_id = run_id
        self.controller_id = uuid.uuid4().hex
        self.on_update = on_update
        self._clock = clock
        self._executor_choice = executor
        self._extra_sys_path = extra_sys_path
        self._owned: RayExecutor | None = None
        self._run = read_run(store, run_id)
        self.lease_s = float(lease_s if lease_s is not None else self._run.lease_s)
        self._groups: dict[str, WorkerGroupState] = {}
        self._keeper: LeaseKeeper | None = None
        self._started = False
        self.steps: list[Decision] = []
        """Every non-empty decision this controller appended, in order (for tests and audit)."""
        self._probe = probe
        self._last_size_look: datetime | None = None
        self._last_drain_look: datetime | None = None
        self._wake_at: datetime | None = None  # decide again by then (a deadline, a look)

    # ------------------------------------------------------------------ state

    @property
    def run_state(self) -> RunState:
        """The run as this controller last read it."""
        return self._run

    @property
    def group_state(self) -> WorkerGroupState | None:
        """The current group as this controller last read it (``None`` before its stream)."""
        current = self._run.current_group_id
        return self._groups.get(current) if current else None

    def refresh(self) -> tuple[RunState, WorkerGroupState | None]:
        """Read what is new in the run stream and the current group's stream."""
        self._run = read_run(self.store, self.run_id, self._run)
        current = self._run.current_group_id
        if current is None:
            return self._run, None
        state = self._groups.get(current)
        changed = False
        start = state.version + 1 if state is not None else 1
        for record in self.store.read_stream(group_stream(current), from_version=start):
            state = evolve(state, record)
            changed = True
        if state is not None:
            self._groups[current] = state
            if changed and self.on_update is not None:
                self.on_update(state)
        return self._run, state

    # ------------------------------------------------------------------ lease

    @property
    def fence(self) -> Fence | None:
        """The lease this controller holds, as the fence its appends carry (None before start)."""
        return self._keeper.lease.fence if self._keeper is not None else None

    def _take_lease(self) -> None:
        deadline = time.monotonic() + self.lease_wait_s
        while True:
            lease, held = take_lease(
                self.store, self.run_id, self.controller_id, self.lease_s, take_from=self._handed
            )
            if lease is not None:
                break
            if held is None or time.monotonic() >= deadline:
                raise _held_error(self.run_id, held)
            time.sleep(min(1.0, max(0.05, (held.expires_at - self._clock()).total_seconds())))
        self._keeper = LeaseKeeper(self.store, lease, self.lease_s)

    def _drop_lease(self) -> None:
        keeper, self._keeper = self._keeper, None
        if keeper is not None:
            keeper.stop(release=True)

    def keep_lease(self) -> None:
        """Check that the lease is still this controller's (the keeper thread renews it).

        Raises:
            RunLeaseLostError: another holder took the lease, or it could not be renewed for a
                whole lease (the store was unreachable that long).
        """
        keeper = self._keeper
        if keeper is None:
            return
        if keeper.lost or time.monotonic() > keeper.valid_until:
            raise self._lost()

    def _lost(self, cause: FencedError | None = None) -> RunLeaseLostError:
        holder = cause.now_holder if cause is not None else None
        if holder is None:
            with contextlib.suppress(Exception):
                lease = lease_of(self.store, self.run_id)
                holder = lease.holder if lease is not None else None
        taken = holder is not None and holder != self.controller_id
        return RunLeaseLostError(
            f"controller {self.controller_id} lost the lease of run {self.run_id}"
            + (f" to {holder}" if taken else "")
            + "; it stopped without acting further"
        )

    def _append(self, requests: list[AppendRequest]) -> None:
        """Append ``requests`` atomically, fenced by this controller's lease."""
        try:
            self.store.append_many(requests, fence=self.fence)
        except FencedError as error:
            raise self._lost(error) from error

    def _store_down(self) -> bool:
        try:
            self.store.head()
        except Exception:  # noqa: BLE001 - any failure to read means the store is unreachable
            return True
        return False

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> RunController:
        """Take the lease, record ``ControllerStarted``, start the executor; returns self.

        Raises:
            RunLeaseHeldError: another live controller holds the run.
        """
        if self._started:
            return self
        run = self._run
        if run.ended:
            self._started = True
            return self
        self._take_lease()
        try:
            while True:
                run = self._run = read_run(self.store, self.run_id, self._run)
                if run.ended:
                    break
                started = ControllerStarted(
                    controller_id=self.controller_id,
                    host=socket.gethostname(),
                    pid=os.getpid(),
                    resumed=bool(run.controllers),
                )
                try:
                    self._append([AppendRequest(run.stream_id, [started], run.version)])
                    break
                except ConcurrencyError:
                    continue
            if not self._run.ended:
                self._start_executor()
        except BaseException:
            self._drop_lease()
            raise
        self._started = True
        return self

    def _start_executor(self) -> None:
        choice = self._executor_choice
        if choice == "external":
            return
        if choice is None:
            from wgstore.orchestration.executor.ray_executor import RayExecutor

            resumed = bool(self._run.controllers) or bool(self._run.groups)  # before ours
            self._owned = RayExecutor(
                self.store,
                run_ids={self.run_id},
                from_position=0 if resumed else self.store.head(),
                extra_sys_path=self._extra_sys_path,
            ).start()
        else:
            choice.start()

    def close(self) -> None:
        """Stop the executor this controller started and give up the lease."""
        if self._owned is not None:
            self._owned.stop()
            self._owned = None
        self._drop_lease()

    def __enter__(self) -> RunController:
        return self.start()

    def __exit__(self, *_exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ the loop

    def _look(self, run: RunState, group: WorkerGroupState | None) -> ClusterView | None:
        """Look at the cluster when an elastic run's decision needs it (:func:`looks_due`);
        keeps when to decide again for the next look."""
        now = self._clock()
        looks = looks_due(run, group, now, self._last_size_look, self._last_drain_look)
        self._wake_at = looks.next_at
        if not (looks.size or looks.drain):
            return None
        if self._probe is None:
            from wgstore.orchestration.run.cluster_probe import RayClusterProbe

            self._probe = RayClusterProbe()
        view = self._probe.look(run, group, size=looks.size)
        if looks.size:
            self._last_size_look = now
        if looks.drain:
            self._last_drain_look = now
        return view

    def step(self) -> Decision:
        """Read, decide, append once; returns what was appended (empty: nothing, or another
        controller acted first)."""
        run, group = self.refresh()
        cluster = self._look(run, group)
        decision = decide(run, group, self._clock(), cluster)
        if decision.wake_at is not None:
            self._wake_at = min(filter(None, (self._wake_at, decision.wake_at)))
        if decision.empty:
            return decision
        requests = []
        if decision.run_events:
            requests.append(AppendRequest(run.stream_id, decision.run_events, run.version))
        if decision.group_events and decision.group_id is not None:
            expected = decision.group_expected_version
            requests.append(
                AppendRequest(
                    group_stream(decision.group_id),
                    decision.group_events,
                    ANY if expected is None else expected,
                )
            )
        try:
            # The run's decision and the group events it implies (a retry's start request) are
            # one atomic append: a controller that lost its lease writes neither.
            self._append(requests)
        except ConcurrencyError as error:
            if error.stream_id == run.stream_id:
                log.info(
                    "run %s moved under controller %s: re-reading", run.run_id, self.controller_id
                )
                return Decision()
            self._append_left_half_done(requests)
        except DuplicateEventError:
            self._append_left_half_done(requests)
        self.steps.append(decision)
        return decision

    def _append_left_half_done(self, requests: list[AppendRequest]) -> None:
        """A group stream already holds this decision's events: a controller of a version that
        appended the two streams one after the other died between them. Append the run's part
        (fenced, at its expected version), then the group's as the ids make idempotent."""
        self._append(requests[:1])
        if len(requests) > 1:
            group = requests[1]
            self._append([AppendRequest(group.stream_id, group.events)])

    def run(self, timeout_s: float | None = None) -> RunState:
        """Drive the run until it ends; returns its final state.

        Ctrl-C aborts the run (see :meth:`abort`) and re-raises ``KeyboardInterrupt``.

        Raises:
            RunLeaseHeldError: another live controller holds the run.
            RunLeaseLostError: the lease was lost while working.
            WorkerGroupTimeoutError: the run did not end within ``timeout_s``.
        """
        self.start()
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        watch: StreamWatch | None = None
        try:
            while not self._run.ended:
                self.keep_lease()
                if watch is None:
                    quiet = () if self.on_update is not None else _NEVER_DECIDES
                    watch = self.store.watch_streams([self._run.stream_id], ignore_types=quiet)
                token = watch.position()  # before the step reads: nothing after it is missed
                decision = self.step()
                if self._run.ended or not decision.empty:
                    continue
                current = self._run.current_group_id
                if current is not None:
                    watch.add(group_stream(current))  # wakes at once if it may have moved
                watch.wait(token, self._idle_wait_s(deadline, timeout_s))
            self.refresh()
        except KeyboardInterrupt:
            self.abort("interrupted")
            raise
        finally:
            if watch is not None:
                watch.close()
        return self._run

    def _idle_wait_s(self, deadline: float | None, timeout_s: float | None) -> float:
        """How long a controller with nothing to do waits for its streams: until it should
        re-check its lease (``lease_s / 3``, or the lease's deadline if that is sooner) or the
        caller's deadline."""
        now = time.monotonic()
        wait_s = self.lease_s / 3
        if self._wake_at is not None:  # an elastic run's next look, a preemption's deadline
            wait_s = min(wait_s, (self._wake_at - self._clock()).total_seconds())
        keeper = self._keeper
        if keeper is not None:
            wait_s = min(wait_s, keeper.valid_until - now)
        if deadline is not None:
            remaining = deadline - now
            if remaining <= 0:
                raise WorkerGroupTimeoutError(
                    f"run {self.run_id} did not end within {timeout_s}s (controller "
                    f"state {self._run.controller_state}); it goes on: resume it with "
                    f"`wgstore run --resume {self.run_id}`"
                )
            wait_s = min(wait_s, remaining)
        return max(0.01, wait_s)

    def abort(self, reason: str, *, timeout_s: float = 120.0) -> RunState:
        """End the run as aborted and abort its live group; returns the run's final state."""
        while True:
            run, group = self.refresh()
            if run.ended:
                break
            requests = [AppendRequest(run.stream_id, abort_events(run, reason), run.version)]
            if group is not None and group.status in _LIVE:
                shutdown = WorkerGroupShutdownRequested(reason=reason, abort=True)
                requests.append(AppendRequest(group.stream_id, [shutdown]))
            try:
                self._append(requests)
                break
            except ConcurrencyError:
                continue
        self._run, group = self.refresh()
        if group is not None and group.status in _LIVE and group.shutdown_requested_at is None:
            # The run ended otherwise meanwhile, and its group is still up: abort that too.
            shutdown = WorkerGroupShutdownRequested(reason=reason, abort=True)
            self._append([AppendRequest(group.stream_id, [shutdown])])
        if group is not None:
            try:
                self.wait_group_ended(timeout_s)
            except WorkerGroupTimeoutError:
                log.warning(
                    "run %s aborted; its group %s is not shut down yet (is an executor running?)",
                    self.run_id,
                    group.group_id,
                )
        return self._run

    def wait_group_ended(self, timeout_s: float) -> WorkerGroupState | None:
        """Wait until the current group (if any) is shut down or failed to start."""
        from wgstore.orchestration.worker_group import follow_group

        current = self._run.current_group_id
        if current is None or not self.store.stream_version(group_stream(current)):
            return None
        state = follow_group(
            self.store,
            self._groups.get(current),
            current,
            lambda s: s.status.is_terminal,
            timeout_s=timeout_s,
        )
        self._groups[current] = state
        return state
