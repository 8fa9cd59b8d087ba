"""``GroupPolls`` on its own, against ``FakeRuntime`` and a real store (no Ray, no executor).

A group is started as the start handler does (the builder's events, the fake's actors), so the
tests see what the executor's polls, its shutdown's last poll and its release are handed: the
poll history accounts for every poll the runtime made, a re-attached group keeps its poll
bookkeeping, and a release gets the live handles.
"""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from wgstore.events import EventStore, Fence, FencedError, NewEvent
from wgstore.events.streams import group_stream
from wgstore.events.worker_group import (
    CallbackFailed,
    ErrorInfo,
    WorkerGroupContext,
    WorkerGroupPolled,
    WorkerGroupShutdownRequested,
    WorkerGroupStartRequested,
)
from wgstore.orchestration.builder import WorkerGroupStateBuilder
from wgstore.orchestration.executor.commands import COMMAND_NAMESPACE
from wgstore.orchestration.executor.group_polls import GroupPolls, poll_event_id
from wgstore.orchestration.runtimes.fake_runtime import FakeFaults, FakeRuntime, FakeScript
from wgstore.orchestration.runtimes.protocol import TrainSetup
from wgstore.orchestration.runtimes.ranks import assign_ranks
from wgstore.orchestration.train_context import TrainContext
from wgstore.projections.state import WorkerGroupPollStatus, WorkerGroupState, project_worker_group

CONTEXT = WorkerGroupContext(
    num_workers=2, resources_per_worker={"CPU": 0.25}, train_fn="examples.train:train_fn"
)
CAUSE = "start-command"
SHUTDOWN = {"causation_id": "shutdown-command"}


def _state(store: EventStore, group_id: str) -> WorkerGroupState:
    return project_worker_group(store.read_stream(group_stream(group_id)))


def _started(
    store: EventStore, runtime: FakeRuntime, group_id: str, *, launch: bool = True
) -> tuple[WorkerGroupState, dict[int, Any]]:
    """A group started as ``start_worker_group`` starts it: its state and handles by rank."""
    store.append(
        group_stream(group_id),
        [WorkerGroupStartRequested(group_id=group_id, run_id="r1", context=CONTEXT)],
    )
    builder = WorkerGroupStateBuilder(
        store, runtime, _state(store, group_id), command_id=uuid.uuid4(), metadata={}
    )
    bundles = [dict(CONTEXT.resources_per_worker)] * CONTEXT.num_workers
    pg = runtime.reserve_placement_group(group_id, bundles, "PACK", 1.0)
    builder.with_placement_group(pg, bundles=bundles, strategy="PACK", wait_s=0.0)
    builder.with_sync_actor(runtime.start_sync_actor(group_id, timeout_s=1.0))
    started = runtime.start_workers(group_id, pg, CONTEXT, timeout_s=1.0)
    infos = assign_ranks([w.metadata for w in started])
    by_name = {w.metadata.actor_name: w.handle for w in started}
    handles = [by_name[info.actor_name] for info in infos]
    builder.with_workers(handles, infos)
    setup = TrainSetup(CONTEXT, store, store.url, None, {"causation_id": CAUSE}, ())
    contexts = [
        TrainContext(
            group_id=group_id,
            world_rank=info.world_rank,
            local_rank=info.local_rank,
            node_rank=info.node_rank,
            world_size=info.world_size,
            local_world_size=info.local_world_size,
        )
        for info in infos
    ]
    runtime.init_train_contexts(handles, contexts, setup, timeout_s=1.0)
    builder.build(startup_s=0.0)
    if launch:
        runtime.arm_training(handles, timeout_s=1.0)
        builder.launched(CONTEXT.train_fn)
        runtime.start_training(handles, timeout_s=1.0)
    return builder.state, dict(enumerate(handles))


def _polls(store: EventStore, group_id: str) -> list[Any]:
    """The group's recorded polls, as stored."""
    return [r for r in store.read_stream(group_stream(group_id)) if r.type == "WorkerGroupPolled"]


def _cause(record: Any) -> tuple[Any, Any]:
    """The start command and the executor a recorded event names."""
    return record.metadata.get("causation_id"), record.metadata.get("executor_id")


