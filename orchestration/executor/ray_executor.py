"""``RayExecutor``: follows the log, carries commands out on a cluster, appends what happened.

Three parts, as Ray Train v2 splits its controller:

- **the decisions**, a pure step over the log (:mod:`~wgstore.orchestration.executor.step`):
  which commands each event calls for, which are done already, which polls are due;
- **the cluster**, behind :class:`~wgstore.orchestration.runtimes.protocol.WorkerGroupRuntime`:
  :class:`~wgstore.orchestration.runtimes.ray_runtime.RayRuntime` (the default) or the in-memory
  :class:`~wgstore.orchestration.runtimes.fake_runtime.FakeRuntime`;
- **this runner**: one loop thread reads the log in order (``read_all(after=position)``, woken
  by the store's notifier) and feeds the step; commands (:mod:`~wgstore.orchestration.executor.handlers`)
  and polls run on worker threads (at most ``max_threads`` busy), one at a time per group, so a
  slow start never delays another group's polls, and a poll never races its group's shutdown.

Restartable: on start it reads the whole log (``catch-up``), re-derives every command, and skips
those an event already names as ``causation_id``; a start left half-done by a dead executor
derives ``ReleaseResources``. Running groups are re-attached by actor name and polled on. With
``release_orphans``, ``wgstore-*`` resources that no live group of this store owns are released.
Run one executor per store (or one per run, with ``run_ids``).

Metadata of what it appends: ``causation_id`` (the command's id; polls carry the id of the
``StartWorkerGroup`` that launched the training they observe), ``command`` (the command's type,
on command results) and ``executor_id``. Event ids are derived too (from the command id, or from
group and poll sequence), so a retried append is idempotent. Reports do not pass through the
executor: each worker appends its own ``WorkerReported`` (id from group, rank and report index;
metadata ``causation_id`` of the start, ``source: worker``), so ``report()`` is durable.

Read models: after it appends, and at most every ``read_models_interval_s``, the loop brings the
SQL read models up to date (:func:`~wgstore.projections.catch_up_read_models`), so groups run
through the Python API show in plain SQL without a manual step.
"""

from __future__ import annotations

import atexit
import logging
import os
import threading
import time
import traceback
import uuid
from collections import deque
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import wgstore
from wgstore.events import EventStore, Fence, FencedError, NewEvent, RecordedEvent
from wgstore.events.notifier import POSTGRES_POLL_S, SQLITE_POLL_S
from wgstore.events.stored_names import type_name
from wgstore.events.streams import GROUP_STREAM_PREFIX, group_id_of, group_stream
from wgstore.events.worker_group import (
    WorkerGroupShutDown,
    WorkerGroupStartFailed,
    WorkerGroupStartRequested,
)
from wgstore.orchestration.builder import BuiltGroup
from wgstore.orchestration.callbacks import WorkerGroupCallback
from wgstore.orchestration.executor import step
from wgstore.orchestration.executor.commands import (
    Command,
    StartWorkerGroup,
    command_id_for,
)
from wgstore.orchestration.executor.group_polls import GroupPolls
from wgstore.orchestration.executor.handlers import COMMAND_HANDLERS
from wgstore.orchestration.executor.poll_times import PollTimes
from wgstore.orchestration.leases.claims import CLAIM_S, GroupClaims
from wgstore.orchestration.runtimes.protocol import WorkerGroupRuntime
from wgstore.projections import StreamNotFoundError
from wgstore.projections.state import (
    WorkerGroupPollStatus,
    WorkerGroupState,
    evolve,
)

__all__ = ["RayExecutor", "run_executor"]

log = logging.getLogger("wgstore.executor")

_POLL = object()
_ENDED = frozenset({type_name(WorkerGroupShutDown), type_name(WorkerGroupStartFailed)})
_REQUESTED = type_name(WorkerGroupStartRequested)  # the event that opens a group's book


@dataclass
class _Lane:
    """One group's work queue: commands and polls, carried out one at a time."""

    queue: deque[Any] = field(default_factory=deque)
    busy: bool = False


