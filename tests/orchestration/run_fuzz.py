"""Whole runs without Ray, for the randomized test (test_run_fuzz.py): scenario, driver, checks.

A :class:`Scenario` is one run: its failure budget, what every worker does (a
:class:`~wgstore.orchestration.runtimes.fake_runtime.FakeScript`), one :class:`Fault` per attempt, the
controller appends before which the controller is "killed" (abandoned without cleanup, its
lease taken over by the next one through the lease API), those before which the executor is
restarted, and those before which the last killed controller, only paused, steps once more
(two controllers acting on one run at once). :func:`drive` runs it with the real ``RunController`` loop and a real ``RayExecutor``
on ``FakeRuntime`` against a real store; :func:`check_log` checks the invariants on the
recorded log and the fake cluster; :func:`expected` is the oracle of how the run must end,
computed from the scenario alone (Ray Train 2.60's failure counting, written out here
independently of ``decide``).
"""

from __future__ import annotations

import itertools
import os
import threading
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from wgstore.events import NO_STREAM, EventStore, RecordedEvent
from wgstore.events.leases import acquire_lease
from wgstore.events.run import FailureConfig, RunCreated, ScalingConfig
from wgstore.events.streams import group_stream, run_stream
from wgstore.events.worker_group import StartStage, WorkerGroupContext
from wgstore.orchestration.executor.ray_executor import RayExecutor
from wgstore.orchestration.run.controller import RunController
from wgstore.orchestration.run.decide import (
    attempt_group_id,
    decide,
    is_preemption,
    is_retryable_start_failure,
)
from wgstore.orchestration.runtimes.fake_runtime import FakeFaults, FakeRuntime, FakeScript
from wgstore.projections.run_state import RunState, evolve_run
from wgstore.projections.state import WorkerGroupState, evolve

DEADLINE_S = float(os.environ.get("WGSTORE_FUZZ_DEADLINE_S", "30"))
LEASE_S = 30.0
HEALTH_CHECK_TIMEOUT_S = 1.0
END_TYPES = ("RunFinished", "RunErrored", "RunAborted")
ONCE_PER_GROUP = (
    "WorkerGroupStartRequested",
    "PlacementGroupReserved",
    "SyncActorStarted",
    "WorkersStarted",
    "WorkerGroupStarted",
    "TrainingLaunched",
    "WorkerGroupShutdownRequested",
    "WorkerGroupShutDown",
    "WorkerGroupStartFailed",
)
TERMINAL = ("WorkerGroupShutDown", "WorkerGroupStartFailed")


@dataclass(frozen=True)
class Fault:
    """What goes wrong in one attempt.

    ``kind``: ``none``; a failed start (``fail_stage`` at ``stage``, ``never_ready`` placement,
    ``cannot_fit``); ``raise``/``die``/``hang`` of ``ranks`` at poll ``poll``; ``lose_node``
    (node ``node`` is lost right after the attempt's training launched, before any poll).
    """

    kind: str = "none"
    stage: StartStage | None = None
    ranks: tuple[int, ...] = ()
    poll: int = 0
    node: int = 0

    def fake_faults(self) -> FakeFaults:
        """The fake runtime's faults for this attempt (a lost node is the driver's to cause)."""
        at = {rank: self.poll for rank in self.ranks}
        return {
            "fail_stage": FakeFaults(fail_stage=self.stage),
            "never_ready": FakeFaults(placement_never_ready=True),
            "cannot_fit": FakeFaults(cannot_fit=True),
            "raise": FakeFaults(raise_at_poll=at),
            "die": FakeFaults(die_at_poll=at),
            "hang": FakeFaults(hang_at_poll=at),
        }.get(self.kind, FakeFaults())