def _polls_accounted(store: EventStore, group_id: str, extra: list[NewEvent]) -> int:
    """How many polls the group's history stands for: each recorded poll, and the unchanged
    polls it carries (``extra``: events not yet appended)."""
    polled = [r.event for r in store.read_stream(group_stream(group_id))]
    polled += [e.event for e in extra]
    return sum(1 + e.unchanged_polls for e in polled if isinstance(e, WorkerGroupPolled))


def test_the_shutdown_s_last_poll_records_the_unchanged_polls_before_it(store: EventStore) -> None:
    runtime = FakeRuntime(script=FakeScript(reports=10))
    state, handles = _started(store, runtime, "g1")
    polls = GroupPolls(store, runtime, executor_id="x1")
    polls.attach(state, handles, CAUSE)
    for _ in range(3):  # the workers report and run on: nothing new to record
        assert polls.poll("g1", lambda: _state(store, "g1"), lambda: CAUSE) is False

    events = polls.final_events(_state(store, "g1"), SHUTDOWN, lambda: CAUSE)

    # the fourth poll (the shutdown's) is unchanged too: it is recorded, standing for the 3
    assert [(type(e.event), e.event.poll_seq, e.event.unchanged_polls) for e in events] == [
        (WorkerGroupPolled, 4, 3)
    ]
    assert (
        events[0].event_id == uuid.uuid5(COMMAND_NAMESPACE, "g1:poll:4") == poll_event_id("g1", 4)
    )
    assert events[0].metadata == SHUTDOWN
    assert _polls_accounted(store, "g1", events) == runtime.polls("g1") == 4


def test_the_shutdown_s_last_poll_records_what_changed_then_nothing_more(
    store: EventStore,
) -> None:
    runtime = FakeRuntime(script=FakeScript(reports=2, return_value="done"))
    state, handles = _started(store, runtime, "g1")
    polls = GroupPolls(store, runtime, executor_id="x1")
    polls.attach(state, handles, CAUSE)
    for _ in range(2):  # the two reports
        assert polls.poll("g1", lambda: _state(store, "g1"), lambda: CAUSE) is False

    events = polls.final_events(_state(store, "g1"), SHUTDOWN, lambda: CAUSE)

    (last,) = [e.event for e in events]  # the workers returned at the third poll
    assert isinstance(last, WorkerGroupPolled) and (last.poll_seq, last.unchanged_polls) == (3, 2)
    assert [(c.world_rank, c.running, c.return_value) for c in last.changes] == [
        (0, False, "done"),
        (1, False, "done"),
    ]
    assert _polls_accounted(store, "g1", events) == runtime.polls("g1") == 3
    store.append(group_stream("g1"), events)
    assert polls.final_events(_state(store, "g1"), SHUTDOWN, lambda: CAUSE) == []
    assert runtime.polls("g1") == 3  # finished: its workers are not asked again


def test_a_group_whose_training_never_launched_has_no_last_poll(store: EventStore) -> None:
    runtime = FakeRuntime()
    _started(store, runtime, "g1", launch=False)
    polls = GroupPolls(store, runtime, executor_id="x1")

    assert polls.final_events(_state(store, "g1"), SHUTDOWN, lambda: CAUSE) == []
    assert runtime.polls("g1") == 0  # its workers were not even asked
    assert polls.detach("g1") == []  # and not kept


def test_a_group_found_again_keeps_its_poll_bookkeeping_until_the_shutdown(
    store: EventStore,
) -> None:
    runtime = FakeRuntime(script=FakeScript(reports=10))
    _started(store, runtime, "g1")
    # a new executor: it finds the group's workers by name at its first poll, and keeps them
    polls = GroupPolls(store, runtime, executor_id="x2")
    for _ in range(3):
        polls.poll("g1", lambda: _state(store, "g1"), lambda: CAUSE)

    events = polls.final_events(_state(store, "g1"), SHUTDOWN, lambda: CAUSE)

    assert [(e.event.poll_seq, e.event.unchanged_polls) for e in events] == [(4, 3)]
    assert _polls_accounted(store, "g1", events) == runtime.polls("g1") == 4


