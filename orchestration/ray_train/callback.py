"""``RecordingCallback``: record a real Ray Train v2 run in wgstore with one callback.

Pass it in ``RunConfig(callbacks=[RecordingCallback(url)])``. Ray pickles it to the controller
actor; there, every hook turns what Ray hands it into wgstore's events (the run stream and one
worker-group stream per attempt, the same catalog wgstore's own runs use) and submits them to a
:class:`~wgstore.orchestration.ray_train.writer.BackgroundWriter`, so a hook never waits for the
database. Metadata on every event: ``source="ray_train"``, ``ray_job_id``,
``ray_controller_actor_id`` and ``ray_time_ns`` (when Ray called the hook).

A hook never raises into Ray Train (Ray turns a callback exception into a controller failure):
problems are logged in the controller's log, and a hook that could not record what Ray handed
it says so in the log itself (``RecordingFailed`` on the run stream). Every event is first
folded by the readers' own fold (:mod:`~wgstore.orchestration.ray_train.stream_guard`), so
whatever a hook meets, the run's streams stay readable. With ``strict=True`` a recording failure
(the database unwritable for longer than ``retry_limit_s``) is raised once, as
:class:`~wgstore.orchestration.ray_train.writer.RecordingError`, and fails the run.

An elastic run (``ScalingConfig(num_workers=(min, max))``) is recorded as a fixed one is, with
its range in ``RunCreated``, each attempt's group at the size Ray started it, and every size
Ray's scaling policy chose as ``ScalingDecisionMade`` (from what, to what, why); a node's
announced preemption is ``PreemptionNoticed``. Ray may start a group twice under one attempt id
(a start that failed, tried again): each start is a worker-group stream of its own, the second
``<attempt id>-2``, with Ray's id in the metadata ``ray_attempt_id``.
"""

from __future__ import annotations

import functools
import logging
import os
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypedDict, TypeVar

from ray.train.v2._internal.execution.callback import (
    ControllerCallback,
    ReportCallback,
    WorkerGroupCallback,
)

from wgstore.events.records import Fence, NewEvent
from wgstore.events.run import (
    ControllerStarted,
    ControllerState,
    ControllerStateChanged,
    FailureConfig,
    FailureDecisionMade,
    PreemptionNoticed,
    RecordingFailed,
    ResizeCause,
    RetryDecision,
    RunAborted,
    RunCreated,
    RunErrored,
    RunFinished,
    ScalingConfig,
    ScalingDecisionMade,
)
from wgstore.events.streams import group_stream, run_stream
from wgstore.events.worker_group import (
    GROUP_RESOURCES,
    ErrorInfo,
    PlacementGroupReserved,
    SyncActorStarted,
    TrainingLaunched,
    WorkerGroupContext,
    WorkerGroupPolled,
    WorkerGroupShutDown,
    WorkerGroupShutdownRequested,
    WorkerGroupStarted,
    WorkerGroupStartFailed,
    WorkerGroupStartRequested,
    WorkerReported,
    WorkersStarted,
)
from wgstore.orchestration.polling.recorder import PollRecorder
from wgstore.orchestration.ray_train import run_spec, translate
from wgstore.orchestration.ray_train.stream_guard import StreamGuard
from wgstore.orchestration.ray_train.writer import BackgroundWriter, RecordingError
from wgstore.orchestration.run.scaling import failure_summary, resize_reason
from wgstore.projections.event_time import RAY_TRAIN_SOURCE
from wgstore.projections.run_state import evolve_run
from wgstore.projections.state import WorkerStatus, evolve

__all__ = ["ContinueRun", "RecordingCallback"]

logger = logging.getLogger("wgstore.ray_train")

_F = TypeVar("_F", bound=Callable[..., Any])
_ABORTED = "Run aborted due to user interrupt (SIGINT)."
"""Ray's status detail of an aborted run and attempt (``state/util.py``)."""


class _Process:
    """Whether a recording controller runs in this process (set by ``after_controller_start``;
    Ray runs each Train controller in its own actor process)."""

    is_controller = False


_process = _Process()


def _hook(method: _F) -> _F:
    """Run a hook so that it never raises into Ray Train, unless strict and recording failed."""

    @functools.wraps(method)
    def guarded(self: RecordingCallback, *args: Any, **kwargs: Any) -> Any:
        self._hook_name = method.__name__
        try:
            method(self, *args, **kwargs)
        except RecordingError:
            raise
        except Exception as error:
            logger.exception("wgstore: recording %s failed; training goes on", method.__name__)
            self._record_failure(method.__name__, error)
        self._raise_if_strict()
        return None

    return guarded  # type: ignore[return-value]


@dataclass(frozen=True, slots=True)
class ContinueRun:
    """A recorded run a resume continues: its id, how many attempts it had, and the lease the
    resuming driver holds and hands over to the controller it starts."""

    run_id: str
    attempts: int
    lease: Fence | None = None


