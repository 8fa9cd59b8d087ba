"""``GroupPolls``: the executor's running groups, their live worker handles, and their polls.

For each group it polls, the executor keeps the workers' handles (from the start, or found
again by name after a restart), a poller from the runtime and a
:class:`~wgstore.orchestration.polling.recorder.PollRecorder`. A poll turns the workers' statuses
into ``WorkerGroupPolled`` (only changes are stored; ids from group and poll sequence, so a
retried append is idempotent) and calls the ``after_worker_group_poll_status`` hooks. Thread-safe:
polls of different groups run on different threads; one group's polls never overlap (the
executor runs one item at a time per group).
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from wgstore.events import EventStore, Fence, NewEvent
from wgstore.events.streams import group_stream
from wgstore.orchestration.executor.commands import COMMAND_NAMESPACE
from wgstore.orchestration.polling.recorder import PollRecorder, cluster_lost
from wgstore.orchestration.runtimes.protocol import WorkerGroupRuntime, WorkerPoller
from wgstore.projections.state import (
    WorkerGroupPollStatus,
    WorkerGroupState,
    WorkerGroupStatus,
    WorkerStatus,
)

__all__ = ["GroupPolls", "poll_event_id"]

POLL_WAIT_S = 1.0
"""How long one poll waits for the workers' answers."""


def poll_event_id(group_id: str, poll_seq: int) -> uuid.UUID:
    """The id of the ``WorkerGroupPolled`` event of poll ``poll_seq`` of ``group_id``."""
    return uuid.uuid5(COMMAND_NAMESPACE, f"{group_id}:poll:{poll_seq}")


@dataclass
class _Attached:
    """A running group's live worker handles and poll bookkeeping."""

    workers: dict[int, Any]
    poller: WorkerPoller
    recorder: PollRecorder
    causation_id: str
    finished: bool = False
    lost: tuple[tuple[int, str], ...] = ()
    """Found again with none of its actors and no placement group (the cluster lost it): the
    (rank, actor name) of each worker the log has running, which the next poll records lost."""