def test_a_release_is_handed_the_live_handles_and_the_group_is_forgotten(
    store: EventStore,
) -> None:
    runtime = FakeRuntime(script=FakeScript(reports=10))
    state, handles = _started(store, runtime, "g1")
    fresh = GroupPolls(store, runtime, executor_id="x1")
    fresh.attach(state, handles, CAUSE)
    assert fresh.detach("g1") == [handles[0], handles[1]]
    assert fresh.detach("g1") == []

    runtime.kill("wgstore-g1-1")  # gone before a new executor finds the group again
    found = GroupPolls(store, runtime, executor_id="x2")
    found.poll("g1", lambda: _state(store, "g1"), lambda: CAUSE)
    (recorded,) = _polls(store, "g1")  # found, but not lost with its cluster: gone
    assert [(c.world_rank, c.error.type) for c in recorded.event.changes] == [
        (1, "WorkerHealthCheckFailedError")
    ]
    assert found.detach("g1") == [handles[0]]  # the live one; none for the one gone
    assert found.detach("g1") == []


def test_a_poll_that_finds_a_change_records_it_with_the_start_s_cause_and_the_executor(
    store: EventStore,
) -> None:
    runtime = FakeRuntime(
        script=FakeScript(reports=2, return_value="done"),
        faults=FakeFaults(raise_at_poll={1: 1}),
    )
    state, handles = _started(store, runtime, "g1")
    polls = GroupPolls(store, runtime, executor_id="x1")
    polls.attach(state, handles, CAUSE)

    assert polls.poll("g1", lambda: _state(store, "g1"), lambda: CAUSE) is False  # rank 1 raised
    assert polls.poll("g1", lambda: _state(store, "g1"), lambda: CAUSE) is False
    assert polls.poll("g1", lambda: _state(store, "g1"), lambda: CAUSE) is True  # rank 0 returned

    recorded = _polls(store, "g1")
    assert [(r.event.poll_seq, r.event.unchanged_polls) for r in recorded] == [(1, 0), (3, 1)]
    assert [[(c.world_rank, c.running) for c in r.event.changes] for r in recorded] == [
        [(1, False)],
        [(0, False)],
    ]
    assert recorded[0].event.changes[0].error.type == "RuntimeError"
    assert [r.event_id for r in recorded] == [
        uuid.uuid5(COMMAND_NAMESPACE, "g1:poll:1"),
        uuid.uuid5(COMMAND_NAMESPACE, "g1:poll:3"),
    ]
    assert all(_cause(r) == (CAUSE, "x1") for r in recorded)
    assert polls.poll("g1", lambda: _state(store, "g1"), lambda: CAUSE) is True
    assert runtime.polls("g1") == 3  # finished: its workers are not asked again


def test_the_poll_hook_sees_every_poll_and_its_failures_are_recorded_with_the_poll(
    store: EventStore,
) -> None:
    runtime = FakeRuntime(script=FakeScript(reports=1))
    state, handles = _started(store, runtime, "g1")
    seen: list[tuple[str, WorkerGroupPollStatus]] = []
    failure = CallbackFailed(
        hook="after_worker_group_poll_status",
        callback="Flaky",
        error=ErrorInfo(type="ValueError", message="no"),
    )

    def hook(group_id: str, status: WorkerGroupPollStatus) -> list[Any]:
        seen.append((group_id, status))
        return [failure] if len(seen) == 1 else []

    polls = GroupPolls(store, runtime, executor_id="x1", poll_hook=hook)
    polls.attach(state, handles, CAUSE)
    polls.poll("g1", lambda: _state(store, "g1"), lambda: CAUSE)  # unchanged: only the failure
    polls.poll("g1", lambda: _state(store, "g1"), lambda: CAUSE)  # both returned

    assert [(g, [s.running for s in st.worker_statuses.values()]) for g, st in seen] == [
        ("g1", [True, True]),
        ("g1", [False, False]),
    ]
    assert list(seen[1][1].worker_statuses) == [0, 1]
    (failed,) = [r for r in store.read_stream(group_stream("g1")) if r.type == "CallbackFailed"]
    assert failed.event == failure
    assert _cause(failed) == (CAUSE, "x1")
    assert [r.event.poll_seq for r in _polls(store, "g1")] == [2]


