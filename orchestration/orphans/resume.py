"""``resume_orphan``: continue a run whose driver or controller is gone, from the log alone.

Whichever way the run was started:

- a run of wgstore's own controller (``wgstore run``): a new :class:`RunController` takes the
  run's lease and carries on from the log (it re-attaches to the group, or starts the next
  attempt from the committed checkpoint);
- a run recorded from Ray Train (``RecordingCallback``): the trainer is built again from
  ``TrainerRecorded`` (its class, train loop, configs and datasets, checked against their
  hashes), with the same name and storage path, so Ray restores its checkpoint manager and
  ``ray.train.get_checkpoint()`` returns the latest committed checkpoint; its
  ``RecordingCallback`` continues the same run stream. Before the trainer starts, the resuming
  process takes the run's lease, removes the placement group of the lost attempt if the cluster
  still has it, and records, in one fenced append, that attempt shut down ("driver lost") and the
  controller back at ``INITIALIZING``; the new controller takes the lease over from it. Until
  it does (Ray starts it, and it opens the store once training starts), the resuming process
  keeps the lease renewed: a controller slow to start never lets the run look orphaned, which
  made a supervisor resume it a second time. The lease is as long as the recording
  controller's (``ControllerStarted.lease_s``), not ``RunCreated``'s default.

Refused, with :class:`RunNotResumableError` saying why, when the run has ended, is live (its
lease held by a process that is not gone: ``wait_s`` waits for it to lapse), or cannot be
resumed (what the log lacks, or a train loop whose bytes no longer match their hash).
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable
from typing import Any

from wgstore.events import AppendRequest, EventStore
from wgstore.events.blobs import get_blob
from wgstore.events.leases import Lease, take_lease
from wgstore.events.records import Fence
from wgstore.events.run import ControllerState, ControllerStateChanged, RunResumed
from wgstore.events.worker_group import WorkerGroupShutDown, WorkerGroupShutdownRequested
from wgstore.orchestration.errors import RunLeaseHeldError, RunNotResumableError
from wgstore.orchestration.leases.keeper import LeaseKeeper
from wgstore.orchestration.run.controller import RunController, read_run
from wgstore.projections.run_state import RunState, resume_problem
from wgstore.projections.state import WorkerGroupState, project_worker_group

__all__ = ["DRIVER_LOST", "resume_orphan"]

log = logging.getLogger("wgstore.resume")

DRIVER_LOST = "driver lost"
"""Why the attempt a resume leaves behind ended."""


def _refusal(run: RunState) -> str | None:
    if run.ended:
        return f"run {run.run_id} has ended ({run.status.value}): there is nothing to resume"
    return resume_problem(run)


def _take_lease(
    store: EventStore,
    run: RunState,
    holder: str,
    wait_s: float,
    handed: Fence | None,
    lease_s: float,
) -> Lease:
    """The run's lease for ``holder``: handed over (by a supervisor), free or lapsed, or from a
    holder on this host whose process is gone; else wait up to ``wait_s`` for it to lapse."""
    deadline = time.monotonic() + wait_s
    while True:
        lease, held = take_lease(store, run.run_id, holder, lease_s, take_from=handed)
        if lease is not None:
            return lease
        if held is None:
            continue  # released between the two reads: try again
        if time.monotonic() >= deadline:
            where = ""
            if held.process is not None:
                where = f" (pid {held.process.pid} on {held.process.host})"
            raise RunNotResumableError(
                f"run {run.run_id} is live: {held.holder}{where} holds its lease until "
                f"{held.expires_at.isoformat(timespec='seconds')}. If that process is gone, "
                "resume after that time, or pass --wait to wait for it"
            )
        time.sleep(min(1.0, max(0.05, held.expires_at.timestamp() - time.time())))


def _lost_group(store: EventStore, run: RunState) -> WorkerGroupState | None:
    current = run.current_group_id
    if current is None:
        return None
    from wgstore.events.streams import group_stream

    if not store.stream_version(group_stream(current)):
        return None
    group = project_worker_group(store.read_stream(group_stream(current)))
    return None if group.status.is_terminal else group


def _release(group: WorkerGroupState) -> tuple[str, ...]:
    """Remove the lost attempt's placement group if the cluster still has it."""
    reserved = group.placement_group
    if reserved is None:
        return ()
    from wgstore.orchestration.runtimes.ray_runtime import RayRuntime

    runtime = RayRuntime()
    runtime.connect()
    return runtime.release_placement_group(reserved.placement_group_id, reserved.name)