class RecordingCallback(ControllerCallback, WorkerGroupCallback, ReportCallback):
    """Records a Ray Train v2 run (controller, attempts, polls, reports) in a wgstore log.

    Args:
        url: the database, e.g. ``"sqlite:////shared/wgstore.db"`` (the controller must reach
            the file: same machine; a relative path is taken from the driver's working
            directory) or ``"postgresql+psycopg://user@host/db"`` (any node).
        run_name: the run's name in wgstore; Ray's ``RunConfig.name`` by default.
        strict: raise a recording failure into Ray Train (the run fails with
            ``RecordingError``) instead of logging it and training on.
        retry_limit_s: how long appends may fail before it counts as a recording failure.
        flush_timeout_s: how long the controller waits at the end of the run for what is
            still unwritten (plus the store's open, when the run ended before it was first
            opened); what is left after that is reported as not recorded.
        hold_s: how long the first events wait in memory for training to start before the
            store is opened anyway. Opening it (~0.3 s of the controller's CPU) then does not
            slow the workers' start; the price is that a controller killed in that window
            leaves no record. ``0`` writes from the first event.
        continue_run: record into an existing run instead of a new one (``wgstore resume``):
            the new controller's attempts continue that run's, ``ControllerStarted(resumed=True)``
            and no second ``RunCreated`` or ``TrainerRecorded``.
        lease_s: the run's lease, which the recording controller takes once the store is open
            and renews while it lives. When the driver dies, Ray ends the controller, the lease
            lapses, and within ``lease_s`` the run shows as orphaned (``wgstore runs``), for
            ``wgstore gc`` to end or ``wgstore resume`` / ``supervise`` to continue.
        read_models_interval_s: bring the SQL read models up to date at most this often while
            the run is recorded, and once at its end (off the hooks, in the writer's thread), as
            an executor does for wgstore's own runs; ``None`` leaves them to ``wgstore
            projections catch-up``.
    """

    def __init__(
        self,
        url: str,
        *,
        run_name: str | None = None,
        strict: bool = False,
        retry_limit_s: float = 30.0,
        flush_timeout_s: float = 10.0,
        hold_s: float = 30.0,
        lease_s: float = 30.0,
        continue_run: ContinueRun | None = None,
        read_models_interval_s: float | None = 2.0,
    ) -> None:
        if not isinstance(url, str) or "://" not in url:
            raise ValueError(
                f"RecordingCallback needs a database URL like 'sqlite:///wgstore.db' or "
                f"'postgresql+psycopg://user@host/db', got {url!r}"
            )
        self.url = _absolute_sqlite(url)
        _check_url(self.url)
        self.run_name = run_name
        self.strict = strict
        self.retry_limit_s = retry_limit_s
        self.flush_timeout_s = flush_timeout_s
        self.hold_s = hold_s
        if not lease_s > 0:
            raise ValueError(f"lease_s must be > 0 seconds, got {lease_s!r}")
        self.lease_s = float(lease_s)
        self.continue_run = continue_run
        if read_models_interval_s is not None and not read_models_interval_s >= 0:
            raise ValueError(
                f"read_models_interval_s must be >= 0 seconds or None, got {read_models_interval_s!r}"
            )
        self.read_models_interval_s = read_models_interval_s
        self._reset()
        self._driver_part: run_spec.DriverPart | None = None

    def _reset(self) -> None:
        self._writer: BackgroundWriter | None = None
        self._keeper: Any = None  # LeaseKeeper, made in the writer's thread
        self._run_id = ""
        self._metadata: dict[str, Any] = {}
        self._attempt = 0
        self._group_id: str | None = None
        self._group_started = False
        self._recorder: PollRecorder | None = None
        self._report_counts: dict[int, int] = {}
        self._pending_decision: RetryDecision | None = None
        self._controller_state = ControllerState.INITIALIZING
        self._failure_counts: dict[str, int] = {}
        self._failure_config: Any = None
        self._train_fn: Any = None
        self._loop_config: dict[str, Any] = {}
        self._latest_checkpoint: str | None = None
        self._spec_inputs: dict[str, Any] | None = None
        self._spec_recorded = False
        self._shutdown_started = 0.0
        self._attempt_started = 0.0
        self._raised = False
        self._closed = False
        self._ended = False
        self._hook_name = ""
        self._created = False  # RunCreated (or a continued run's ControllerStarted) submitted
        self._guards: dict[str, StreamGuard] = {}
        self._scaling: ScalingConfig | None = None
        self._attempt_starts: dict[str, int] = {}  # Ray's attempt id -> groups started under it
        self._scheduled_from: ControllerState | None = None
        self._pending_scaling: tuple[Any, int] | None = None  # (Ray's decision, its hook time)
        self._group_size: int | None = None
        self._last_failure: tuple[str, str] | None = None  # (failure kind, reason)
        self._preempted: dict[str, tuple[int, ...]] = {}

    # Ray pickles the callback to the controller: the settings travel, and what only the driver
    # can see of the run (the trainer, its train loop and datasets: run_spec.find_trainer).
    def __getstate__(self) -> dict[str, Any]:
        return {
            "url": self.url,
            "run_name": self.run_name,
            "strict": self.strict,
            "retry_limit_s": self.retry_limit_s,
            "flush_timeout_s": self.flush_timeout_s,
            "hold_s": self.hold_s,
            "lease_s": self.lease_s,
            "continue_run": self.continue_run,
            "read_models_interval_s": self.read_models_interval_s,
            "_driver_part": self._capture_driver_part() if self.continue_run is None else None,
        }

    def __reduce_ex__(self, protocol: Any) -> Any:
        # In the controller's process (a recording started there), any copy of the callback is
        # pickled on only in the run config Ray hands each worker, where no hook runs: an inert
        # stand-in goes instead, so the workers import nothing of wgstore (stand_in.py says what
        # that saves). Elsewhere (the driver, a Ray Tune trial) the callback travels whole.
        if _process.is_controller:
            from wgstore.orchestration.ray_train.stand_in import RecordingStandIn

            return (RecordingStandIn, (self._run_id,))
        return super().__reduce_ex__(protocol)

    def __setstate__(self, state: dict[str, Any]) -> None:
        driver_part = state.pop("_driver_part", None)
        self.__dict__.update(state)
        self._reset()
        self._driver_part = driver_part

    def _capture_driver_part(self) -> run_spec.DriverPart | None:
        """The driver's part of ``TrainerRecorded``, taken once (Ray may pickle the callback
        more than once: in the callbacks and in the run config). Never raises."""
        part: run_spec.DriverPart | None = getattr(self, "_driver_part", None)
        if part is not None:
            return part
        try:
            trainer = run_spec.find_trainer()
            part = None if trainer is None else run_spec.encode_driver_part(trainer)
        except Exception:  # recording never fails a run
            logger.warning("wgstore: cannot record the trainer for a resume", exc_info=True)
            part = None
        self._driver_part = part
        return part

    def _record_trainer(self, fallback_train_loop: Any = None) -> None:
        """``TrainerRecorded`` on the run stream, once, with its large pickles as blobs."""
        if self._spec_recorded or self._spec_inputs is None:
            return
        self._spec_recorded = True
        event, blobs = run_spec.encode_run_spec(
            getattr(self, "_driver_part", None),
            fallback_train_loop=fallback_train_loop,
            **self._spec_inputs,
        )
        self._submit(run_stream(self._run_id), event, blobs=blobs)

    @property
    def writer(self) -> BackgroundWriter | None:
        """The background writer (in the controller, once the run started)."""
        return self._writer

    # ------------------------------------------------------------------ plumbing

    def _open_store(self) -> Any:
        from wgstore.events import EventStore

        store = EventStore.open(self.url)
        try:
            self._keep_lease(store)
        except Exception:
            logger.warning(
                "wgstore: run %s is recorded without a lease", self._run_id, exc_info=True
            )
        return store

    def _keep_lease(self, store: Any) -> None:
        """Take the run's lease (once the store is open, in the writer's thread) and keep it
        renewed while this controller lives; after a reopen, renew it on the new store."""
        from wgstore.events.leases import take_lease
        from wgstore.orchestration.leases.keeper import LeaseKeeper

        holder = self._metadata.get("ray_controller_actor_id") or f"ray-train-{os.getpid()}"
        handed = self.continue_run.lease if self.continue_run is not None else None
        lease, held = take_lease(store, self._run_id, holder, self.lease_s, take_from=handed)
        if lease is None:
            if held is not None and self._writer is not None:  # a resume, say: it records now
                self._writer.fenced_off(
                    f"run {self._run_id} is held by {held.holder!r}, a live process: this "
                    "controller does not record it"
                )
            return
        if self._writer is not None:
            self._writer.fence = lease.fence  # every append from now on carries it
        if self._keeper is not None:
            self._keeper.stop()
        self._keeper = LeaseKeeper(store, lease, self.lease_s)

    def _submit(
        self,
        stream_id: str,
        *events: Any,
        metadata: dict[str, Any] | None = None,
        blobs: Any = (),
    ) -> None:
        """Hand ``events`` to the writer, once the stream's guard (the readers' fold) took them;
        what it refuses is reported as ``RecordingFailed`` instead."""
        if self._writer is None or (not self._created and stream_id == run_stream(self._run_id)):
            return  # (a run stream begins with RunCreated, or is not written)
        meta = {**self._metadata, "ray_time_ns": time.time_ns(), **(metadata or {})}
        new = [NewEvent(event, metadata=meta) for event in events]
        guard = self._guards.get(stream_id)
        if guard is not None:
            new, refused = guard.admit(new)
            if refused:
                logger.warning("wgstore: not recorded (the run would be unreadable): %s", refused)
                self._record_failure(
                    self._hook_name or "recording",
                    ValueError("not recorded, the log's fold refuses it: " + "; ".join(refused)),
                )
        if new:
            self._writer.submit(stream_id, new, blobs=blobs)

    def _record_failure(self, hook: str, error: BaseException) -> None:
        """``RecordingFailed`` on the run stream: what ``hook`` could not record. Never raises."""
        if self._writer is None or not self._created:
            return
        try:
            failed = RecordingFailed(hook=hook, error=ErrorInfo.from_exception(error))
            meta = {**self._metadata, "ray_time_ns": time.time_ns()}
            stream = run_stream(self._run_id)
            new = [NewEvent(failed, metadata=meta)]
            guard = self._guards.get(stream)
            if guard is not None:
                new, _ = guard.admit(new)
            if new:
                self._writer.submit(stream, new)
        except Exception:
            logger.warning("wgstore: cannot record that %s failed", hook, exc_info=True)

    def _submit_group(self, *events: Any, metadata: dict[str, Any] | None = None) -> None:
        if self._group_id is not None:
            self._submit(group_stream(self._group_id), *events, metadata=metadata)

    def _raise_if_strict(self) -> None:
        if not self.strict or self._raised or self._writer is None:
            return
        failure = self._writer.failure
        if failure is not None:
            self._raised = True
            raise failure

    # ------------------------------------------------------------------ controller hooks

    @_hook
    def after_controller_start(self, train_run_context: Any) -> None:
        """The run starts: ``RunCreated`` (with what Ray's state actor keeps) and
        ``ControllerStarted``."""
        import ray

        runtime = ray.get_runtime_context()
        _process.is_controller = runtime.get_actor_id() is not None  # not a driver calling hooks
        self._run_id = train_run_context.run_id
        self._metadata = {
            "source": RAY_TRAIN_SOURCE,
            "ray_job_id": runtime.get_job_id(),
            "ray_controller_actor_id": runtime.get_actor_id(),
        }
        resumed = self.continue_run
        if resumed is not None:  # Ray's new run id is kept as metadata; the run stays the same
            self._metadata["ray_run_id"] = self._run_id
            self._run_id = resumed.run_id
            self._attempt = resumed.attempts
            self._spec_recorded = True
        # Held until training starts (or hold_s): the store's open then does not compete
        # with the controller while it starts the workers.
        self._writer = BackgroundWriter(
            self._open_store,
            url=self.url,
            retry_limit_s=self.retry_limit_s,
            hold_s=self.hold_s,
            read_models_interval_s=self.read_models_interval_s,
        )
        # What Ray handed over, part by part: a part that cannot be read (a shape wgstore does
        # not know) is left out and named in RecordingFailed, never the whole run.
        problems: list[tuple[str, BaseException]] = []

        def part(what: str, read: Callable[[], Any], default: Any) -> Any:
            try:
                return read()
            except Exception as error:
                logger.warning("wgstore: cannot record the run's %s", what, exc_info=True)
                problems.append((what, error))
                return default

        run_config = part("run config", lambda: train_run_context.run_config, None)
        self._scaling = part(
            "scaling config",
            lambda: translate.scaling_config(train_run_context.scaling_config),
            None,
        )
        self._failure_config = part("failure config", lambda: run_config.failure_config, None)
        failure = part("failure config", lambda: _failure_config(self._failure_config), None)
        self._loop_config = part(
            "train loop config",
            lambda: translate.jsonable(train_run_context.train_loop_config or {}),
            {},
        )
        created = RunCreated(
            run_id=self._run_id,
            name=self.run_name or part("name", lambda: str(run_config.name or ""), ""),
            scaling_config=self._scaling,
            failure_config=failure or FailureConfig(),
            context=None,
            ray=part("Ray run info", lambda: _ray_run_info(train_run_context, self._metadata), {}),
        )
        controller = ControllerStarted(
            controller_id=self._metadata["ray_controller_actor_id"] or "",
            host=socket.gethostname(),
            pid=os.getpid(),
            resumed=resumed is not None,
            lease_s=self.lease_s,
        )
        stream = run_stream(self._run_id)
        self._created = True
        if resumed is None:
            self._guards[stream] = StreamGuard(stream, evolve_run)
            self._submit(stream, created, controller)
        else:
            self._submit(stream, controller)
        for what, error in problems:
            self._record_failure(f"after_controller_start: {what}", error)
        self._spec_inputs = part(
            "trainer's configs",
            lambda: {
                "train_loop_config": train_run_context.train_loop_config,
                "scaling_config": train_run_context.scaling_config,
                "run_config": run_config,
                "backend_config": train_run_context.backend_config,
            },
            None,
        )
        # the driver's part came with the pickle (fit()), or the callback was never pickled and
        # the trainer is on this stack; a continued run recorded its trainer already
        if not self._spec_recorded and self._capture_driver_part() is not None:
            self._record_trainer()

    @_hook
    def before_controller_execute_failure_decision(self, failure_decision: Any) -> None:
        """Kept until the state update that follows, which carries the failure."""
        self._pending_decision = RetryDecision(getattr(failure_decision, "value", failure_decision))

    @_hook
    def before_controller_execute_resize_decision(self, resize_decision: Any) -> None:
        """The size Ray's scaling policy chose for the next group: kept until that group's
        start names it (``ScalingDecisionMade``, elastic runs only), with this hook's time."""
        if self._scaling is not None and self._scaling.elastic:
            self._pending_scaling = (resize_decision, time.time_ns())

    def _scaling_decision(self, group_id: str | None, num_workers: int | None = None) -> None:
        """``ScalingDecisionMade`` for the decision kept by the resize hook, if any, naming the
        group it started (``num_workers``: the size Ray started it at)."""
        if self._pending_scaling is None:
            return
        decision, at_ns = self._pending_scaling
        self._pending_scaling = None
        if num_workers is None:
            num_workers = int(decision.num_workers)
        failure_kind, failure_reason = self._last_failure or (None, "")
        previous = self._group_size
        cause = translate.resize_cause(self._scheduled_from, previous, num_workers, failure_kind)
        restart = cause not in (ResizeCause.INITIAL, ResizeCause.GREW, ResizeCause.SHRANK)
        event = ScalingDecisionMade(
            num_workers=num_workers,
            previous_workers=previous,
            cause=cause,
            reason=resize_reason(
                cause, previous, num_workers, self._scaling, failure_reason if restart else ""
            ),
            group_id=group_id,
            resources_per_worker=dict(getattr(decision, "resources_per_worker", None) or {}),
        )
        self._submit(run_stream(self._run_id), event, metadata={"ray_time_ns": at_ns})

    @_hook
    def after_controller_state_update(self, previous_state: Any, current_state: Any) -> None:
        """``ControllerStateChanged`` (Ray's names; same-state updates are skipped), the
        failure decision it answers, and the run's ending."""
        # From the last state recorded, not Ray's previous state: Ray skips this hook on a
        # few forced transitions, and the record must stay one unbroken chain of states.
        before = self._controller_state
        after = ControllerState(translate.state_name(current_state))  # Ray 2.60's names
        events: list[Any] = []
        error = getattr(current_state, "training_failed_error", None)
        if error is None:
            error = getattr(
                getattr(current_state, "next_state", None), "training_failed_error", None
            )
        if self._pending_decision is not None and error is not None and self._group_id:
            # (a failure before any attempt has no group to name: RunErrored tells it)
            events += self._decision_events(self._group_id, self._pending_decision, error)
        self._pending_decision = None
        if before != after:
            self._controller_state = after
            if after is ControllerState.SCHEDULING:
                self._scheduled_from = before
            events.append(
                ControllerStateChanged(
                    from_state=before,
                    to_state=after,
                    reason=translate.status_detail(current_state),
                    group_id=self._group_id,
                )
            )
        if after is ControllerState.PREEMPTING:
            events += self._preemption_notice(current_state)
        elif before is ControllerState.PREEMPTING:
            self._preempted = {}
        if after.is_terminal:  # a decision no group followed (the run ended between the two)
            self._scaling_decision(None)
        if after is ControllerState.FINISHED:
            events.append(RunFinished(group_id=self._group_id))
        elif after is ControllerState.ERRORED:
            events.append(
                RunErrored(
                    error=translate.error_info(error)
                    if error is not None
                    else ErrorInfo(type="TrainingFailedError", message="unknown"),
                    group_id=self._group_id,
                    errors=translate.rank_errors(error),
                )
            )
        elif after is ControllerState.ABORTED:
            events.append(RunAborted(reason=_ABORTED))
        if events:
            note = self._recording_note() if after.is_terminal else None
            self._submit(run_stream(self._run_id), *events, metadata=note)
        if after.is_terminal:
            self._ended = True
            self._close()

    def _preemption_notice(self, state: Any) -> list[PreemptionNoticed]:
        """``PreemptionNoticed`` when Ray's preempting state names nodes not noticed yet (Ray
        merges a later node's notice into the same state)."""
        info = getattr(state, "preemption_info", None)
        nodes = translate.preemption_nodes(info)
        if not nodes or nodes == self._preempted:
            return []
        self._preempted = nodes
        deadline_ms = getattr(info, "deadline_ms", None)
        detected_s = getattr(state, "detected_at_s", None)
        return [
            PreemptionNoticed(
                group_id=self._group_id,
                nodes=nodes,
                deadline=translate.utc(deadline_ms / 1000) if deadline_ms else None,
                detected_at=translate.utc(float(detected_s)) if detected_s is not None else None,
            )
        ]

    def _recording_note(self) -> dict[str, Any]:
        """How the recording went, on the run's end event: a gap (an outage, dropped events)
        is reported in the log itself once the database is back. An outage still under way
        when the run ends counts up to that moment (``still_failing``): training can end before
        the database is back, and this event is then written after it."""
        assert self._writer is not None
        stats = self._writer.stats
        return {
            "recording": {
                "retries": stats.retries,
                "outage_s": round(self._writer.outage_so_far_s(), 3),
                "still_failing": self._writer.failing,
                "dropped": stats.dropped,
                "problems": list(stats.problems),
            }
        }

    def _decision_events(self, group_id: str, decision: RetryDecision, error: Any) -> list[Any]:
        if self._writer is not None:
            self._writer.release()  # a failed attempt is recorded now, not after the next start
        kind, so_far, limit = translate.failure_accounting(
            error, self._failure_counts, self._failure_config
        )
        if self._group_id is not None and not self._group_started:
            self._submit_group(
                WorkerGroupStartFailed(
                    stage=translate.start_stage(error), error=translate.error_info(error)
                )
            )
        errors = translate.rank_errors(error)
        self._last_failure = (kind, failure_summary(kind, errors))
        return [
            FailureDecisionMade(
                decision=decision,
                group_id=group_id,
                reason=str(error),
                failures_so_far=so_far,
                failure_kind=kind,
                limit=limit,
                errors=errors,
            )
        ]

    @_hook
    def after_controller_finish(self, result: Any) -> None:
        """The run is over: flush what is left (bounded by ``flush_timeout_s``). A run Ray
        forced into ERRORED without the state hook gets its ending from the result."""
        if not self._ended and self._writer is not None and not self._closed:
            error = getattr(result, "error", None)
            end: Any = (
                RunErrored(
                    error=translate.error_info(error),
                    group_id=self._group_id,
                    errors=translate.rank_errors(error),
                )
                if error is not None
                else RunFinished(group_id=self._group_id)
            )
            self._ended = True
            self._submit(run_stream(self._run_id), end, metadata=self._recording_note())
        self._close()

    @_hook
    def before_controller_abort(self) -> None:
        """The controller is about to exit: nothing more to write than its last events."""

    def _close(self) -> None:
        if self._writer is None or self._closed:
            return
        self._closed = True
        writer = self._writer
        closed = writer.close(self.flush_timeout_s)
        if self._keeper is not None:
            # Stopped, not released: a run whose ending was written is not orphaned anyway, and
            # one whose ending could not be written should show as orphaned once this lapses.
            self._keeper.stop()
        if not closed:
            logger.error(
                "wgstore: the record of Ray Train run %s is incomplete: %d event(s) were not "
                "written (%s)",
                self._run_id,
                writer.stats.dropped,
                "; ".join(writer.stats.problems[-3:]),
            )
        elif writer.stats.problems:
            logger.warning(
                "wgstore: the record of run %s is complete after %.1f s of database trouble",
                self._run_id,
                writer.stats.outage_s,
            )

    # ------------------------------------------------------------------ worker-group hooks

    @_hook
    def before_worker_group_start(self, worker_group_context: Any) -> None:
        """A new group: ``WorkerGroupStartRequested`` on a stream of its own, named by Ray's
        attempt id (``<attempt id>-2`` ... when Ray starts a group again under the same id),
        after the ``ScalingDecisionMade`` that chose its size (elastic runs)."""
        self._attempt += 1
        ray_attempt = str(worker_group_context.run_attempt_id)
        starts = self._attempt_starts.get(ray_attempt, 0) + 1
        self._attempt_starts[ray_attempt] = starts
        self._group_id = ray_attempt if starts == 1 else f"{ray_attempt}-{starts}"
        stream = group_stream(self._group_id)
        run = run_stream(self._run_id)  # groups are written one at a time: keep the current's
        self._guards = {k: v for k, v in self._guards.items() if k == run}
        self._guards[stream] = StreamGuard(stream, evolve)
        self._group_started = False
        self._recorder = PollRecorder()
        self._report_counts = {}
        self._attempt_started = time.time()
        num_workers = int(worker_group_context.num_workers)
        self._scaling_decision(self._group_id, num_workers)
        self._group_size = num_workers
        if self._train_fn is None:
            self._train_fn = _train_fn_of(worker_group_context)
        context = WorkerGroupContext(
            num_workers=num_workers,
            resources_per_worker=dict(worker_group_context.resources_per_worker),
            train_fn=self._train_fn,
            train_fn_config=self._loop_config,
            placement_strategy=worker_group_context.placement_strategy,
            resume_checkpoint=self._latest_checkpoint,
            **_ray_timeouts(),
        )
        self._submit_group(
            WorkerGroupStartRequested(
                group_id=self._group_id, run_id=self._run_id, attempt=self._attempt, context=context
            ),
            metadata={"ray_attempt_id": ray_attempt},
        )
        if not self._spec_recorded:  # the trainer was not seen in the driver: Ray's train fn
            try:
                fallback = worker_group_context.train_fn_ref.get()
            except Exception:  # noqa: BLE001 - recorded as not resumable below
                fallback = None
            self._record_trainer(fallback)

    @_hook
    def after_worker_group_start(self, worker_group: Any) -> None:
        """The builder's steps from what the started group holds: placement group, sync actor,
        workers (ranks, node, pid, actor id), and ``WorkerGroupStarted``."""
        state = worker_group.get_worker_group_state()
        context = worker_group.get_worker_group_context()
        pg = state.placement_group_handle.placement_group
        workers = list(state.workers)
        # Ray's start_time is time.monotonic() in this process: as wall-clock time
        start_time = time.time() - (time.monotonic() - float(state.start_time))
        events = [
            PlacementGroupReserved(
                placement_group_id=pg.id.hex(),
                name="",
                bundles=tuple(dict(bundle) for bundle in pg.bundle_specs),
                strategy=context.placement_strategy,
            ),
            SyncActorStarted(actor_id=state.sync_actor._actor_id.hex(), name=""),
        ]
        self._submit_group(*events)
        self._submit_group(
            WorkersStarted(workers=tuple(translate.worker_info(w) for w in workers)),
            metadata={
                "ray_worker_log_file_paths": [w.log_file_path for w in workers],
                "ray_worker_resources": [translate.jsonable(w.resources) for w in workers],
            },
        )
        self._submit_group(
            WorkerGroupStarted(
                start_time=translate.utc(start_time),
                startup_s=max(0.0, start_time - self._attempt_started),
            )
        )
        self._group_started = True

    @_hook
    def after_worker_group_training_start(self, worker_group: Any) -> None:
        """``TrainingLaunched``; the writer starts writing (its hold ends)."""
        if self._writer is not None:
            self._writer.release()
        train_fn = self._train_fn if isinstance(self._train_fn, str) else repr(self._train_fn)
        self._submit_group(TrainingLaunched(train_fn=train_fn))

    @_hook
    def after_worker_group_poll_status(self, worker_group_status: Any) -> None:
        """Each rank's report (``WorkerReported``) and the poll, delta-encoded
        (``WorkerGroupPolled`` only when a worker's status changed)."""
        if self._recorder is None:
            return
        events: list[Any] = []
        statuses = {}
        for rank, status in worker_group_status.worker_statuses.items():
            report = getattr(status, "training_report", None)
            if report is not None:
                index = self._report_counts.get(rank, 0)
                self._report_counts[rank] = index + 1
                checkpoint = getattr(report, "checkpoint", None)
                events.append(
                    WorkerReported(
                        world_rank=int(rank),
                        index=index,
                        metrics=translate.jsonable(report.metrics or {}),
                        checkpoint=getattr(checkpoint, "path", None),
                    )
                )
            error = status.error
            statuses[int(rank)] = WorkerStatus(
                running=bool(status.running),
                error=translate.error_info(error) if error is not None else None,
                return_value=translate.jsonable(getattr(status, "return_value", None)),
            )
        polled = self._recorder.observe(statuses, translate.utc(time.time()))
        if polled is not None:
            events.append(polled)
        if events:
            self._submit_group(*events)

    def _flush_polls(self) -> list[WorkerGroupPolled]:
        if self._recorder is None:
            return []
        trailing = self._recorder.flush()
        return [trailing] if trailing is not None else []

    @_hook
    def before_worker_group_shutdown(self, worker_group: Any) -> None:
        """``WorkerGroupShutdownRequested``: the reason is Ray's attempt status detail (the
        grouped errors of the last poll) when the attempt errored."""
        poll = worker_group.get_latest_poll_status()
        resized_to: int | None = None
        if poll is not None and poll.errors:
            reason = poll.get_error_string()
        elif poll is not None and poll.finished:
            reason = "training finished"
        elif self._scheduled_from is ControllerState.RESIZING and self._pending_scaling:
            resized_to = int(self._pending_scaling[0].num_workers)
            reason = f"resized: {resized_to} workers fit, the group had {self._group_size}"
        else:
            reason = "shut down by the Ray Train controller"
        self._shutdown_started = time.time()
        self._submit_group(
            *self._flush_polls(),
            WorkerGroupShutdownRequested(reason=reason, resized_to=resized_to),
        )

    @_hook
    def after_worker_group_shutdown(self, worker_group_context: Any) -> None:
        """``WorkerGroupShutDown``: workers, sync actor and placement group released."""
        self._submit_group(self._shut_down())

    @_hook
    def before_worker_group_abort(self, worker_group_context: Any) -> None:
        """``WorkerGroupShutdownRequested(abort=True)``."""
        self._shutdown_started = time.time()
        self._submit_group(
            *self._flush_polls(),
            WorkerGroupShutdownRequested(reason=_ABORTED, abort=True),
        )

    @_hook
    def after_worker_group_abort(self, worker_group_context: Any) -> None:
        """``WorkerGroupShutDown`` after an abort."""
        self._submit_group(self._shut_down())

    def _shut_down(self) -> WorkerGroupShutDown:
        return WorkerGroupShutDown(
            duration_s=max(0.0, time.time() - self._shutdown_started),
            released=GROUP_RESOURCES if self._group_started else (),
        )

    # ------------------------------------------------------------------ report hook

    @_hook
    def after_report(self, training_report: Any, metrics: Any) -> None:
        """The consolidated report of every rank: keeps the latest checkpoint (a retry's
        ``resume_checkpoint``); the per-rank reports are recorded from the polls."""
        checkpoint = getattr(training_report, "checkpoint", None)
        if checkpoint is not None:
            self._latest_checkpoint = checkpoint.path