@dataclass(frozen=True)
class Scenario:
    """One run and everything that happens to it (see the module docs)."""

    run_id: str
    workers: int
    nodes: int
    reports: int
    checkpoint: bool
    failure_config: FailureConfig
    faults: tuple[Fault, ...]
    controller_kills: frozenset[int] = frozenset()
    executor_restarts: frozenset[int] = frozenset()
    zombie_steps: frozenset[int] = frozenset()
    initial_checkpoint: str | None = None

    def fault_of(self, attempt: int) -> Fault:
        """The fault of attempt ``attempt`` (from 1); none past the list."""
        return self.faults[attempt - 1] if attempt <= len(self.faults) else Fault()

    def ranks_on_node(self, node: int) -> tuple[int, ...]:
        """World ranks on ``fake-node-<node>`` (bundle i is on node i % nodes; ranks are given
        node by node, in bundle order, as Ray Train assigns them)."""
        by_node = [
            [b for b in range(self.workers) if b % self.nodes == n] for n in range(self.nodes)
        ]
        ranks, rank = {}, 0
        for n, bundles in enumerate(by_node):
            ranks[n] = tuple(range(rank, rank + len(bundles)))
            rank += len(bundles)
        return ranks[node]


UNKNOWN = "<either>"
"""A checkpoint the oracle cannot tell (it depends on how far the surviving ranks got)."""


@dataclass(frozen=True)
class Expected:
    """How the run must end."""

    status: str
    decisions: tuple[tuple[str, str, int], ...]  # (kind, RETRY/RAISE, failures so far)
    failed_ranks: tuple[int, ...]
    resume_checkpoints: tuple[str | None, ...]  # per attempt


def expected(s: Scenario) -> Expected:
    """The oracle: Ray Train 2.60's counting applied to the scenario's faults."""
    counts: Counter[str] = Counter()
    decisions: list[tuple[str, str, int]] = []
    checkpoints: list[str | None] = []
    latest = s.initial_checkpoint
    attempt = 0
    while True:
        attempt += 1
        checkpoints.append(latest)
        fault = s.fault_of(attempt)
        complete = fault.kind == "none" or (
            fault.kind in ("raise", "die", "hang") and fault.poll > s.reports
        )
        failing = s.ranks_on_node(fault.node) if fault.kind == "lose_node" else fault.ranks
        survivors = fault.kind in ("raise", "die", "hang", "lose_node") and len(failing) < s.workers
        if complete and s.checkpoint:
            latest = f"memory://{attempt_group_id(s.run_id, attempt)}/report{s.reports - 1}"
        elif survivors and s.checkpoint:
            latest = UNKNOWN  # the ranks that did not fail may reach their last report or not
        if fault.kind == "none":
            return Expected("FINISHED", tuple(decisions), (), tuple(checkpoints))
        ranks: tuple[int, ...]
        if fault.kind in ("fail_stage", "never_ready", "cannot_fit"):
            kind, ranks = "start", (-1,)
            retryable = fault.kind == "never_ready" or (
                fault.kind == "fail_stage"
                and fault.stage not in (StartStage.PLACEMENT_GROUP, StartStage.LAUNCH)
            )
        elif fault.kind == "lose_node":
            kind, ranks, retryable = "preemption", s.ranks_on_node(fault.node), True
        else:
            kind, ranks, retryable = "worker_group", tuple(sorted(fault.ranks)), True
        counts[kind] += 1
        limit = s.failure_config.limit_of(kind)
        retry = retryable and (limit == -1 or counts[kind] <= limit)
        decisions.append((kind, "RETRY" if retry else "RAISE", counts[kind]))
        if not retry:
            return Expected("ERRORED", tuple(decisions), ranks, tuple(checkpoints))


# ---------------------------------------------------------------------------- the driver


class ControllerKilled(BaseException):
    """The controller process "died" here (a BaseException: nothing in the loop catches it)."""


class _HookedStore:
    """The store, with a hook called before every append (the rest is the store's own)."""

    def __init__(self, store: EventStore, before: Callable[[str, Any], None]) -> None:
        self._store = store
        self._before = before
        self._after: Callable[[str, Any], None] = lambda _s, _e: None

    def append(self, stream_id: str, events: Any, **options: Any) -> Any:
        self._before(stream_id, events)
        recorded = self._store.append(stream_id, events, **options)
        self._after(stream_id, events)
        return recorded

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)


