"""The actor classes: :class:`WgstoreWorker` (runs the train function) and :class:`SyncActor`.

Plain classes; :mod:`wgstore.orchestration.runtimes.ray_resources` turns them into detached, named Ray
actors. Like Ray Train's ``RayTrainWorker``, a worker runs the train function in a thread so the
actor stays free to answer polls, and ``poll_status()`` reports whether it is still running and
its error (with traceback). Reports do not pass through polls: ``report()`` appends them to the
store itself (:mod:`~wgstore.orchestration.train_fn.report_writer`).

Launching is two calls, so that a start failure and a worker failure are told apart by what
happened: ``run_train_fn()`` checks that the train function can start and arms it, running no
user code (its failure fails the start); the executor then records ``TrainingLaunched`` and calls
``start_training()``, which starts the train thread. From then on any death or error is the
worker's. ``poll_status()`` also starts an armed train function (idempotent), so an executor that
stopped between the two calls loses nothing: the next one's first poll starts it.
"""

from __future__ import annotations

import os
import socket
import sys
import threading
import time
import traceback
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from wgstore.orchestration.polling.recorder import WorkerPoll
from wgstore.orchestration.runtimes.ranks import ActorMetadata
from wgstore.orchestration.train_context import TrainContext, WorkerSession, _set_session
from wgstore.orchestration.train_fn.loading import TrainFn, load_pickled_train_fn, resolve_train_fn
from wgstore.orchestration.train_fn.report_writer import ReportWriter

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


def _json_able(value: Any) -> Any:
    """``value`` as it will read back from the log (tuples become lists).

    Raises:
        TypeError: the value is not JSON-able; naming its type and what to return instead.
    """
    import json

    try:
        return json.loads(json.dumps(value, allow_nan=False))
    except (TypeError, ValueError) as error:
        raise TypeError(
            f"the train function returned a value of type {type(value).__name__!r}, which the "
            f"log cannot hold "
            f"({error}); return JSON-able data (dict, list, str, int, float, bool, None), e.g. "
            "metrics or a checkpoint path, and save anything else to storage"
        ) from None


def _checkpoint_guard(context: TrainContext) -> Any:
    """Checks a checkpoint against the other ranks' at the same report index (the sync actor)."""
    if context.world_size < 2:
        return None

    def guard(index: int, path: str) -> None:
        import ray

        from wgstore.orchestration.runtimes.resource_names import NAMESPACE, sync_actor_name

        sync = ray.get_actor(sync_actor_name(context.group_id), namespace=NAMESPACE)
        claim: Any = ray.get(sync.claim_checkpoint.remote(index, path, context.world_rank))
        first, rank = str(claim[0]), int(claim[1])
        if first != path:
            from wgstore.orchestration.errors import CheckpointMismatchError

            raise CheckpointMismatchError(
                f"report {index} of rank {context.world_rank} carries checkpoint {path!r}, but "
                f"rank {rank} reported {first!r} at the same index; all ranks must report the "
                "same checkpoint path for one report (or none), as in Ray Train. The report "
                "was not stored"
            )

    return guard


def _name_output(name: str) -> None:
    """Have Ray prefix what this worker prints with ``name`` (``(rank 0 pid=...) ...``).

    Ray's log monitor names the lines of a worker's log files after the latest marker line it
    finds there (Ray writes one with an actor's ``__repr__`` when the actor is created; the rank
    is known only later, so it is written here, to both files, the way Ray writes it).
    """
    try:
        from ray._private.ray_constants import LOG_PREFIX_ACTOR_NAME
    except ImportError:  # pragma: no cover - Ray moved it: lines keep Ray's default prefix
        return
    for stream in (sys.stdout, sys.stderr):
        print(f"{LOG_PREFIX_ACTOR_NAME}{name}", file=stream, flush=True)