def _failure_config(failure: Any) -> FailureConfig:
    """Ray Train's ``FailureConfig`` as the run's :class:`~wgstore.events.run.FailureConfig`."""
    return FailureConfig(
        max_failures=failure.max_failures,
        controller_failure_limit=failure.controller_failure_limit,
        max_preemption_failures=getattr(failure, "max_preemption_failures", -1),
    )


def _check_url(url: str) -> None:
    """Refuse, in the driver and before training starts, a store URL that can never work: a
    SQLite file whose folder does not exist, a PostgreSQL database that does not exist or
    refuses the user. A server that cannot be reached from here is only warned about (the
    controller may reach it, and the writer retries an outage).

    Raises:
        ValueError: the URL names a store that cannot be opened, saying why and how to fix it.
    """
    scheme, _, rest = url.partition("://")
    if scheme.startswith("sqlite"):
        path = rest[1:].partition("?")[0] if rest.startswith("/") else ""
        if not path or path == ":memory:":
            raise ValueError(
                f"RecordingCallback needs a SQLite file the controller can open, got {url!r}: "
                "an in-memory database lives in one process only"
            )
        folder = os.path.dirname(path) or "/"
        if not os.path.isdir(folder):
            raise ValueError(
                f"RecordingCallback cannot record into {url!r}: the folder {folder!r} does not "
                "exist (create it, or fix the path; four slashes for an absolute path: "
                "sqlite:////abs/path.db)"
            )
        return
    if scheme.startswith("postgresql"):
        _check_postgres(url)