@dataclass
class Drive:
    """What happened while driving a scenario."""

    controllers: int = 0
    kills: int = 0
    executor_restarts: int = 0
    zombie_steps: int = 0
    executor_errors: list[str] = field(default_factory=list)


HALTED: list[RayExecutor] = []
"""Executors halted but whose loop thread may still be waiting (see :func:`join_halted`)."""


def halt(executor: RayExecutor) -> None:
    """Stop an executor as its process would die between two commands: the command in progress
    finishes, nothing more is done. Unlike ``stop()`` this does not wait for the loop thread to
    wake from its wait for the log (up to 0.5 s, too long for hundreds of scenarios): once
    woken it does nothing more. :func:`join_halted` waits for those threads."""
    executor._stop.set()
    executor._join_drainers(DEADLINE_S)
    HALTED.append(executor)


def join_halted() -> None:
    """Wait for every halted executor's loop thread to end (before the store is closed)."""
    while HALTED:
        executor = HALTED.pop()
        executor.stop(timeout_s=DEADLINE_S)
        assert not executor.running, "a halted executor did not stop"


def _ticker(runtime: FakeRuntime, stop: threading.Event) -> None:
    """Moves the fake's health-check clock on, so a hung worker times out in milliseconds."""
    while not stop.wait(0.002):
        runtime.advance(HEALTH_CHECK_TIMEOUT_S / 2)


def create_run(store: EventStore, s: Scenario) -> None:
    """Record the scenario's ``RunCreated`` (what ``start_run`` records, with fast polls)."""
    context = WorkerGroupContext(
        num_workers=s.workers,
        resources_per_worker={"CPU": 1.0},
        train_fn="examples.train:train_fn",
        poll_interval_s=0.005,
        health_check_timeout_s=HEALTH_CHECK_TIMEOUT_S,
        resume_checkpoint=s.initial_checkpoint,
    )
    created = RunCreated(
        run_id=s.run_id,
        scaling_config=ScalingConfig(num_workers=s.workers),
        failure_config=s.failure_config,
        context=context,
        lease_s=LEASE_S,
    )
    store.append(run_stream(s.run_id), [created], expected_version=NO_STREAM)


def drive(store: EventStore, s: Scenario) -> tuple[FakeRuntime, Drive]:
    """Run the scenario to its end; returns the fake cluster and what happened."""
    runtime = FakeRuntime(
        script=FakeScript(reports=s.reports, return_value="done", checkpoint=s.checkpoint),
        nodes=s.nodes,
    )
    for attempt in range(1, len(s.faults) + 1):
        runtime.configure(
            attempt_group_id(s.run_id, attempt), faults=s.fault_of(attempt).fake_faults()
        )
    lose_at = {
        attempt_group_id(s.run_id, a): f"fake-node-{s.fault_of(a).node}"
        for a in range(1, len(s.faults) + 1)
        if s.fault_of(a).kind == "lose_node"
    }
    lost: set[str] = set()

    def after_executor_append(stream_id: str, events: Any) -> None:
        group_id = stream_id.removeprefix("worker-group-")
        types = {type(getattr(e, "event", e)).__name__ for e in events}
        if group_id in lose_at and "TrainingLaunched" in types and group_id not in lost:
            lost.add(group_id)
            runtime.lose_node(lose_at[group_id])

    executor_store = _HookedStore(store, lambda _s, _e: None)
    executor_store._after = after_executor_append
    position = store.head()
    report = Drive()

    def new_executor() -> RayExecutor:
        return RayExecutor(
            executor_store,
            runtime=runtime,
            run_ids={s.run_id},
            from_position=position,
            read_models_interval_s=None,
        ).start()

    executor = new_executor()
    appends = 0
    armed = False
    zombies: list[RunController] = []

    def before_controller_append(_stream_id: str, _events: Any) -> None:
        nonlocal appends, executor, armed
        if not armed:
            return
        appends += 1
        if appends in s.zombie_steps and zombies:
            armed = False  # the zombie's own appends are not counted
            try:
                zombies[-1].step()  # a killed controller that was only paused acts once more
                report.zombie_steps += 1
            finally:
                armed = True
        if appends in s.executor_restarts:
            halt(executor)
            report.executor_errors += executor.errors
            executor = new_executor()
            report.executor_restarts += 1
        if appends in s.controller_kills:
            report.kills += 1
            raise ControllerKilled(f"before controller append {appends}")

    controller_store = _HookedStore(store, before_controller_append)
    stop = threading.Event()
    ticker = threading.Thread(target=_ticker, args=(runtime, stop), daemon=True)
    ticker.start()
    try:
        while True:
            armed = False
            controller = RunController(
                controller_store,
                s.run_id,
                executor=executor,
            )
            if report.controllers:  # the killed one's lease is live: take it over (API)
                later = datetime.now(UTC) + timedelta(seconds=LEASE_S + 1)
                assert acquire_lease(store, s.run_id, controller.controller_id, LEASE_S, now=later)
            report.controllers += 1
            controller.start()
            armed = True
            try:
                controller.run(timeout_s=DEADLINE_S)
            except ControllerKilled:
                zombies.append(controller)
                continue  # abandoned: no close(), no lease release
            controller.close()
            break
    finally:
        stop.set()
        ticker.join()
        halt(executor)
        report.executor_errors += executor.errors
    return runtime, report


