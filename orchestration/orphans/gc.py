"""``collect_garbage``: end runs whose controller is gone, and release their Ray resources.

A run is orphaned (:func:`~wgstore.projections.run_state.is_orphaned`) when it has not ended, a
wgstore controller took it, and no controller holds a live lease on it. For each one, gc:

1. takes the run's lease itself, so nothing is released while a live controller holds it (a
   controller that comes back meanwhile is refused, and gc skips a run it cannot take); taking
   it fences the old controller: whatever it appends from then on is refused by the database,
   and gc's own appends carry the new lease;
2. aborts the run's live worker group: ``WorkerGroupShutdownRequested(abort=True)``, carried out
   by the store's executor or, by default, by an executor gc runs in this process scoped to the
   run (it re-attaches by actor name, or releases a start left half-done); gc waits until the
   group is shut down;
3. records ``ControllerStateChanged(→ABORTED)`` + ``RunAborted(reason="controller lost")``;
4. gives the lease up.

A run whose group does not end in time is left as it was (not marked aborted), so running gc
again finishes the job.

A run recorded from Ray Train (its driver died, so Ray ended the controller that recorded it) has
no wgstore executor to shut its group down: gc removes the placement group the log names, if the
cluster still has it (Ray kills the actors in it), and records the group shut down and the run
aborted with the reason :data:`DRIVER_LOST_REASON`, in one fenced append.
"""

from __future__ import annotations

import contextlib
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Literal

from wgstore.events import AppendRequest, ConcurrencyError, EventStore, Fence, FencedError
from wgstore.events.leases import acquire_lease, leases, release_lease
from wgstore.events.streams import RUN_STREAM_PREFIX, group_stream
from wgstore.events.worker_group import WorkerGroupShutDown, WorkerGroupShutdownRequested
from wgstore.orchestration.errors import WorkerGroupTimeoutError
from wgstore.orchestration.run.controller import abort_events, read_run
from wgstore.orchestration.runtimes.protocol import WorkerGroupRuntime
from wgstore.projections.run_state import RunState, is_orphaned
from wgstore.projections.state import WorkerGroupState, WorkerGroupStatus, project_worker_group

if TYPE_CHECKING:
    from wgstore.orchestration.executor.ray_executor import RayExecutor

__all__ = ["DRIVER_LOST_REASON", "GC_REASON", "GcOutcome", "collect_garbage", "orphaned_runs"]

GC_REASON = "controller lost"
"""The ``RunAborted`` reason gc records."""

DRIVER_LOST_REASON = "driver lost"
"""The ``RunAborted`` reason gc records for a Ray Train run whose driver died."""


@dataclass(frozen=True, slots=True, kw_only=True)
class GcOutcome:
    """What gc found and did for one orphaned run.

    ``action``: ``would abort`` (dry run), ``expiring`` (dry run: its lease lapses soon),
    ``aborted``, ``skipped`` (a controller took the run
    back, or it ended meanwhile) or ``not released`` (its group did not shut down in time;
    nothing recorded, run gc again).
    """

    run_id: str
    controller_state: str
    group_id: str | None
    group_status: str | None
    lease_expired_at: datetime | None
    action: str
    released: tuple[str, ...] = ()
    detail: str = ""

    def as_dict(self) -> dict[str, object]:
        """A JSON-able dict (times in ISO form)."""
        return {
            "run_id": self.run_id,
            "controller_state": self.controller_state,
            "group_id": self.group_id,
            "group_status": self.group_status,
            "lease_expired_at": self.lease_expired_at.isoformat()
            if self.lease_expired_at
            else None,
            "action": self.action,
            "released": list(self.released),
            "detail": self.detail,
        }


def _group_of(store: EventStore, run: RunState) -> WorkerGroupState | None:
    current = run.current_group_id
    if current is None or not store.stream_version(group_stream(current)):
        return None
    return project_worker_group(store.read_stream(group_stream(current)))


def orphaned_runs(
    store: EventStore, now: datetime | None = None, *, within_s: float = 0.0
) -> list[tuple[RunState, datetime | None]]:
    """Every orphaned run, with when its lease expired (``None``: it has no lease row).

    With ``within_s``, also the runs whose lease lapses within that many seconds of ``now``
    (their holder stopped renewing, or is about to: a dry run lists them as "expiring").
    """
    now = now or datetime.now(UTC)
    later = now + timedelta(seconds=within_s)
    held = leases(store)
    found: list[tuple[RunState, datetime | None]] = []
    for stream_id, _version in store.streams(RUN_STREAM_PREFIX):
        run_id = stream_id[len(RUN_STREAM_PREFIX) :]
        try:
            run = read_run(store, run_id)
        except Exception:  # noqa: BLE001 - an unreadable run is not ours to end
            continue
        lease = held.get(run_id)
        expires = lease.expires_at if lease is not None else None
        if is_orphaned(run, expires, later):
            found.append((run, expires))
    return found


def _outcome(
    run: RunState,
    group: WorkerGroupState | None,
    expired: datetime | None,
    action: str,
    **more: object,
) -> GcOutcome:
    return GcOutcome(
        run_id=run.run_id,
        controller_state=run.controller_state,
        group_id=run.current_group_id,
        group_status=group.status.value if group is not None else None,
        lease_expired_at=expired,
        action=action,
        **more,  # type: ignore[arg-type]
    )