def _check_postgres(url: str) -> None:
    """One short connection to the PostgreSQL server of ``url``: a database that does not exist
    or a user it refuses is a mistake to say at once; a server out of reach is a warning."""
    try:
        import psycopg
    except ImportError:  # the store's own open will say what to install
        return
    from wgstore.events.engine import mask_url

    conninfo = "postgresql://" + url.partition("://")[2]
    try:
        psycopg.connect(conninfo, connect_timeout=3).close()
    except psycopg.OperationalError as error:
        state = getattr(error, "sqlstate", None) or ""
        text = str(error).strip().splitlines()[-1] if str(error).strip() else repr(error)
        if state == "3D000" or "does not exist" in text:
            raise ValueError(
                f"RecordingCallback cannot record into {mask_url(url)}: {text} (create the "
                "database first, e.g. createdb, or fix the URL)"
            ) from None
        if state.startswith("28") or "authentication failed" in text:
            raise ValueError(
                f"RecordingCallback cannot record into {mask_url(url)}: {text}"
            ) from None
        logger.warning(
            "wgstore: %s cannot be reached from the driver now (%s); the controller will try, "
            "and retries an outage for retry_limit_s",
            mask_url(url),
            text,
        )


def _absolute_sqlite(url: str) -> str:
    """A SQLite URL with a relative path made absolute here, in the driver: the controller
    actor runs in another working directory and would open (and create) another file."""
    scheme, sep, rest = url.partition(":///")
    if not scheme.startswith("sqlite") or not sep:
        return url
    path, mark, query = rest.partition("?")
    if not path or path.startswith("/") or path == ":memory:":
        return url
    return f"{scheme}:///{os.path.abspath(path)}{mark}{query}"


