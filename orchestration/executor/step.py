"""The executor's decisions, as a pure step over the log. No I/O, no clock, no Ray, no threads.

The executor keeps one :class:`GroupBook` per worker group it serves. For each recorded event
it calls :func:`apply_event`, which returns the new book and the commands to carry out; for
polls it calls :func:`schedule_polls` with a monotonic ``now`` it read itself (through
:class:`~wgstore.orchestration.executor.poll_times.PollTimes`, which hands it only the books that changed
or fell due). The thread that
carries a command or a poll out reports back through :func:`start_failed`,
:func:`poll_taken` and :func:`polls_done`. Everything here is a function of its arguments, so the
rules are tested event by event without a store, a cluster or a clock
(``tests/orchestration/test_executor_step.py``).

Decisions worth knowing:

- **Scope.** A group is served when :class:`Scope` admits it: by group id, or by the ``run_id``
  of its ``WorkerGroupStartRequested`` (groups of a run appear over time). A group whose first
  event this executor did not read is never served: it cannot know what was asked.
- **Done commands.** A command is skipped when an event names it as ``causation_id`` (done by
  an earlier executor), when this executor dispatched it already (``seen_commands``), or when
  the latest state no longer needs it (:func:`~wgstore.orchestration.executor.commands.command_needed`).
- **Start in flight.** While this executor's own start of a group runs, the builder steps it
  appends derive ``ReleaseResources`` (a half-done start); those are ignored: the start
  releases on failure itself. The flag clears when the start's own ``TrainingLaunched``,
  ``WorkerGroupStartFailed`` or ``WorkerGroupShutDown`` is read, or its handler raised.
- **Catch-up.** While catching up, commands are held (``pending``) and dispatched once the log
  is read (:func:`finish_catch_up`): of several ``ReleaseResources`` only the latest counts,
  since only the latest builder step says which stage never completed.
- **Broken streams.** A stream the fold refuses marks the group ``broken``: it gets no further
  commands or polls, and the error is reported once.
- **Polls.** A group is polled while it is ``RUNNING`` with training launched, its last poll
  did not see every worker stopped, and its poller has not finished; at most one poll is queued
  per group, the next one due ``poll_interval_s`` after the last was scheduled.
"""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass

from wgstore.events.records import RecordedEvent
from wgstore.events.streams import group_id_of
from wgstore.events.worker_group import (
    TrainingLaunched,
    WorkerGroupShutDown,
    WorkerGroupStartFailed,
    WorkerGroupStartRequested,
)
from wgstore.orchestration.executor.commands import (
    Command,
    ReleaseResources,
    StartWorkerGroup,
    command_id_for,
    command_needed,
    derive_commands,
)
from wgstore.projections import ProjectionError
from wgstore.projections.event_time import RAY_SOURCES
from wgstore.projections.state import WorkerGroupState, WorkerGroupStatus, evolve

__all__ = [
    "Applied",
    "GroupBook",
    "PollSchedule",
    "Scope",
    "apply_event",
    "dispatch",
    "finish_catch_up",
    "next_wake_s",
    "poll_taken",
    "pollable",
    "polls_done",
    "schedule_polls",
    "start_failed",
]

_START_ENDS = (TrainingLaunched, WorkerGroupStartFailed, WorkerGroupShutDown)


@dataclass(frozen=True, slots=True)
class Scope:
    """Which groups an executor serves: every group, or those named, or those of the runs named.

    Both given: a group must pass both.
    """

    group_ids: frozenset[str] | None = None
    run_ids: frozenset[str] | None = None

    @classmethod
    def of(
        cls, group_ids: Collection[str] | None = None, run_ids: Collection[str] | None = None
    ) -> Scope:
        """A scope from any collections (``None``: no limit)."""
        return cls(
            None if group_ids is None else frozenset(group_ids),
            None if run_ids is None else frozenset(run_ids),
        )

    @property
    def everything(self) -> bool:
        """True when every group is served."""
        return self.group_ids is None and self.run_ids is None

    def admits_group_id(self, group_id: str) -> bool:
        """Whether the group id alone does not rule the group out."""
        return self.group_ids is None or group_id in self.group_ids

    def admits(self, requested: WorkerGroupStartRequested) -> bool:
        """Whether the group this request starts is served."""
        return self.admits_group_id(requested.group_id) and (
            self.run_ids is None or requested.run_id in self.run_ids
        )