def test_a_poll_whose_append_is_refused_is_recorded_by_the_next_from_the_log(
    store: EventStore,
) -> None:
    runtime = FakeRuntime(script=FakeScript(reports=5), faults=FakeFaults(raise_at_poll={0: 1}))
    state, handles = _started(store, runtime, "g1")
    stale = [Fence(lease="r1", holder="someone-else", epoch=1)]  # a lease nobody holds

    polls = GroupPolls(
        store, runtime, executor_id="x1", fence=lambda _g: stale.pop() if stale else None
    )
    polls.attach(state, handles, CAUSE)
    with pytest.raises(FencedError):
        polls.poll("g1", lambda: _state(store, "g1"), lambda: CAUSE)
    assert _polls(store, "g1") == []

    polls.poll("g1", lambda: _state(store, "g1"), lambda: CAUSE)  # found again from the log

    (recorded,) = _polls(store, "g1")
    assert recorded.event.poll_seq == 1  # the refused poll again: the same event id
    assert [(c.world_rank, c.running) for c in recorded.event.changes] == [(0, False)]


def test_a_group_not_running_its_training_is_not_polled_by_an_executor_that_finds_it(
    store: EventStore,
) -> None:
    runtime = FakeRuntime()
    _started(store, runtime, "g1", launch=False)
    _started(store, runtime, "g2")
    store.append(group_stream("g2"), [WorkerGroupShutdownRequested(reason="done")])
    polls = GroupPolls(store, runtime, executor_id="x2")

    assert polls.poll("g1", lambda: _state(store, "g1"), lambda: CAUSE) is False
    assert polls.poll("g2", lambda: _state(store, "g2"), lambda: CAUSE) is False
    assert runtime.polls("g1") == runtime.polls("g2") == 0
    assert polls.detach("g1") == polls.detach("g2") == []


def test_a_group_finished_in_the_log_is_not_polled_again_when_found(store: EventStore) -> None:
    runtime = FakeRuntime(script=FakeScript(reports=0))
    state, handles = _started(store, runtime, "g1")
    first = GroupPolls(store, runtime, executor_id="x1")
    first.attach(state, handles, CAUSE)
    first.poll("g1", lambda: _state(store, "g1"), lambda: CAUSE)
    assert _state(store, "g1").poll_status.finished  # type: ignore[union-attr]
    polled = runtime.polls("g1")

    found = GroupPolls(store, runtime, executor_id="x2")
    assert found.poll("g1", lambda: _state(store, "g1"), lambda: CAUSE) is True
    assert found.final_events(_state(store, "g1"), SHUTDOWN, lambda: CAUSE) == []
    assert runtime.polls("g1") == polled and len(_polls(store, "g1")) == 1


def test_a_group_its_cluster_lost_records_its_running_workers_lost(store: EventStore) -> None:
    runtime = FakeRuntime(script=FakeScript(reports=5), faults=FakeFaults(raise_at_poll={1: 1}))
    state, handles = _started(store, runtime, "g1")
    first = GroupPolls(store, runtime, executor_id="x1")
    first.attach(state, handles, CAUSE)
    first.poll("g1", lambda: _state(store, "g1"), lambda: CAUSE)  # rank 1 raised

    new_cluster = FakeRuntime()  # the group is gone with its cluster: no actor, no placement
    found = GroupPolls(store, new_cluster, executor_id="x2")
    assert found.poll("g1", lambda: _state(store, "g1"), lambda: CAUSE) is True

    last = _polls(store, "g1")[-1].event
    assert [(c.world_rank, c.running, c.error.type) for c in last.changes] == [
        (0, False, "ClusterLostError")  # rank 1 had failed already: its error stays its own
    ]
    assert "wgstore-g1-0" in last.changes[0].error.message


def test_workers_gone_from_a_cluster_that_still_holds_the_group_are_gone_not_lost(
    store: EventStore,
) -> None:
    runtime = FakeRuntime(script=FakeScript(reports=5))
    _started(store, runtime, "g1")
    runtime.kill("wgstore-g1-0")
    runtime.kill("wgstore-g1-1")  # the placement group and the sync actor are still there

    found = GroupPolls(store, runtime, executor_id="x2")
    assert found.poll("g1", lambda: _state(store, "g1"), lambda: CAUSE) is True

    (recorded,) = _polls(store, "g1")
    assert [(c.world_rank, c.running, c.error.type) for c in recorded.event.changes] == [
        (0, False, "WorkerHealthCheckFailedError"),
        (1, False, "WorkerHealthCheckFailedError"),
    ]
    assert "is gone" in recorded.event.changes[0].error.message