def _train_fn_of(worker_group_context: Any) -> Any:
    """The attempt's train function as recorded (see :func:`translate.train_fn_path`)."""
    try:
        return translate.train_fn_path(worker_group_context.train_fn_ref.get())
    except Exception:  # the controller cannot load it: record that, train on
        logger.warning("wgstore: cannot load the train function to name it", exc_info=True)
        return "__main__:unknown_train_fn"


class _RayTimeouts(TypedDict):
    placement_timeout_s: float
    poll_interval_s: float
    health_check_timeout_s: float


def _ray_timeouts() -> _RayTimeouts:
    """Ray Train's own timeouts, as its controller reads them (env vars, Ray's defaults)."""
    from ray.train.v2._internal import constants as c

    def env(name: str, default: float) -> float:
        try:
            return float(os.environ.get(name, default))
        except ValueError:
            return float(default)

    return {
        "placement_timeout_s": env(
            c.WORKER_GROUP_START_TIMEOUT_S_ENV_VAR, c.DEFAULT_WORKER_GROUP_START_TIMEOUT_S
        ),
        "poll_interval_s": env(
            c.HEALTH_CHECK_INTERVAL_S_ENV_VAR, c.DEFAULT_HEALTH_CHECK_INTERVAL_S
        ),
        "health_check_timeout_s": env(
            c.WORKER_HEALTH_CHECK_TIMEOUT_S_ENV_VAR, c.DEFAULT_WORKER_HEALTH_CHECK_TIMEOUT_S
        ),
    }