class RayExecutor:
    """Carries out the commands the log calls for, on a cluster, and records what happened.

    Args:
        store: the event store to follow and append to.
        runtime: the cluster (:class:`~wgstore.orchestration.runtimes.protocol.WorkerGroupRuntime`);
            ``None`` for :class:`~wgstore.orchestration.runtimes.ray_runtime.RayRuntime` on the Ray
            cluster of this process (``RAY_ADDRESS``, or a local instance).
        group_ids: only these groups (an in-process executor made by ``WorkerGroup.create``);
            ``None`` for every group in the store.
        run_ids: only groups whose ``WorkerGroupStartRequested.run_id`` is one of these (a run
            controller's executor; the groups appear over time); ``None`` for any run.
        from_position: start reading after this position instead of catching up from 0 (only
            sensible with ``group_ids`` naming groups not yet requested).
        release_orphans: release ``wgstore-*`` resources that no live group owns, at start and
            every ``sweep_interval_s``. Resources of groups this store has never seen count as
            orphans too (unless a scope rules them out), so share a Ray cluster between stores
            only with this off.
        max_threads: commands and polls run on this many threads (one at a time per group).
        actor_timeout_s: how long actor calls during a start may take.
        extra_sys_path: folders workers add to ``sys.path`` before importing the train function
            (default: this process's working folder), e.g. so ``examples.train`` imports.
        read_models_interval_s: bring the SQL read models up to date at most this often while
            the log grows, and once more when the executor stops; ``None`` leaves them alone.
        callbacks: ``WorkerGroupCallback`` hooks, called in Ray Train's order.
        claim_s: how long this executor's claim of a group lasts unless renewed (see
            :mod:`~wgstore.orchestration.leases.claims`): how soon another executor takes over the
            groups of one that died.

    Several executors may follow one store: each group is served by the one that claims it,
    and every event an executor appends for a group carries its claim as the fence.
    """

    def __init__(
        self,
        store: EventStore,
        *,
        runtime: WorkerGroupRuntime | None = None,
        group_ids: Collection[str] | None = None,
        run_ids: Collection[str] | None = None,
        from_position: int = 0,
        release_orphans: bool = False,
        sweep_interval_s: float = 60.0,
        max_threads: int = 4,
        actor_timeout_s: float = 120.0,
        extra_sys_path: Iterable[str] | None = None,
        read_models_interval_s: float | None = 2.0,
        callbacks: Sequence[WorkerGroupCallback] = (),
        claim_s: float = CLAIM_S,
    ) -> None:
        if isinstance(group_ids, str) or isinstance(run_ids, str):
            raise TypeError(
                "group_ids and run_ids take a collection of ids, e.g. run_ids={'r1'}, not a str"
            )
        self.store = store
        if runtime is None:
            from wgstore.orchestration.runtimes.ray_runtime import RayRuntime

            runtime = RayRuntime()
        self.runtime: WorkerGroupRuntime = runtime
        """The cluster commands are carried out on."""
        self.callbacks: tuple[WorkerGroupCallback, ...] = tuple(callbacks)
        """``WorkerGroupCallback`` hooks, called in Ray Train's order (see ``callbacks``)."""
        self.executor_id = uuid.uuid4().hex
        self.claims = GroupClaims(store, self.executor_id, claim_s)
        """The groups this executor serves (fenced leases)."""
        self.actor_timeout_s = actor_timeout_s
        self.extra_sys_path: tuple[str, ...] = tuple(
            extra_sys_path if extra_sys_path is not None else (os.getcwd(),)
        )
        self.release_orphans = release_orphans
        self.sweep_interval_s = sweep_interval_s
        self._scope = step.Scope.of(group_ids, run_ids)
        self._position = from_position
        self._books: dict[str, step.GroupBook] = {}
        self._poll_times = PollTimes()  # which books a turn looks at (changed, or due)
        self._lanes: dict[str, _Lane] = {}
        self._polls = GroupPolls(
            store,
            self.runtime,
            executor_id=self.executor_id,
            poll_hook=self._poll_hook if self.callbacks else None,
            fence=self.fence,
        )
        self._lock = threading.RLock()
        self._slots = threading.BoundedSemaphore(max_threads)
        self._drainers: set[threading.Thread] = set()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._caught_up = threading.Event()
        self._catching_up = False
        self._next_sweep = 0.0
        self.errors: list[str] = []
        """Tracebacks of handler failures (also logged)."""
        self.read_models_interval_s = read_models_interval_s
        self._read_models_at = -1  # the log head the read models were last brought up to
        self._read_models_due = 0.0
        self._read_models_thread: threading.Thread | None = None

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> RayExecutor:
        """Run the loop in a background thread (connecting to the cluster if needed); returns self."""
        if self._thread is not None:
            return self
        self.runtime.connect()
        self._thread = threading.Thread(
            target=self._run_loop, name=f"wgstore-executor-{self.executor_id[:8]}", daemon=True
        )
        self._thread.start()
        atexit.register(self.stop)
        return self

    @property
    def running(self) -> bool:
        """True while the loop thread runs."""
        return self._thread is not None and self._thread.is_alive()

    def wait_caught_up(self, timeout_s: float = 60.0) -> bool:
        """Block until the catch-up read of the log is done."""
        return self._caught_up.wait(timeout_s)

    def wait_idle(self, timeout_s: float = 60.0) -> bool:
        """Block until caught up with no command or poll queued or running; False on timeout.

        Only a moment's idleness: a new event in the log can give the executor work again.
        """
        deadline = time.monotonic() + timeout_s
        if not self._caught_up.wait(timeout_s):
            return False
        while True:
            with self._lock:
                busy = bool(self._drainers) or any(lane.busy for lane in self._lanes.values())
            if not busy:
                return True
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return False
            self._join_drainers(remaining)

    def stop(self, timeout_s: float = 60.0) -> None:
        """Stop the loop; a command in progress finishes, queued ones are left to the next executor."""
        self._stop.set()
        self.store.wake_waiters()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout_s)
        self._join_drainers(timeout_s)
        self.claims.close()
        self._final_read_models(timeout_s)
        atexit.unregister(self.stop)

    # ------------------------------------------------------------------ read models

    def _maybe_catch_up_read_models(self) -> None:
        """Start a read-model catch-up in the background if the log grew and one is due."""
        if self.read_models_interval_s is None or self._position == self._read_models_at:
            return
        now = time.monotonic()
        if now < self._read_models_due:
            return
        thread = self._read_models_thread
        if thread is not None and thread.is_alive():
            return
        self._read_models_due = now + self.read_models_interval_s
        self._read_models_at = self._position
        self._read_models_thread = threading.Thread(
            target=self._catch_up_read_models, name="wgstore-read-models", daemon=True
        )
        self._read_models_thread.start()

    def _catch_up_read_models(self) -> None:
        from wgstore.projections.projector import catch_up_read_models

        try:
            catch_up_read_models(self.store)
        except Exception:
            log.warning("wgstore executor: read models not caught up", exc_info=True)

    def _final_read_models(self, timeout_s: float) -> None:
        if self.read_models_interval_s is None:
            return
        thread = self._read_models_thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout_s)
        try:
            head = self.store.head()
        except Exception:  # noqa: BLE001 - the store was closed first: nothing to do
            return
        if head != self._read_models_at:
            self._read_models_at = head
            self._catch_up_read_models()

    def _join_drainers(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        with self._lock:
            drainers = list(self._drainers)
        for thread in drainers:
            if thread is not threading.current_thread():
                thread.join(max(0.0, deadline - time.monotonic()))

    def run(self, stop_event: threading.Event | None = None) -> None:
        """Run the loop in this thread until ``stop_event`` (or :meth:`stop`) is set."""
        self.runtime.connect()
        if stop_event is not None:

            def relay() -> None:
                stop_event.wait()
                self._stop.set()
                self.store.wake_waiters()

            threading.Thread(target=relay, daemon=True).start()
        try:
            self._run_loop()
        finally:
            self._join_drainers(60.0)
            self.claims.close()
            self._final_read_models(60.0)

    def __enter__(self) -> RayExecutor:
        return self.start()

    def __exit__(self, *_exc: object) -> None:
        self.stop()

    # ------------------------------------------------------------------ services for handlers
    # (handlers.HandlerServices: the part of the executor a handler may use)

    def fence(self, group_id: str) -> Fence | None:
        """This executor's claim of ``group_id``, the fence of every append for it."""
        return self.claims.fence(group_id)

    def metadata(self, command: Command) -> dict[str, Any]:
        """Metadata of every event appended for ``command``."""
        return {
            "causation_id": str(command.command_id),
            "command": type(command).__name__,
            "executor_id": self.executor_id,
        }

    def load(self, group_id: str) -> tuple[WorkerGroupState, Callable[[Command], bool]]:
        """The group's latest state, read afresh, and a test of whether a command is done.

        Raises:
            StreamNotFoundError: the group's stream has no events.
            ProjectionError: its events do not fold.
        """
        state: WorkerGroupState | None = None
        causations: set[str] = set()
        for record in self.store.read_stream(group_stream(group_id)):
            state = evolve(state, record)
            cause = record.metadata.get("causation_id")
            if cause:
                causations.add(str(cause))
        if state is None:
            raise StreamNotFoundError(f"group {group_id} has no events: its stream does not exist")
        return state, lambda command: str(command.command_id) in causations

    def attach(self, built: BuiltGroup, state: WorkerGroupState) -> None:
        """Keep a freshly started group's handles for polling."""
        self._polls.attach(state, dict(enumerate(built.workers)), self._start_causation(state))

    def detach(self, state: WorkerGroupState) -> list[Any]:
        """Forget a group's handles (it is being released); returns them."""
        return self._polls.detach(state.group_id)

    def final_poll_events(self, state: WorkerGroupState, command: Command) -> list[NewEvent]:
        """The last poll before a shutdown (reports and changes) plus the trailing unchanged polls."""
        return self._polls.final_events(
            state, self.metadata(command), lambda: self._start_causation(state)
        )

    def _start_causation(self, state: WorkerGroupState) -> str:
        with self._lock:
            book = self._books.get(state.group_id)
        if book is not None and book.start_causation is not None:
            return book.start_causation
        first = next(iter(self.store.read_stream(state.stream_id, 1, 1)))
        return str(command_id_for("StartWorkerGroup", first.event_id))

    def invoke(self, hook: str, *args: Any) -> list[Any]:
        """Call ``hook`` on every callback; returns the ``CallbackFailed`` events to record."""
        if not self.callbacks:
            return []
        from wgstore.orchestration.callbacks import invoke_callbacks

        failures: list[Any] = invoke_callbacks(self.callbacks, hook, *args)
        return failures

    def record_callback_failures(
        self, group_id: str, failures: Sequence[Any], metadata: Mapping[str, Any]
    ) -> None:
        """Append ``CallbackFailed`` events (any version: they change no lifecycle)."""
        if failures:
            self.store.append(
                group_stream(group_id),
                [NewEvent(f, metadata=metadata) for f in failures],
                fence=self.fence(group_id),
            )

    def _poll_hook(self, group_id: str, status: WorkerGroupPollStatus) -> list[Any]:
        return self.invoke("after_worker_group_poll_status", group_id, status)

    def _poll_group(self, group_id: str) -> None:
        def load() -> WorkerGroupState:
            return self.load(group_id)[0]

        def causation_id() -> str:
            return self._start_causation(load())

        if self._polls.poll(group_id, load, causation_id):
            self._update(group_id, step.polls_done)

    # ------------------------------------------------------------------ the loop

    def _update(self, group_id: str, change: Callable[[step.GroupBook], step.GroupBook]) -> None:
        with self._lock:
            book = self._books.get(group_id)
            if book is not None:
                self._books[group_id] = change(book)
                self._poll_times.changed(group_id)

    def _run_loop(self) -> None:
        try:
            self._catch_up()
        finally:
            self._caught_up.set()
        # A wake by the notifier (an append through this store object; on Postgres, any
        # process's) costs one read of what is new, not a read of the head first and then of
        # the events (EventStore.wait_for_new): the generation is taken before the read, so an
        # append during it wakes the next wait at once. Between wakes the loop looks at the head
        # every poll_s (SQLite has no notifications between processes; a Postgres listener may
        # be reconnecting), which costs less than a read that finds nothing. The rest of a turn
        # (polls, the read models, the orphan sweep) runs after a read and when due (at most
        # next_wake_s's 0.5 s apart).
        notifier = self.store.notifier
        poll_s = POSTGRES_POLL_S if self.store.is_postgres else SQLITE_POLL_S
        generation = notifier.generation
        due = time.monotonic()
        while not self._stop.is_set():
            try:
                notifier.ensure_listening()  # (again, if its thread ended)
                now = time.monotonic()
                due = min(due, now + self._wait_s())  # a poll may have fallen due sooner
                woken = notifier.wait_for_wake(generation, min(due - now, poll_s)) != generation
                if self._stop.is_set():
                    break
                generation = notifier.generation
                if woken or self.store.head() > self._position:
                    self._read_new()
                elif time.monotonic() < due:
                    continue
                self._schedule_polls()
                self._maybe_catch_up_read_models()
                if self.release_orphans and time.monotonic() >= self._next_sweep:
                    self.sweep_orphans()
                due = time.monotonic() + self._wait_s()
            except Exception:  # noqa: BLE001 - the loop survives a bad moment of the store
                self._record_error("executor loop")
                self._stop.wait(1.0)

    def _wait_s(self) -> float:
        with self._lock:
            return self._poll_times.next_wake_s(self._books, time.monotonic())

    def _catch_up(self) -> None:
        self._catching_up = True
        try:
            if self._position == 0 and self._scope.group_ids is None:
                self._catch_up_by_stream()
            self._read_new()
        finally:
            self._catching_up = False
        with self._lock:
            group_ids = list(self._books)
        for group_id in group_ids:
            with self._lock:
                book, commands = step.finish_catch_up(self._books[group_id])
                self._books[group_id] = book
                self._poll_times.changed(group_id)
            for command in commands:
                self._enqueue(group_id, command)
        if self.release_orphans:
            self.sweep_orphans()

    def _catch_up_by_stream(self) -> None:
        """Fold only the streams of groups not yet ended: a long log of finished groups (their
        polls and reports) costs one read of each stream's last event, not a read of it all."""
        head = self.store.head()
        for stream_id, version in self.store.streams(GROUP_STREAM_PREFIX):
            last = next(iter(self.store.read_stream(stream_id, version, version)), None)
            if last is None or last.type in _ENDED:
                continue
            for record in self.store.read_stream(stream_id):
                self._apply(record)
        self._position = head  # events past head come through read_all; _apply skips repeats

    def _read_new(self) -> None:
        """Read and apply what is new. Only the events that can concern this executor are
        decoded: those of the groups it has a book for, and requests that may open a book (with
        several executors on a store, or a run's executor, most events are others' reports)."""
        last_row = self._position

        def concerns(position: int, stream_id: str, type_: str) -> bool:
            nonlocal last_row
            last_row = position
            group_id = group_id_of(stream_id)
            return group_id is not None and (group_id in self._books or type_ == _REQUESTED)

        for record in self.store.read_all(after=self._position, keep=concerns):
            self._position = record.position
            self._apply(record)
        self._position = max(self._position, last_row)  # past what it skipped after the last

    def _apply(self, record: RecordedEvent) -> None:
        group_id = group_id_of(record.stream_id)
        assert group_id is not None  # _read_new and _catch_up_by_stream read groups' streams
        with self._lock:
            book = self._books.get(group_id)
            applied = step.apply_event(
                book, record, scope=self._scope, catching_up=self._catching_up
            )
            if applied.book is not None and applied.book is not book:
                self._books[group_id] = applied.book
                self._poll_times.changed(group_id)
        if record.type in _ENDED and self.claims.holds(group_id):
            self.claims.release(group_id)
        if applied.error is not None:
            self._record_error(applied.error, tb=False)
        for command in applied.commands:
            self._enqueue(group_id, command)

    def _enqueue(self, group_id: str, item: Any) -> None:
        with self._lock:
            lane = self._lanes.setdefault(group_id, _Lane())
            lane.queue.append(item)
            if lane.busy:
                return
            lane.busy = True
            # plain threads, not a ThreadPoolExecutor: those refuse work once the interpreter
            # is exiting, and a shutdown at exit must still run
            thread = threading.Thread(
                target=self._drain, args=(group_id, lane), name=f"wgstore-{group_id}", daemon=True
            )
            self._drainers.add(thread)
            thread.start()  # under the lock: wait_idle never sees a drainer not yet started

    def _drain(self, group_id: str, lane: _Lane) -> None:
        while True:
            with self._lock:
                if self._stop.is_set():
                    lane.queue.clear()  # a restarted executor derives them again
                if not lane.queue:
                    lane.busy = False
                    self._drainers.discard(threading.current_thread())
                    return
                item = lane.queue.popleft()
                if item is _POLL:
                    self._update(group_id, step.poll_taken)
            try:
                if self.claims.fence(group_id) is None:
                    log.debug("group %s is served by another executor: skipped", group_id)
                    if item is not _POLL:  # polls come again by themselves; a command would not
                        self._retry_later(group_id, item)
                    continue
                with self._slots:
                    if item is _POLL:
                        self._poll_group(group_id)
                    else:
                        COMMAND_HANDLERS[type(item)](item, self)
            except FencedError as error:  # another executor took the group over
                log.warning(
                    "executor %s stops serving group %s: %s", self.executor_id, group_id, error
                )
                self.claims.lost(group_id)
                self._polls.detach(group_id)  # its workers are the new holder's now
            except Exception:  # noqa: BLE001 - one failed command must not stop the executor
                what = "poll" if item is _POLL else type(item).__name__
                self._record_error(f"{what} of group {group_id}")
                if isinstance(item, StartWorkerGroup):
                    self._update(group_id, step.start_failed)

    def _retry_later(self, group_id: str, command: Any) -> None:
        """Queue ``command`` again once another executor's claim of the group may have lapsed
        (its holder died: its claim expires): the handler then finds it done, or not needed any
        more, if that executor carried it out meanwhile."""

        def again() -> None:
            with self._lock:
                book = self._books.get(group_id)
            live = book is not None and not (book.state is not None and book.state.is_terminal)
            if live and not self._stop.is_set():
                self._enqueue(group_id, command)

        timer = threading.Timer(self.claims.claim_s / 3, again)
        timer.daemon = True
        timer.start()

    def _schedule_polls(self) -> None:
        with self._lock:
            schedule = self._poll_times.schedule(self._books, time.monotonic())
            self._books.update(schedule.books)
            for group_id in schedule.ended:
                lane = self._lanes.get(group_id)
                if lane is None or not lane.busy:
                    del self._books[group_id]
                    self._lanes.pop(group_id, None)
                self._poll_times.changed(group_id)  # dropped, or looked at again next turn
        for group_id in schedule.due:
            self._enqueue(group_id, _POLL)

    def sweep_orphans(self) -> list[str]:
        """Release ``wgstore-*`` resources of groups this store does not have alive.

        Resources are listed first and the log read after, so a group requested in between
        is seen as alive. With a scope, only groups in it are released (by ``run_ids``: groups
        whose ``WorkerGroupStartRequested`` names one of the runs). Returns what was released.
        """
        self._next_sweep = time.monotonic() + self.sweep_interval_s
        found = self.runtime.list_group_resources()
        if not found:
            return []
        self._read_new()
        released: list[str] = []
        for group_id in found:
            if not self._in_scope(group_id):
                continue
            with self._lock:
                book = self._books.get(group_id)
                lane = self._lanes.get(group_id)
            if book is not None and book.state is not None and not book.state.is_terminal:
                continue
            if lane is not None and lane.busy:
                continue
            released.extend(self.runtime.release_group(group_id))
        if released:
            log.warning("released %d orphaned resource(s): %s", len(released), released)
        return released

    def _in_scope(self, group_id: str) -> bool:
        """Whether the sweep may release ``group_id``'s resources."""
        if self._scope.everything:
            return True
        if not self._scope.admits_group_id(group_id):
            return False
        if self._scope.run_ids is None:
            return True
        first = next(iter(self.store.read_stream(group_stream(group_id), 1, 1)), None)
        event = None if first is None else first.event
        return isinstance(event, WorkerGroupStartRequested) and self._scope.admits(event)

    def _record_error(self, what: str, *, tb: bool = True) -> None:
        text = f"{what}: {traceback.format_exc()}" if tb else what
        self.errors.append(text)
        log.error("wgstore executor: %s", text)


def run_executor(
    url: str,
    stop_event: threading.Event,
    *,
    ray_address: str | None = None,
    release_orphans: bool = True,
    runtime: WorkerGroupRuntime | None = None,
) -> None:
    """Run a standalone executor on the store at ``url`` until ``stop_event`` is set.

    Connects to Ray (``ray_address``, else ``RAY_ADDRESS``, else a local instance), catches up
    with the log, re-attaches to running groups, releases orphaned ``wgstore-*`` resources,
    then follows the log. This is what ``wgstore executor --url URL`` runs. ``runtime`` replaces
    ``RayRuntime(address=ray_address)`` (e.g. one whose actors inject faults, in tests).
    """
    if runtime is None:
        from wgstore.orchestration.runtimes.ray_runtime import RayRuntime

        runtime = RayRuntime(address=ray_address)
    elif ray_address is not None:
        raise ValueError("give ray_address or runtime, not both: a runtime has its own address")
    runtime.connect()
    log.info("wgstore %s executor on %s", wgstore.__version__, url)
    with EventStore.open(url) as store:
        RayExecutor(store, runtime=runtime, release_orphans=release_orphans).run(stop_event)