class WgstoreWorker:
    """One worker of a group: metadata, train context, the train thread, polls.

    Args:
        name: the actor's name, ``wgstore-<group_id>-<bundle index>``.
        bundle_index: the placement-group bundle this actor runs in.
        failpoints: failures injected on purpose by tests (``worker_exit_on_init``: a bundle
            index whose actor process exits in its constructor; ``worker_sigkill_on_init``: one
            that SIGKILLs itself there; ``worker_init_sleep_s``: seconds
            every constructor sleeps; ``launch_raise``; ``poll_hang``: a bundle index whose
            polls hang; ``shutdown_hang``: a bundle index whose shutdown hooks hang).
    """

    def __init__(
        self, name: str, bundle_index: int, failpoints: Mapping[str, Any] | None = None
    ) -> None:
        self._failpoints = dict(failpoints or {})
        if self._failpoints.get("worker_exit_on_init") == bundle_index:
            os._exit(1)  # a real process death while the group is starting
        if self._failpoints.get("worker_sigkill_on_init") == bundle_index:
            import signal

            os.kill(os.getpid(), signal.SIGKILL)
        time.sleep(float(self._failpoints.get("worker_init_sleep_s", 0)))
        self._name = name
        self._bundle_index = bundle_index
        self._fn: TrainFn | None = None
        self._writer: ReportWriter | None = None
        self._session: WorkerSession | None = None
        self._thread: threading.Thread | None = None
        self._armed = False
        self._start_lock = threading.Lock()
        self._error: ErrorInfo | None = None
        self._return_value: Any = None

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
        store_url: str,
        hmac_key: bytes | None = None,
        report_metadata: Mapping[str, Any] | None = None,
        extra_sys_path: Sequence[str] = (),
        train_fn_pickle: bytes | None = None,
        train_fn_digest: str | None = None,
    ) -> None:
        """Import (or unpickle) the train function and set up ``get_context()``/``report()``.

        Args:
            context: this worker's ranks and the train config.
            train_fn: the train function's import path.
            store_url: the store reports are appended to (a SQLite path must be absolute).
            hmac_key: the key the executor's store MACs events with, so reports carry one too.
            report_metadata: metadata of every report (``causation_id`` of the start, ...).
            extra_sys_path: folders to put on ``sys.path`` before importing ``train_fn``.

        Raises:
            TrainFnError: the train function cannot be imported or is not a plain function.
            ReportNotStoredError: the store is a SQLite file this node cannot see.
        """
        if train_fn_pickle is not None:
            self._fn = load_pickled_train_fn(
                train_fn, train_fn_pickle, train_fn_digest, extra_sys_path=extra_sys_path
            )
        else:
            self._fn = resolve_train_fn(train_fn, extra_sys_path=extra_sys_path)
        _name_output(f"rank {context.world_rank}")
        self._writer = ReportWriter(
            store_url,
            group_id=context.group_id,
            world_rank=context.world_rank,
            metadata={**dict(report_metadata or {}), "actor": self._name},
            hmac_key=hmac_key,
        )
        self._session = WorkerSession(
            context, self._writer, checkpoint_guard=_checkpoint_guard(context)
        )
        _set_session(self._session)

    def run_train_fn(self, timeout_s: float = 120.0) -> None:
        """Arm the train function: check it can start; no user code runs yet.

        Waits for this worker's store connection (opened in the background since
        ``init_train_context``), so that training starts with reports ready on every worker.

        Raises:
            ReportNotStoredError: the store cannot be opened from this worker.
            FailpointError / RuntimeError: launching failed (the start fails at ``launch``).
        """
        if self._failpoints.get("launch_raise"):
            from wgstore.orchestration.errors import FailpointError

            raise FailpointError("failpoint launch_raise: launching the train function failed")
        if self._fn is None or self._session is None or self._writer is None:
            raise RuntimeError("init_train_context must run before run_train_fn")
        self._writer.wait_ready(timeout_s)
        self._armed = True

    def start_training(self) -> None:
        """Start the armed train function in a thread and return at once (idempotent)."""
        with self._start_lock:
            if not self._armed or self._thread is not None:
                return
            self._start_thread()

    def _start_thread(self) -> None:
        assert self._fn is not None and self._session is not None
        fn, config = self._fn, dict(self._session.context.config)

        def target() -> None:
            try:
                result = fn(config)
            except BaseException as error:  # noqa: BLE001 - every failure is reported
                self._error = _error_info(error, skip_frames=1)
                return
            try:
                self._return_value = _json_able(result)
            except TypeError as error:
                self._error = _error_info(error)

        self._thread = threading.Thread(target=target, name=f"train-{self._name}", daemon=True)
        self._thread.start()

    def poll_status(self) -> WorkerPoll:
        """Running or not, and the error if the train function raised.

        Polls come only once ``TrainingLaunched`` is in the log, so a poll starts an armed
        train function that ``start_training()`` has not started (its executor stopped).
        """
        if self._failpoints.get("poll_hang") == self._bundle_index:
            time.sleep(3600)
        self.start_training()
        running = self._thread is not None and self._thread.is_alive()
        return WorkerPoll(
            running=running,
            error=self._error,
            return_value=None if running else self._return_value,
        )

    def shutdown(self) -> ErrorInfo | None:
        """Run the shutdown hooks the train function registered (``on_shutdown``), in order.

        Ray Train's ``RayTrainWorker.shutdown()``: the executor then kills the actor. Every hook
        runs even if an earlier one raised; returns the first hook error, if any.
        """
        if self._failpoints.get("shutdown_hang") == self._bundle_index:
            time.sleep(3600)
        first: ErrorInfo | None = None
        hooks = self._session.shutdown_hooks() if self._session is not None else []
        for hook in hooks:
            try:
                hook()
            except BaseException as error:  # noqa: BLE001 - recorded, the next hook still runs
                if first is None:
                    first = _error_info(error, skip_frames=1)
        return first

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
        self._claims: dict[int, tuple[str, int]] = {}

    def ping(self) -> str:
        """Liveness check; returns the actor's name."""
        return self._name

    def claim_checkpoint(self, index: int, path: str, world_rank: int) -> tuple[str, int]:
        """The checkpoint of report ``index``: the first rank's claim wins; returns it and its rank.

        Calls to an actor run one at a time, so two ranks cannot both win.
        """
        return self._claims.setdefault(index, (path, world_rank))