def _ray_run_info(train_run_context: Any, metadata: dict[str, Any]) -> dict[str, Any]:
    """What Ray's state actor keeps about a run (``TrainRun``), as JSON, for ``RunCreated.ray``."""
    info: dict[str, Any] = {
        "id": train_run_context.run_id,
        "name": train_run_context.run_config.name,
        "job_id": metadata["ray_job_id"],
        "controller_actor_id": metadata["ray_controller_actor_id"],
        "start_time_ns": time.time_ns(),
        "controller_log_file_path": None,
        "framework_versions": {},
        "run_settings": {},
    }
    try:
        from ray.train.v2._internal.logging.logging import (
            get_train_application_controller_log_path,
        )

        info["controller_log_file_path"] = get_train_application_controller_log_path()
    except Exception:  # Ray's logging layout changed: keep the rest
        logger.warning("wgstore: cannot find the controller's log path", exc_info=True)
    try:
        from ray.train.v2._internal.callbacks.state_manager import _get_framework_version

        framework = train_run_context.backend_config.framework
        info["framework_versions"] = dict(_get_framework_version(framework))
    except Exception:
        logger.warning("wgstore: cannot read the framework versions", exc_info=True)
    try:
        info["run_settings"] = _run_settings(train_run_context)
    except Exception:
        logger.warning("wgstore: cannot read Ray's run settings", exc_info=True)
    return translate.jsonable(info, depth=12)  # type: ignore[no-any-return]