# ---------------------------------------------------------------------------- the checks


def _records(store: EventStore, stream_id: str) -> list[RecordedEvent]:
    return list(store.read_stream(stream_id))


def _fold(records: list[RecordedEvent]) -> WorkerGroupState:
    state: WorkerGroupState | None = None
    for record in records:
        state = evolve(state, record)
    assert state is not None
    return state


def _observed_kind(group: WorkerGroupState) -> str:
    if group.start_failure is not None or not group.training_launched:
        return "start"
    if any(is_preemption(e) for e in group.errors.values()):
        return "preemption"
    return "worker_group"


def _retryable(group: WorkerGroupState) -> bool:
    failure = group.start_failure
    return failure is None or is_retryable_start_failure(failure.stage, failure.error)


def check_log(store: EventStore, s: Scenario, runtime: FakeRuntime) -> RunState:
    """Every invariant of the recorded run and the fake cluster; returns the run's state."""
    run_records = _records(store, run_stream(s.run_id))
    run: RunState | None = None
    for record in run_records:
        run = evolve_run(run, record)
    assert run is not None
    groups = {g: _records(store, group_stream(g)) for g in run.groups}
    states = {g: _fold(records) for g, records in groups.items()}

    # exactly one end event, and it is the last one
    ends = [r.type for r in run_records if r.type in END_TYPES]
    assert len(ends) == 1 and run_records[-1].type == ends[0], ends

    # attempts are attempt_group_id(run, 1..n), in order
    assert list(run.groups) == [attempt_group_id(s.run_id, a) for a in range(1, len(groups) + 1)]

    # no command carried out twice: lifecycle events once per group, results once per command,
    # and the cluster asked once per group for a placement group and for workers
    for group_id, records in groups.items():
        types = Counter(r.type for r in records)
        assert all(types[t] <= 1 for t in ONCE_PER_GROUP), (group_id, types)
        assert types["WorkerGroupStartRequested"] == 1
        assert sum(types[t] for t in TERMINAL) == 1, (group_id, types)
        results = Counter(
            (r.metadata["causation_id"], r.type)
            for r in records
            if "command" in r.metadata and r.type not in ("WorkerGroupPolled", "WorkerReported")
        )
        assert all(n == 1 for n in results.values()), results
        calls = Counter(c for c in runtime.calls if c[1] == group_id)
        assert calls[("reserve_placement_group", group_id)] <= 1, calls
        assert calls[("start_workers", group_id)] <= 1, calls

    # never two live attempts: the next is requested after the previous one ended (log), and
    # the cluster saw nothing of it before the previous one was released
    ordered = list(run.groups)
    for previous, following in itertools.pairwise(ordered):
        ended_at = next(r.position for r in groups[previous] if r.type in TERMINAL)
        assert groups[following][0].position > ended_at, (previous, following)
        calls = runtime.calls
        released = max(i for i, c in enumerate(calls) if c == ("release_group", previous))
        first = min((i for i, c in enumerate(calls) if c[1] == following), default=len(calls))
        assert released < first, (previous, following, calls)

    # every failure counted exactly once, by kind, with the budget respected
    counts: Counter[str] = Counter()
    by_group = Counter(d.group_id for d in run.decisions)
    for index, group_id in enumerate(ordered):
        last = index == len(ordered) - 1
        wanted = 0 if last and run.status.value == "FINISHED" else 1
        assert by_group[group_id] == wanted, (group_id, run.decisions)
    for decision in run.decisions:
        group = states[decision.group_id]
        kind = _observed_kind(group)
        counts[kind] += 1
        limit = s.failure_config.limit_of(kind)
        retry = _retryable(group) and (limit == -1 or counts[kind] <= limit)
        assert (decision.failure_kind, decision.failures_so_far, decision.limit) == (
            kind,
            counts[kind],
            limit,
        ), decision
        assert decision.decision == ("RETRY" if retry else "RAISE"), decision
    raised = [d for d in run.decisions if d.decision == "RAISE"]
    if run.status.value == "ERRORED":
        assert len(raised) == 1 and raised[0] == run.decisions[-1]
        final = states[ordered[-1]]
        failed = {e.world_rank for e in raised[0].errors} | set(final.errors)
        assert [e.world_rank for e in run.errors] == sorted(failed), run.errors
        assert run.errors and run.error is not None
    else:
        assert run.status.value == "FINISHED" and not raised, run.status
        final = states[ordered[-1]]
        assert final.poll_status is not None and final.poll_status.finished
        assert not final.errors

    # each retry starts from the latest checkpoint any earlier attempt reported
    latest = s.initial_checkpoint
    for group_id in ordered:
        assert states[group_id].context.resume_checkpoint == latest, group_id
        latest = states[group_id].latest_checkpoint or latest

    _check_replay(run_records, groups)

    # nothing left on the fake cluster
    assert runtime.list_group_resources() == {}, runtime.list_group_resources()
    return run