@dataclass(frozen=True, slots=True)
class GroupBook:
    """What the executor knows about one group it serves (immutable; steps return new ones)."""

    group_id: str
    run_id: str = ""
    state: WorkerGroupState | None = None
    start_command_id: uuid.UUID | None = None
    causations: frozenset[str] = frozenset()
    """Every ``causation_id`` the group's events carry: the commands already done."""
    seen_commands: frozenset[uuid.UUID] = frozenset()
    """Commands this executor dispatched."""
    pending: tuple[Command, ...] = ()
    """Commands derived during catch-up, dispatched by :func:`finish_catch_up`."""
    start_in_flight: bool = False
    broken: bool = False
    polls_finished: bool = False
    poll_queued: bool = False
    next_poll_at: float = 0.0

    @property
    def start_causation(self) -> str | None:
        """The id of the group's ``StartWorkerGroup`` (what polls name as their cause)."""
        return None if self.start_command_id is None else str(self.start_command_id)


@dataclass(frozen=True, slots=True)
class Applied:
    """The result of one event: the group's book (None: not served), commands, an error."""

    book: GroupBook | None
    commands: tuple[Command, ...] = ()
    error: str | None = None


def apply_event(
    book: GroupBook | None, record: RecordedEvent, *, scope: Scope, catching_up: bool
) -> Applied:
    """Fold one event of a group's stream into its book; the commands it calls for.

    Args:
        book: the group's book, or None if the executor has none yet.
        record: an event of the group's stream (other streams return ``Applied(book)``).
        scope: the groups this executor serves.
        catching_up: hold the commands in ``pending`` instead of returning them.
    """
    group_id = group_id_of(record.stream_id)
    if group_id is None or not scope.admits_group_id(group_id):
        return Applied(book)
    if book is None:
        event = record.event
        if not isinstance(event, WorkerGroupStartRequested) or not scope.admits(event):
            return Applied(None)  # a group whose beginning this executor never read, or not ours
        if record.metadata.get("source") in RAY_SOURCES:
            return Applied(None)  # recorded from Ray Train: Ray's controller runs it, not us
        book = GroupBook(group_id, run_id=event.run_id)
    if book.broken:
        return Applied(book)
    if book.state is not None and record.version <= book.state.version:
        return Applied(book)  # folded already (read by stream during catch-up)
    try:
        state = evolve(book.state, record)
    except ProjectionError as error:
        return Applied(
            dataclasses.replace(book, broken=True),
            error=f"group {group_id} is not a valid stream: {error}",
        )
    changes: dict[str, object] = {"state": state}
    cause = record.metadata.get("causation_id")
    if cause and str(cause) not in book.causations:
        changes["causations"] = book.causations | {str(cause)}
    start_command_id = book.start_command_id
    if isinstance(record.event, WorkerGroupStartRequested):
        start_command_id = changes["start_command_id"] = command_id_for(
            "StartWorkerGroup", record.event_id
        )
    if isinstance(record.event, _START_ENDS) and cause == str(start_command_id):
        changes["start_in_flight"] = False
    book = dataclasses.replace(book, **changes)  # type: ignore[arg-type]
    commands = derive_commands(record, state)
    if catching_up:
        if commands:
            book = dataclasses.replace(book, pending=(*book.pending, *commands))
        return Applied(book)
    book, chosen = _dispatch_all(book, commands)
    return Applied(book, chosen)


