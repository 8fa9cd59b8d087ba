"""The actor classes: :class:`WgstoreWorker` (runs the train function) and :class:`SyncActor`.

Plain classes; :mod:`wgstore.orchestration.ray_resources` turns them into detached, named Ray
actors. Like Ray Train's ``RayTrainWorker``, a worker runs the train function in a thread so the
actor stays free to answer polls, and ``poll_status()`` reports whether it is still running, its
error (with traceback) and the reports made since the last acknowledged one.
"""

from __future__ import annotations

import os
import socket
import threading
import time
import traceback
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from wgstore.orchestration.context import TrainContext, WorkerSession, _set_session
from wgstore.orchestration.loading import TrainFn, resolve_train_fn
from wgstore.orchestration.polling import WorkerPoll
from wgstore.orchestration.ranks import ActorMetadata

if TYPE_CHECKING:
    from wgstore.events.worker_group import ErrorInfo

__all__ = ["SyncActor", "WgstoreWorker"]


def _error_info(error: BaseException, skip_frames: int = 0) -> ErrorInfo:
    # wgstore.events is imported only here, when a train function failed: every Ray worker
    # process imports this module, and the event package pulls in the store's dependencies
    from wgstore.events.worker_group import ErrorInfo

    tb = error.__traceback__
    for _ in range(skip_frames):
        if tb is not None and tb.tb_next is not None:
            tb = tb.tb_next
    text = "".join(traceback.format_exception(type(error), error, tb))
    return ErrorInfo(type=type(error).__name__, message=str(error), traceback=text)


class WgstoreWorker:
    """One worker of a group: metadata, train context, the train thread, polls.

    Args:
        name: the actor's name, ``wgstore-<group_id>-<bundle index>``.
        bundle_index: the placement-group bundle this actor runs in.
        failpoints: failures injected on purpose by tests (``worker_exit_on_init``: a bundle
            index whose actor process exits in its constructor; ``worker_init_sleep_s``: seconds
            every constructor sleeps; ``launch_raise``; ``poll_hang``: a bundle index whose
            polls hang).
    """

    def __init__(
        self, name: str, bundle_index: int, failpoints: Mapping[str, Any] | None = None
    ) -> None:
        self._failpoints = dict(failpoints or {})
        if self._failpoints.get("worker_exit_on_init") == bundle_index:
            os._exit(1)  # a real process death while the group is starting
        time.sleep(float(self._failpoints.get("worker_init_sleep_s", 0)))
        self._name = name
        self._bundle_index = bundle_index
        self._fn: TrainFn | None = None
        self._session: WorkerSession | None = None
        self._thread: threading.Thread | None = None
        self._error: ErrorInfo | None = None

    def get_metadata(self) -> ActorMetadata:
        """Node, IP, pid and accelerators of this actor."""
        import ray

        ctx = ray.get_runtime_context()
        accel = ctx.get_accelerator_ids()
        return ActorMetadata(
            actor_name=self._name,
            actor_id=ctx.get_actor_id() or "",
            node_id=ctx.get_node_id(),
            node_ip=ray.util.get_node_ip_address(),  # type: ignore[no-untyped-call]
            pid=os.getpid(),
            hostname=socket.gethostname(),
            gpu_ids=tuple(str(g) for g in accel.get("GPU", [])),
        )

    def init_train_context(
        self,
        *,
        context: TrainContext,
        train_fn: str,
        extra_sys_path: Sequence[str] = (),
    ) -> None:
        """Import the train function and set up ``get_context()``/``report()``.

        Raises:
            TrainFnError: the train function cannot be imported or is not a plain function.
        """
        self._fn = resolve_train_fn(train_fn, extra_sys_path=extra_sys_path)
        self._session = WorkerSession(context)
        _set_session(self._session)

    def run_train_fn(self) -> None:
        """Start the train function in a thread and return at once."""
        if self._failpoints.get("launch_raise"):
            from wgstore.orchestration.errors import FailpointError

            raise FailpointError("failpoint launch_raise: launching the train function failed")
        if self._fn is None or self._session is None:
            raise RuntimeError("init_train_context must run before run_train_fn")
        if self._thread is not None:
            return  # already launched: launching is idempotent
        fn, config = self._fn, dict(self._session.context.config)

        def target() -> None:
            try:
                fn(config)
            except BaseException as error:  # noqa: BLE001 - every failure is reported
                self._error = _error_info(error, skip_frames=1)

        self._thread = threading.Thread(target=target, name=f"train-{self._name}", daemon=True)
        self._thread.start()

    def poll_status(self, acked_index: int = -1) -> WorkerPoll:
        """Running or not, the error if the train function raised, and unacknowledged reports.

        ``running`` is read before the reports are drained, so the poll that first says
        ``running=False`` also carries the last reports.
        """
        if self._failpoints.get("poll_hang") == self._bundle_index:
            time.sleep(3600)
        running = self._thread is not None and self._thread.is_alive()
        reports = self._session.drain(acked_index) if self._session is not None else ()
        return WorkerPoll(running=running, error=self._error, reports=reports)

    def ping(self) -> str:
        """Liveness check; returns the actor's name."""
        return self._name


class SyncActor:
    """The group's synchronization actor (Ray Train's ``SynchronizationActor``): a barrier.

    Args:
        name: the actor's name, ``wgstore-<group_id>-sync``.
        failpoints: ``sync_actor_exit_on_init`` makes the process exit in the constructor.
    """

    def __init__(self, name: str, failpoints: Mapping[str, Any] | None = None) -> None:
        if (failpoints or {}).get("sync_actor_exit_on_init"):
            os._exit(1)
        self._name = name
        self._arrived: dict[int, set[int]] = {}

    def ping(self) -> str:
        """Liveness check; returns the actor's name."""
        return self._name

    def arrive(self, generation: int, world_rank: int) -> int:
        """Record that ``world_rank`` reached barrier ``generation``; returns how many have."""
        ranks = self._arrived.setdefault(generation, set())
        ranks.add(world_rank)
        return len(ranks)