def _abort_group(
    store: EventStore,
    run: RunState,
    group: WorkerGroupState,
    executor: RayExecutor | Literal["external"] | None,
    timeout_s: float,
    fence: Fence,
) -> WorkerGroupState:
    from wgstore.orchestration.worker_group import follow_group

    if group.status in (
        WorkerGroupStatus.REQUESTED,
        WorkerGroupStatus.STARTING,
        WorkerGroupStatus.RUNNING,
    ):
        shutdown = WorkerGroupShutdownRequested(reason=GC_REASON, abort=True)
        store.append(group.stream_id, [shutdown], fence=fence)
    owned = None
    if executor is None:
        from wgstore.orchestration.executor.ray_executor import RayExecutor

        owned = RayExecutor(store, run_ids={run.run_id}, read_models_interval_s=None).start()
    elif executor != "external":
        executor.start()
    try:
        return follow_group(
            store, None, group.group_id, lambda s: s.status.is_terminal, timeout_s=timeout_s
        )
    finally:
        if owned is not None:
            owned.stop()


def collect_garbage(
    store: EventStore,
    *,
    dry_run: bool = False,
    executor: RayExecutor | Literal["external"] | None = None,
    now: datetime | None = None,
    timeout_s: float = 120.0,
    expiring_s: float = 0.0,
) -> list[GcOutcome]:
    """End every orphaned run and release its Ray resources (see the module docstring).

    Args:
        store: the store.
        dry_run: only say what would be done.
        executor: ``None`` runs an executor in this process for each run with a live group
            (connecting to Ray); a :class:`RayExecutor`; ``"external"`` when a standalone
            ``wgstore executor`` serves the store.
        now: the clock (UTC) that decides which leases expired.
        timeout_s: how long to wait for one run's group to shut down.
        expiring_s: with ``dry_run``, also list runs whose lease lapses within this many
            seconds (action ``expiring``: a driver that stopped renewing, or one about to).
    """
    outcomes: list[GcOutcome] = []
    now = now or datetime.now(UTC)
    for run, expired in orphaned_runs(store, now, within_s=expiring_s if dry_run else 0.0):
        group = _group_of(store, run)
        if dry_run:
            live = expired is not None and expired > now
            outcomes.append(_outcome(run, group, expired, "expiring" if live else "would abort"))
            continue
        holder = f"gc-{uuid.uuid4().hex[:12]}"
        lease = acquire_lease(store, run.run_id, holder, max(run.lease_s, timeout_s), now=now)
        if lease is None:
            outcomes.append(_outcome(run, group, expired, "skipped", detail="a controller took it"))
            continue
        try:
            outcomes.append(_collect(store, run.run_id, expired, executor, timeout_s, lease.fence))
        except FencedError as error:  # another gc (or controller) took the run from us
            outcomes.append(_outcome(run, group, expired, "skipped", detail=str(error)))
        finally:
            with contextlib.suppress(Exception):
                release_lease(store, run.run_id, holder)
    return outcomes


def _collect_recorded(
    store: EventStore,
    run: RunState,
    group: WorkerGroupState | None,
    expired: datetime | None,
    executor: RayExecutor | Literal["external"] | None,
    fence: Fence,
) -> GcOutcome:
    """End a recorded Ray Train run whose driver died (see the module docstring)."""
    released: tuple[str, ...] = ()
    requests = []
    if group is not None and not group.status.is_terminal:
        reserved = group.placement_group
        if reserved is not None and executor != "external":
            runtime = executor.runtime if executor is not None else _ray_runtime()
            released = runtime.release_placement_group(reserved.placement_group_id, reserved.name)
        ended = [
            WorkerGroupShutdownRequested(reason=DRIVER_LOST_REASON, abort=True),
            WorkerGroupShutDown(duration_s=0.0, released=released),
        ]
        requests.append(AppendRequest(group.stream_id, ended, group.version))
    while True:
        aborted = AppendRequest(run.stream_id, abort_events(run, DRIVER_LOST_REASON), run.version)
        try:
            store.append_many([aborted, *requests], fence=fence)
            break
        except ConcurrencyError:
            run = read_run(store, run.run_id, run)
            if run.ended:
                return _outcome(run, group, expired, "skipped", detail="it ended meanwhile")
    group = _group_of(store, run)
    return _outcome(run, group, expired, "aborted", released=released)


def _ray_runtime() -> WorkerGroupRuntime:
    from wgstore.orchestration.runtimes.ray_runtime import RayRuntime

    runtime = RayRuntime()
    runtime.connect()
    return runtime


def _collect(
    store: EventStore,
    run_id: str,
    expired: datetime | None,
    executor: RayExecutor | Literal["external"] | None,
    timeout_s: float,
    fence: Fence,
) -> GcOutcome:
    run = read_run(store, run_id)  # afresh, under our lease
    group = _group_of(store, run)
    if run.ended:
        return _outcome(run, group, expired, "skipped", detail="it ended meanwhile")
    if run.context is None:
        return _collect_recorded(store, run, group, expired, executor, fence)
    released: tuple[str, ...] = ()
    if group is not None and not group.status.is_terminal:
        try:
            final = _abort_group(store, run, group, executor, timeout_s, fence)
        except WorkerGroupTimeoutError as error:
            return _outcome(run, group, expired, "not released", detail=str(error))
        released = final.released
        group = final
    while True:
        try:
            aborted = AppendRequest(run.stream_id, abort_events(run, GC_REASON), run.version)
            store.append_many([aborted], fence=fence)
            break
        except ConcurrencyError:
            run = read_run(store, run_id, run)
            if run.ended:
                return _outcome(run, group, expired, "skipped", detail="it ended meanwhile")
    return _outcome(run, group, expired, "aborted", released=released)