def dispatch(book: GroupBook, command: Command) -> tuple[GroupBook, bool]:
    """Whether to carry ``command`` out now (and the book that remembers it was)."""
    if command.command_id in book.seen_commands:
        return book, False
    if str(command.command_id) in book.causations:
        return book, False  # done already: an event names it as its cause
    if book.state is None or not command_needed(command, book.state):
        return book, False
    if isinstance(command, ReleaseResources) and book.start_in_flight:
        return book, False  # the start is ours and alive: it releases on failure itself
    return (
        dataclasses.replace(
            book,
            seen_commands=book.seen_commands | {command.command_id},
            start_in_flight=book.start_in_flight or isinstance(command, StartWorkerGroup),
        ),
        True,
    )


def _dispatch_all(
    book: GroupBook, commands: Iterable[Command]
) -> tuple[GroupBook, tuple[Command, ...]]:
    chosen: list[Command] = []
    for command in commands:
        book, go = dispatch(book, command)
        if go:
            chosen.append(command)
    return book, tuple(chosen)


def finish_catch_up(book: GroupBook) -> tuple[GroupBook, tuple[Command, ...]]:
    """Dispatch what catch-up held: every command in order, of ``ReleaseResources`` the latest."""
    pending = list(book.pending)
    book = dataclasses.replace(book, pending=())
    releases = [c for c in pending if isinstance(c, ReleaseResources)]
    if releases:  # only the latest builder step says which stage never completed
        pending = [c for c in pending if not isinstance(c, ReleaseResources)]
        pending.append(releases[-1])
    return _dispatch_all(book, pending)


def start_failed(book: GroupBook) -> GroupBook:
    """The start's handler raised: no start is in flight any more (a release may run)."""
    return dataclasses.replace(book, start_in_flight=False)


def poll_taken(book: GroupBook) -> GroupBook:
    """The queued poll was taken off the queue: another may be scheduled."""
    return dataclasses.replace(book, poll_queued=False)


def polls_done(book: GroupBook) -> GroupBook:
    """Every worker stopped: the group is not polled again (its shutdown polls once more)."""
    return dataclasses.replace(book, polls_finished=True)


def pollable(book: GroupBook) -> bool:
    """Whether the group is one to poll (running, launched, not every worker stopped)."""
    state = book.state
    return (
        state is not None
        and not book.broken
        and not book.polls_finished
        and state.status is WorkerGroupStatus.RUNNING
        and state.training_launched
        and not (state.poll_status is not None and state.poll_status.finished)
    )


@dataclass(frozen=True, slots=True)
class PollSchedule:
    """What :func:`schedule_polls` decided: changed books, groups to poll now, groups ended."""

    books: dict[str, GroupBook]
    due: tuple[str, ...]
    ended: tuple[str, ...]


def schedule_polls(books: Mapping[str, GroupBook], now: float) -> PollSchedule:
    """The groups whose poll is due at ``now`` (marked queued, next one an interval later),
    and the groups that ended (the executor forgets them once nothing of theirs runs)."""
    changed: dict[str, GroupBook] = {}
    due: list[str] = []
    ended: list[str] = []
    for group_id, book in books.items():
        if book.state is not None and book.state.is_terminal:
            ended.append(group_id)
            continue
        if not pollable(book) or book.poll_queued or now < book.next_poll_at:
            continue
        assert book.state is not None
        changed[group_id] = dataclasses.replace(
            book, next_poll_at=now + book.state.context.poll_interval_s, poll_queued=True
        )
        due.append(group_id)
    return PollSchedule(changed, tuple(due), tuple(ended))


def next_wake_s(
    books: Iterable[GroupBook], now: float, *, longest_s: float = 0.5, shortest_s: float = 0.005
) -> float:
    """How long the loop may wait for new events before a poll falls due.

    A group whose poll is still queued or running counts too while its next poll lies ahead:
    the poll usually finishes well within the interval, and nothing else wakes the loop for the
    next one when that poll appends nothing (the common, unchanged case).
    """
    due = [
        b.next_poll_at - now
        for b in books
        if pollable(b) and (not b.poll_queued or b.next_poll_at > now)
    ]
    return max(shortest_s, min([longest_s, *due]))