def _run_settings(ctx: Any) -> dict[str, Any]:
    """Ray's ``RunSettings`` of the run, built as Ray's ``TrainStateManager`` builds it.

    The dataset names are not shown to a user callback: recorded as ``[]``.
    """
    from ray.train.v2._internal.state import schema
    from ray.train.v2._internal.state.util import construct_data_config

    run_config = ctx.run_config
    scaling = ctx.scaling_config
    backend = ctx.backend_config
    settings = schema.RunSettings(
        train_loop_config=ctx.train_loop_config,
        backend_config=schema.BackendConfig(framework=backend.framework, config=backend.to_dict()),
        scaling_config=schema.ScalingConfig(
            num_workers=scaling.num_workers,
            use_gpu=scaling.use_gpu,
            resources_per_worker=scaling.resources_per_worker,
            placement_strategy=scaling.placement_strategy,
            accelerator_type=scaling.accelerator_type,
            use_tpu=scaling.use_tpu,
            topology=scaling.topology,
            bundle_label_selector=scaling.label_selector,
        ),
        datasets=[],
        data_config=construct_data_config(ctx.dataset_config),
        run_config=schema.RunConfig(
            name=run_config.name,
            failure_config=schema.FailureConfig(
                max_failures=run_config.failure_config.max_failures,
                controller_failure_limit=run_config.failure_config.controller_failure_limit,
            ),
            worker_runtime_env=run_config.worker_runtime_env,
            checkpoint_config=schema.CheckpointConfig(
                num_to_keep=run_config.checkpoint_config.num_to_keep,
                checkpoint_score_attribute=run_config.checkpoint_config.checkpoint_score_attribute,
                checkpoint_score_order=run_config.checkpoint_config.checkpoint_score_order,
            ),
            storage_path=run_config.storage_path,
            storage_filesystem=run_config.storage_filesystem,
        ),
    )
    return dict(settings.model_dump(mode="json"))