def _close_lost_attempt(store: EventStore, run: RunState, lease: Lease, by: str) -> RunState:
    """Record who resumes, the lost attempt shut down and the controller back at INITIALIZING,
    in one append fenced by the resumer's lease."""
    group = _lost_group(store, run)
    requests = []
    if group is not None:
        released = _release(group)
        ended = [
            WorkerGroupShutdownRequested(reason=DRIVER_LOST, abort=True),
            WorkerGroupShutDown(duration_s=0.0, released=released),
        ]
        requests.append(AppendRequest(group.stream_id, ended, group.version))
    restart = ControllerStateChanged(
        from_state=run.controller_state,
        to_state=ControllerState.INITIALIZING,
        reason=f"{DRIVER_LOST}: resumed from the log",
        group_id=run.current_group_id,
    )
    resumed = RunResumed(by=by, reason=DRIVER_LOST, attempt=len(run.groups) + 1)
    requests.insert(0, AppendRequest(run.stream_id, [resumed, restart], run.version))
    store.append_many(requests, fence=lease.fence)
    return read_run(store, run.run_id, run)


def _resume_recorded(
    store: EventStore,
    run: RunState,
    wait_s: float,
    fit: Callable[[Any], Any],
    by: str,
    handed: Fence | None,
) -> RunState:
    from wgstore.orchestration.ray_train.callback import ContinueRun, RecordingCallback
    from wgstore.orchestration.ray_train.run_spec import (
        NotResumableError,
        build_trainer,
        decode_run_spec,
    )

    assert run.trainer is not None  # resume_problem checked it
    try:
        spec = decode_run_spec(run.trainer, lambda sha256: get_blob(store, sha256))
    except NotResumableError as error:
        raise RunNotResumableError(f"run {run.run_id} cannot be resumed: {error}") from None
    # The recorder's lease is in ControllerStarted (RunCreated of a recorded run has none).
    lease_s = next((c.lease_s for c in reversed(run.controllers) if c.lease_s), run.lease_s)
    lease = _take_lease(store, run, f"resume-{uuid.uuid4().hex[:12]}", wait_s, handed, lease_s)
    # Renewed until the new controller takes it over (the keeper then finds it held by the
    # controller and stops) or the fit returns.
    keeper = LeaseKeeper(store, lease, lease_s)
    try:
        run = _close_lost_attempt(store, run, lease, by)
        recorder = RecordingCallback(
            store.url,
            run_name=run.name,
            continue_run=ContinueRun(run.run_id, attempts=len(run.groups), lease=lease.fence),
            lease_s=lease_s,
        )
        trainer = build_trainer(spec, callbacks=[recorder])
        log.info("resuming Ray Train run %s (attempt %d)", run.run_id, len(run.groups) + 1)
        try:
            fit(trainer)
        except Exception:
            log.warning("the resumed run %s ended with an error", run.run_id, exc_info=True)
    finally:
        keeper.stop()
    return read_run(store, run.run_id)


def resume_orphan(
    store: EventStore,
    run_id: str,
    *,
    wait_s: float = 0.0,
    by: str = "wgstore resume",
    take_lease_from: Fence | None = None,
    fit: Callable[[Any], Any] = lambda trainer: trainer.fit(),
    **controller_options: Any,
) -> RunState:
    """Resume run ``run_id``, whose driver or controller is gone (see the module docstring), and
    drive it to its end. :func:`wgstore.orchestration.resume_run` is the older, narrower call:
    a run of wgstore's own controller only, by URL, returning a ``RunResult``.

    Args:
        store: the store holding the run.
        run_id: the whole run id.
        wait_s: how long to wait for a live holder's lease to lapse (default: refuse at once).
        by: who resumes, recorded in ``RunResumed`` (``wgstore resume``, ``supervisor <id>``).
        take_lease_from: the lease a supervisor took for this resume and hands over.
        fit: how a rebuilt Ray Train trainer is run (default ``trainer.fit()``).
        controller_options: passed to :class:`RunController` for a run of wgstore's own.

    Returns:
        The run's state once it ended (or, for a controller run, once ``run`` returned).

    Raises:
        RunNotResumableError: the run ended, is live, or cannot be resumed (the message says
            why).
        RunNotFoundError: no such run.
    """
    run = read_run(store, run_id)
    problem = _refusal(run)
    if problem is not None:
        raise RunNotResumableError(problem)
    if run.context is None:
        return _resume_recorded(store, run, wait_s, fit, by, take_lease_from)
    controller = RunController(
        store, run_id, lease_wait_s=wait_s, take_lease_from=take_lease_from, **controller_options
    )
    try:
        controller.start()
    except RunLeaseHeldError as error:
        raise RunNotResumableError(f"run {run_id} is live: {error}") from None  # names holder
    with controller:
        resumed = RunResumed(by=by, reason=DRIVER_LOST, attempt=len(run.groups) or 1)
        store.append(run.stream_id, [resumed], fence=controller.fence)
        return controller.run()