def _check_replay(run_records: list[RecordedEvent], groups: dict[str, list[RecordedEvent]]) -> None:
    """Re-running ``decide`` over the log reproduces every recorded decision (same events, same
    ids), on the run as it was and the group as the controller could have read it then."""
    prefixes: dict[str, list[WorkerGroupState | None]] = {}
    for group_id, records in groups.items():
        states: list[WorkerGroupState | None] = [None]
        for record in records:
            states.append(evolve(states[-1], record))
        prefixes[group_id] = states
    now = datetime.now(UTC)
    decided_group_events: set[Any] = set()
    run: RunState | None = None
    index = 0
    while index < len(run_records):
        record = run_records[index]
        if record.type in ("RunCreated", "ControllerStarted"):
            run = evolve_run(run, record)
            index += 1
            continue
        assert run is not None
        current = run.current_group_id
        records = groups.get(current, []) if current else []
        seen = sum(1 for r in records if r.position < record.position)
        options = prefixes[current][: seen + 1] if current else [None]
        matched = None
        for group in reversed(options):  # the latest read first
            decision = decide(run, group, now)
            got = [(e.event_id, e.event) for e in decision.run_events]
            want = [(r.event_id, r.event) for r in run_records[index : index + len(got)]]
            if got and got == want:
                matched = decision
                break
        assert matched is not None, f"no decide() output reproduces {record.type} v{record.version}"
        decided_group_events.update(e.event_id for e in matched.group_events)
        for r in run_records[index : index + len(matched.run_events)]:
            run = evolve_run(run, r)
        index += len(matched.run_events)
    for records in groups.values():
        for r in records:
            if r.type in ("WorkerGroupStartRequested", "WorkerGroupShutdownRequested"):
                assert r.event_id in decided_group_events, (r.type, r.stream_id)