class GroupPolls:
    """The groups an executor polls.

    Args:
        store: where polls are appended.
        runtime: makes the pollers and finds workers by name.
        executor_id: recorded in every poll's metadata.
        poll_hook: calls ``after_worker_group_poll_status(group_id, status)`` on the callbacks
            and returns the ``CallbackFailed`` events to record (None when there are none).
        fence: the fence of a group's appends (the executor's claim), or None for none.
    """

    def __init__(
        self,
        store: EventStore,
        runtime: WorkerGroupRuntime,
        *,
        executor_id: str,
        poll_hook: Callable[[str, WorkerGroupPollStatus], list[Any]] | None = None,
        fence: Callable[[str], Fence | None] = lambda _group_id: None,
    ) -> None:
        self.store = store
        self._fence = fence
        self.runtime = runtime
        self.executor_id = executor_id
        self._poll_hook = poll_hook
        self._attached: dict[str, _Attached] = {}
        self._lock = threading.Lock()

    def attach(
        self, state: WorkerGroupState, workers: Mapping[int, Any], causation_id: str
    ) -> None:
        """Keep a running group's worker handles (by world rank) for polling."""
        self._attach(state, dict(workers), causation_id)

    def _attach(
        self, state: WorkerGroupState, workers: dict[int, Any], causation_id: str
    ) -> _Attached:
        names = {info.world_rank: info.actor_name for info in state.workers}
        if state.poll_status is not None:
            known = dict(state.poll_status.worker_statuses)
        else:
            known = {rank: WorkerStatus(running=True) for rank in names}
        attached = _Attached(
            workers=workers,
            poller=self.runtime.poller(workers, names, state.context.health_check_timeout_s, known),
            recorder=PollRecorder(known, state.last_poll_seq),
            causation_id=causation_id,
        )
        # finished as the log has it, not as the poller found it: workers gone at a re-attach
        # (all of them, e.g. their node lost while no executor ran) are recorded by a first poll
        attached.finished = not any(status.running for status in known.values())
        with self._lock:
            self._attached[state.group_id] = attached
        return attached

    def _get(self, state: WorkerGroupState, causation_id: Callable[[], str]) -> _Attached:
        with self._lock:
            attached = self._attached.get(state.group_id)
        if attached is not None:
            return attached
        workers = self.runtime.find_workers(  # after a restart: found again by name
            {info.world_rank: info.actor_name for info in state.workers}
        )
        attached = self._attach(state, workers, causation_id())
        if not any(workers.values()) and state.group_id not in self.runtime.list_group_resources():
            known = state.poll_status.worker_statuses if state.poll_status is not None else {}
            attached.lost = tuple(
                (info.world_rank, info.actor_name)
                for info in state.workers
                if info.world_rank not in known or known[info.world_rank].running
            )
        return attached

    def detach(self, group_id: str) -> list[Any]:
        """Forget a group's handles (it is being released); returns them."""
        with self._lock:
            attached = self._attached.pop(group_id, None)
        return [h for h in attached.workers.values() if h is not None] if attached else []

    def poll(
        self,
        group_id: str,
        load: Callable[[], WorkerGroupState],
        causation_id: Callable[[], str],
    ) -> bool:
        """Poll a running group once and append what changed; True once every worker stopped.

        ``load`` reads the group's state (only when its handles are not kept yet: a group this
        executor did not start); ``causation_id`` is the id of its ``StartWorkerGroup``.
        """
        with self._lock:
            attached = self._attached.get(group_id)
        if attached is None:
            state = load()
            if state.status is not WorkerGroupStatus.RUNNING or not state.training_launched:
                return False
            attached = self._get(state, causation_id)
        if not attached.finished:
            metadata = {"causation_id": attached.causation_id, "executor_id": self.executor_id}
            events = self._poll_events(group_id, attached, metadata)
            if events:
                try:
                    self.store.append(group_stream(group_id), events, fence=self._fence(group_id))
                except Exception:
                    self.detach(group_id)  # rebuild the bookkeeping from the log next time
                    raise
        return attached.finished

    def final_events(
        self,
        state: WorkerGroupState,
        metadata: Mapping[str, Any],
        causation_id: Callable[[], str],
    ) -> list[NewEvent]:
        """The last poll before a shutdown (reports and changes) plus the trailing unchanged
        polls, as events carrying ``metadata`` (the shutdown's)."""
        if not state.training_launched:
            return []
        attached = self._get(state, causation_id)
        events: list[NewEvent] = []
        if not attached.finished:
            events = self._poll_events(state.group_id, attached, metadata)
        flushed = attached.recorder.flush()
        if flushed is not None:
            events.append(
                NewEvent(
                    flushed,
                    event_id=poll_event_id(state.group_id, flushed.poll_seq),
                    metadata=metadata,
                )
            )
        return events

    def _poll_events(
        self, group_id: str, attached: _Attached, metadata: Mapping[str, Any]
    ) -> list[NewEvent]:
        statuses = attached.poller.poll(POLL_WAIT_S)
        if attached.lost:  # every running worker went with its cluster: say so, not "gone"
            statuses = {
                **statuses,
                **{rank: WorkerStatus(running=False, error=cluster_lost(name))
                   for rank, name in attached.lost},
            }  # fmt: skip
            attached.lost = ()
        polled = attached.recorder.observe(statuses, datetime.now(UTC))
        events: list[NewEvent] = []
        if polled is not None:
            events.append(
                NewEvent(
                    polled, event_id=poll_event_id(group_id, polled.poll_seq), metadata=metadata
                )
            )
        if self._poll_hook is not None:
            status = WorkerGroupPollStatus(dict(sorted(statuses.items())))
            events += [NewEvent(f, metadata=metadata) for f in self._poll_hook(group_id, status)]
        attached.finished = attached.poller.finished
        return events
