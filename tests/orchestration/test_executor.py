"""The executor's logic against ``FakeRuntime`` and a real store (SQLite and Postgres).

Commands from the log, restart and catch-up, skipped done commands, a half-done start
released, start failures at each stage, shutdown while starting, worker faults, lost nodes,
concurrent groups, scope by run, the orphan sweep. No Ray and no sleeps: the fake's workers
advance one step per poll, and every wait is for a condition in the log, with a deadline.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from wgstore.events import NewEvent, event_type
from wgstore.events.streams import group_stream
from wgstore.events.worker_group import (
    PlacementGroupReserved,
    StartStage,
    SyncActorStarted,
    WorkerGroupContext,
    WorkerGroupShutdownRequested,
    WorkerGroupStartRequested,
)
from wgstore.orchestration import RayExecutor, WorkerGroup, WorkerGroupStartError
from wgstore.orchestration.executor.commands import command_id_for
from wgstore.orchestration.runtimes.fake_runtime import FakeFaults, FakeRuntime, FakeScript
from wgstore.orchestration.worker_group import follow_group
from wgstore.projections import TrainingOutcome, WorkerGroupStatus
from wgstore.projections.state import project_worker_group

DEADLINE_S = 20.0


def _context(num_workers: int = 2, **overrides: Any) -> WorkerGroupContext:
    options: dict[str, Any] = {
        "num_workers": num_workers,
        "resources_per_worker": {"CPU": 0.25},
        "train_fn": "examples.train:train_fn",
        "poll_interval_s": 0.01,
    }
    options.update(overrides)
    return WorkerGroupContext(**options)


def _types(store: Any, group_id: str) -> list[str]:
    return [r.type for r in store.read_stream(group_stream(group_id))]


def _request(store: Any, group_id: str, run_id: str = "r1", **context: Any) -> None:
    """Ask for a group as ``WorkerGroup.create`` does, without waiting for it."""
    store.append(
        group_stream(group_id),
        [
            WorkerGroupStartRequested(
                group_id=group_id, run_id=run_id, attempt=1, context=_context(**context)
            )
        ],
    )


def _until(condition: Callable[[], bool], timeout_s: float = DEADLINE_S) -> None:
    """Wait for ``condition`` (checked every few ms) with a deadline."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "the condition did not hold in time"
        time.sleep(0.002)


def _follow(store: Any, group_id: str, until: Callable[[Any], bool]) -> Any:
    return follow_group(store, None, group_id, until, timeout_s=DEADLINE_S)


def _ended(state: Any) -> bool:
    return bool(state.status.is_terminal)


@pytest.fixture
def runtime() -> FakeRuntime:
    return FakeRuntime(script=FakeScript(reports=2, return_value={"done": True}))


@pytest.fixture
def fake_executor(store: Any, runtime: FakeRuntime) -> Iterator[RayExecutor]:
    """An executor on the fake cluster; it must end without handler errors."""
    ex = RayExecutor(store, runtime=runtime, read_models_interval_s=None).start()
    yield ex
    ex.stop()
    assert ex.errors == []


class TestLifecycle:
    def test_a_group_runs_to_the_end_and_every_result_names_its_command(
        self, store: Any, runtime: FakeRuntime, fake_executor: RayExecutor
    ) -> None:
        group = WorkerGroup.create(store, _context(2), group_id="g1", executor=fake_executor)
        status = group.wait(timeout_s=DEADLINE_S)
        state = group.shutdown(reason="done", timeout_s=DEADLINE_S)

        assert status.finished and state.status is WorkerGroupStatus.SHUT_DOWN
        assert state.outcome is TrainingOutcome.FINISHED
        assert [s.return_value for s in status.worker_statuses.values()] == [{"done": True}] * 2
        types = _types(store, "g1")
        assert types[:6] == [
            "WorkerGroupStartRequested",
            "PlacementGroupReserved",
            "SyncActorStarted",
            "WorkersStarted",
            "WorkerGroupStarted",
            "TrainingLaunched",
        ]
        assert types.count("WorkerReported") == 4 and types[-1] == "WorkerGroupShutDown"
        records = list(store.read_stream(group_stream("g1")))
        start = str(command_id_for("StartWorkerGroup", records[0].event_id))
        assert {r.metadata["causation_id"] for r in records[1:6]} == {start}
        assert all(
            r.metadata["causation_id"] == start
            for r in records
            if r.type in ("WorkerReported", "WorkerGroupPolled")
        )
        assert state.released == (
            "actor:wgstore-g1-0",
            "actor:wgstore-g1-1",
            "actor:wgstore-g1-sync",
            "placement_group:wgstore-g1",
        )
        assert runtime.list_group_resources() == {}

    def test_concurrent_groups_each_run_their_own_course(
        self, store: Any, runtime: FakeRuntime
    ) -> None:
        runtime.configure("g2", faults=FakeFaults(fail_stage=StartStage.WORKERS))
        with RayExecutor(store, runtime=runtime, max_threads=2, read_models_interval_s=None):
            for group_id in ("g1", "g2", "g3", "g4"):
                _request(store, group_id)
            ran = {
                g: _follow(store, g, lambda s: s.training_launched or _ended(s))
                for g in ["g1", "g3", "g4"]
            }
            failed = _follow(store, "g2", _ended)
            for group_id in ran:
                _follow(
                    store, group_id, lambda s: s.poll_status is not None and s.poll_status.finished
                )

        assert all(s.training_launched for s in ran.values())
        assert failed.status is WorkerGroupStatus.START_FAILED
        assert failed.start_failure.stage is StartStage.WORKERS
        assert set(runtime.list_group_resources()) == {"g1", "g3", "g4"}


class TestRestart:
    def test_a_new_executor_re_attaches_by_name_and_repeats_nothing(
        self, store: Any, runtime: FakeRuntime
    ) -> None:
        runtime.configure("g1", script=FakeScript(reports=6))
        first = RayExecutor(store, runtime=runtime, read_models_interval_s=None).start()
        group = WorkerGroup.create(store, _context(2), group_id="g1", executor=first)
        midway = _follow(store, "g1", lambda s: s.reports_total >= 2)
        first.stop()

        with RayExecutor(store, runtime=runtime, read_models_interval_s=None) as second:
            status = group.wait(timeout_s=DEADLINE_S)
            group.shutdown(reason="done", timeout_s=DEADLINE_S)
        head = store.head()
        calls = list(runtime.calls)
        with RayExecutor(store, runtime=runtime, read_models_interval_s=None) as third:
            assert third.wait_idle(DEADLINE_S)

        assert first.errors == second.errors == third.errors == []
        assert midway.reports_total < 12 and status.finished
        assert [c for c, g in calls if c == "reserve_placement_group"] == [
            "reserve_placement_group"
        ]
        reports = [
            (r.event.world_rank, r.event.index)
            for r in store.read_stream(group_stream("g1"))
            if r.type == "WorkerReported"
        ]
        assert sorted(reports) == [(rank, i) for rank in (0, 1) for i in range(6)]
        assert store.head() == head and runtime.calls == calls  # the third did nothing

    def test_a_start_left_half_done_by_a_dead_executor_is_released_by_the_next(
        self, store: Any, runtime: FakeRuntime
    ) -> None:
        # what an executor that died after its second builder step leaves: the log and the
        # resources it had acquired
        _request(store, "g1")
        requested = next(iter(store.read_stream(group_stream("g1"))))
        cause = {"causation_id": str(command_id_for("StartWorkerGroup", requested.event_id))}
        pg = runtime.reserve_placement_group("g1", [{"CPU": 0.25}] * 2, "PACK", 1.0)
        sync = runtime.start_sync_actor("g1", timeout_s=1.0)
        store.append(
            group_stream("g1"),
            [
                NewEvent(
                    PlacementGroupReserved(
                        placement_group_id=pg.placement_group_id,
                        name=pg.name,
                        bundles=({"CPU": 0.25},) * 2,
                        strategy="PACK",
                        wait_s=0.0,
                    ),
                    metadata=cause,
                ),
                NewEvent(SyncActorStarted(actor_id=sync.actor_id, name=sync.name), metadata=cause),
            ],
        )
        runtime.calls.clear()

        with RayExecutor(store, runtime=runtime, read_models_interval_s=None) as executor:
            state = _follow(store, "g1", _ended)
            assert executor.wait_idle(DEADLINE_S)

        assert executor.errors == []
        assert state.status is WorkerGroupStatus.START_FAILED
        failure = state.start_failure
        assert failure.stage is StartStage.WORKERS and failure.error.type == "ExecutorLostError"
        assert tuple(failure.released) == ("actor:wgstore-g1-sync", "placement_group:wgstore-g1")
        assert [c for c, _ in runtime.calls] == ["release_group"]  # the start is not repeated
        assert runtime.list_group_resources() == {}


STAGE_FAULTS = {
    "placement_never_ready": (
        FakeFaults(placement_never_ready=True),
        StartStage.PLACEMENT_GROUP,
        "PlacementGroupTimeoutError",
    ),
    "cannot_fit": (
        FakeFaults(cannot_fit=True),
        StartStage.PLACEMENT_GROUP,
        "InsufficientClusterResourcesError",
    ),
    **{
        stage.value: (FakeFaults(fail_stage=stage), stage, "FakeStartError") for stage in StartStage
    },
}
BUILDER_STEPS = [
    "PlacementGroupReserved",
    "SyncActorStarted",
    "WorkersStarted",
    "WorkerGroupStarted",
]
STEPS_BEFORE = {
    StartStage.PLACEMENT_GROUP: 0,
    StartStage.SYNC_ACTOR: 1,
    StartStage.WORKERS: 2,
    StartStage.INIT_TRAIN_CONTEXT: 3,
    StartStage.LAUNCH: 4,
}


class TestStartFailures:
    def test_a_start_failing_at_any_stage_records_it_and_releases_what_it_took(
        self, store: Any, runtime: FakeRuntime, fake_executor: RayExecutor
    ) -> None:
        for case, (faults, stage, error_type) in STAGE_FAULTS.items():  # one store for all
            group_id = f"g_{case}"
            runtime.configure(group_id, faults=faults)

            with pytest.raises(WorkerGroupStartError) as raised:
                WorkerGroup.create(store, _context(2), group_id=group_id, executor=fake_executor)

            assert raised.value.stage is stage, case
            assert raised.value.cause.type == error_type, case
            assert _types(store, group_id) == [
                "WorkerGroupStartRequested",
                *BUILDER_STEPS[: STEPS_BEFORE[stage]],
                "WorkerGroupStartFailed",
            ], case
            assert runtime.list_group_resources() == {}, case
            acquired = [
                f"actor:wgstore-{group_id}-{part}"
                for part, since in (
                    ("0", StartStage.INIT_TRAIN_CONTEXT),
                    ("1", StartStage.INIT_TRAIN_CONTEXT),
                    ("sync", StartStage.WORKERS),
                )
                if STEPS_BEFORE[stage] >= STEPS_BEFORE[since]
            ]
            if STEPS_BEFORE[stage] >= 1:
                assert raised.value.released == (
                    *acquired,
                    f"placement_group:wgstore-{group_id}",
                ), case
            if case == "placement_never_ready":  # the pending placement group is released too
                assert raised.value.released == (f"placement_group:wgstore-{group_id}",)

    def test_shutdown_asked_while_starting_stops_the_start_and_releases_it(
        self, store: Any, runtime: FakeRuntime, fake_executor: RayExecutor
    ) -> None:
        gate = runtime.gate("g1", StartStage.WORKERS)
        _request(store, "g1")
        assert gate.reached.wait(DEADLINE_S)
        store.append(group_stream("g1"), [WorkerGroupShutdownRequested(reason="changed my mind")])
        gate.open()
        state = _follow(store, "g1", _ended)
        assert fake_executor.wait_idle(DEADLINE_S)

        assert state.status is WorkerGroupStatus.SHUT_DOWN and not state.training_launched
        assert _types(store, "g1") == [
            "WorkerGroupStartRequested",
            "PlacementGroupReserved",
            "SyncActorStarted",
            "WorkerGroupShutdownRequested",
            "WorkerGroupShutDown",
        ]
        assert "placement_group:wgstore-g1" in state.released
        assert runtime.list_group_resources() == {}
        assert [c for c, _ in runtime.calls].count("shutdown_workers") == 0  # the start ended it


class TestWorkerFaults:
    def test_a_worker_that_dies_and_one_that_raises_are_failures_of_their_ranks(
        self, store: Any, runtime: FakeRuntime, fake_executor: RayExecutor
    ) -> None:
        runtime.configure(
            "g1",
            script=FakeScript(reports=10),
            faults=FakeFaults(die_at_poll={1: 2}, raise_at_poll={0: 3}),
        )
        group = WorkerGroup.create(store, _context(2), group_id="g1", executor=fake_executor)
        status = _follow(
            store, "g1", lambda s: s.poll_status is not None and s.poll_status.finished
        ).poll_status
        state = group.shutdown(reason="done", timeout_s=DEADLINE_S)

        errors = {rank: s.error.type for rank, s in status.worker_statuses.items() if s.error}
        assert errors == {0: "RuntimeError", 1: "WorkerHealthCheckFailedError"}
        assert state.outcome is TrainingOutcome.ERRORED
        assert {w.world_rank: w.ending.value for w in state.worker_endings} == {
            0: "stopped",
            1: "dead",
        }

    def test_a_hanging_poll_is_a_health_check_timeout_once_the_clock_passes_it(
        self, store: Any, runtime: FakeRuntime, fake_executor: RayExecutor
    ) -> None:
        runtime.configure(
            "g1", script=FakeScript(reports=10_000), faults=FakeFaults(hang_at_poll={1: 2})
        )
        context = _context(2, health_check_timeout_s=30.0)
        group = WorkerGroup.create(store, context, group_id="g1", executor=fake_executor)
        _until(lambda: runtime.polls("g1") >= 3)
        assert group.poll_status().errors == {}  # hanging, but not for long yet

        runtime.advance(31.0)
        state = _follow(
            store, "g1", lambda s: s.poll_status is not None and 1 in s.poll_status.errors
        )
        group.shutdown(reason="done", timeout_s=DEADLINE_S)

        assert state.poll_status.errors[1].type == "WorkerHealthCheckTimeoutError"
        assert state.poll_status.worker_statuses[0].error is None

    def test_a_lost_node_fails_exactly_the_workers_on_it(
        self, store: Any, fake_executor: RayExecutor
    ) -> None:
        runtime = fake_executor.runtime
        assert isinstance(runtime, FakeRuntime)
        runtime.nodes = 2
        runtime.configure("g1", script=FakeScript(reports=10_000))
        group = WorkerGroup.create(store, _context(4), group_id="g1", executor=fake_executor)
        _until(lambda: runtime.polls("g1") >= 2)

        lost = runtime.lose_node("fake-node-1")
        state = _follow(
            store, "g1", lambda s: s.poll_status is not None and len(s.poll_status.errors) == 2
        )
        group.shutdown(reason="preempted", timeout_s=DEADLINE_S)

        on_lost_node = {w.world_rank for w in state.workers if w.node_id == "fake-node-1"}
        assert len(lost) == 2 and len(on_lost_node) == 2
        assert set(state.poll_status.errors) == on_lost_node
        assert all(
            e.type == "WorkerHealthCheckFailedError" for e in state.poll_status.errors.values()
        )
        assert all(
            state.poll_status.worker_statuses[r].running for r in range(4) if r not in on_lost_node
        )


class TestScope:
    def test_an_executor_for_a_run_serves_only_that_run_s_groups(
        self, store: Any, runtime: FakeRuntime
    ) -> None:
        with RayExecutor(
            store, runtime=runtime, run_ids={"r1"}, read_models_interval_s=None
        ) as executor:
            _request(store, "g2", run_id="r2")
            _request(store, "g1", run_id="r1")
            _request(store, "g3", run_id="r1")
            for group_id in ("g1", "g3"):
                _follow(store, group_id, lambda s: s.training_launched)
            assert executor.wait_idle(DEADLINE_S)

        assert executor.errors == []
        assert _types(store, "g2") == ["WorkerGroupStartRequested"]
        assert {g for _, g in runtime.calls} == {"g1", "g3"}

    def test_a_run_scoped_sweep_releases_only_orphans_of_its_runs(
        self, store: Any, runtime: FakeRuntime
    ) -> None:
        for group_id, run_id in (("g1", "r1"), ("g2", "r2")):
            _request(store, group_id, run_id=run_id)
            store.append(group_stream(group_id), [WorkerGroupShutdownRequested(reason="gone")])
            runtime.start_sync_actor(group_id, timeout_s=1.0)  # left by a dead executor
        runtime.start_sync_actor("g9", timeout_s=1.0)  # a group this store never had

        with RayExecutor(
            store, runtime=runtime, run_ids={"r1"}, read_models_interval_s=None
        ) as executor:
            assert executor.wait_idle(DEADLINE_S)
            released = executor.sweep_orphans()

        # g1's own shutdown released its actor; g2 (run r2) and g9 (no group) are not ours
        assert released == []
        assert _types(store, "g1")[-1] == "WorkerGroupShutDown"
        assert set(runtime.list_group_resources()) == {"g2", "g9"}

    def test_an_unscoped_sweep_releases_resources_no_live_group_owns(
        self, store: Any, runtime: FakeRuntime
    ) -> None:
        runtime.start_sync_actor("g9", timeout_s=1.0)
        runtime.configure("g1", script=FakeScript(reports=10_000))
        with RayExecutor(
            store, runtime=runtime, release_orphans=True, read_models_interval_s=None
        ) as executor:
            WorkerGroup.create(store, _context(1), group_id="g1", executor=executor)
            released = executor.sweep_orphans()
            group_resources = runtime.list_group_resources()
            store.append(group_stream("g1"), [WorkerGroupShutdownRequested(reason="done")])
            _follow(store, "g1", _ended)

        assert executor.errors == []
        assert set(group_resources) == {"g1"}  # g9 went at start; the live g1 is kept
        assert released == []
        assert runtime.list_group_resources() == {}


def test_failpoints_are_the_runtimes_and_scopes_need_collections(store: Any) -> None:
    from wgstore.orchestration.runtimes.ray_runtime import RayRuntime

    with pytest.raises(TypeError, match="failpoints"):
        RayExecutor(store, runtime=FakeRuntime(), failpoints={"poll_hang": 1})  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="collection of ids"):
        RayExecutor(store, runtime=FakeRuntime(), run_ids="r1")
    with pytest.raises(ValueError, match="unknown RayRuntime failpoint"):
        RayRuntime(failpoints={"poll_hangs": 1})
    runtime = RayRuntime(failpoints={"poll_hang": 1})
    assert RayExecutor(store, runtime=runtime, read_models_interval_s=None).runtime is runtime


def test_a_standalone_executor_takes_a_ray_address_or_a_runtime_not_both(tmp_path: Path) -> None:
    from wgstore.orchestration.executor.ray_executor import run_executor

    stop = threading.Event()
    stop.set()  # were the refusal missing, the executor would stop at once
    url = f"sqlite:///{tmp_path / 'never.db'}"
    with pytest.raises(ValueError, match="not both"):
        run_executor(url, stop, ray_address="127.0.0.1:1", runtime=FakeRuntime())
    assert not (tmp_path / "never.db").exists()


def test_loading_a_group_whose_stream_does_not_exist_is_stream_not_found(store: Any) -> None:
    from wgstore.projections import ProjectionError, StreamNotFoundError

    ex = RayExecutor(store, runtime=FakeRuntime(), read_models_interval_s=None)
    with pytest.raises(StreamNotFoundError, match="group nope has no events") as raised:
        ex.load("nope")
    assert not isinstance(raised.value, ProjectionError)  # nothing failed to fold


class TestRunEnded:
    def test_a_group_whose_run_has_ended_is_never_started_and_its_leftovers_are_released(
        self, store: Any, runtime: FakeRuntime, fake_executor: RayExecutor
    ) -> None:
        """A start request for a run that is over (appended by a controller that had lost the
        run, before fencing existed) starts nothing: the executor records why and releases
        anything left under the group's name."""
        from wgstore.events.run import RunAborted, RunCreated
        from wgstore.events.streams import run_stream

        store.append(run_stream("r9"), [RunCreated(run_id="r9"), RunAborted(reason="gc")])
        runtime.reserve_placement_group("g9", [{"CPU": 0.25}], "PACK", 5.0)  # a leftover
        _request(store, "g9", run_id="r9")
        state = _follow(store, "g9", _ended)
        assert state.status is WorkerGroupStatus.START_FAILED
        assert state.start_failure.error.type == "RunEnded"
        assert "run r9 had ended (ABORTED)" in state.start_failure.error.message
        assert state.released == ("placement_group:wgstore-g9",)
        assert runtime.list_group_resources() == {}
        assert _types(store, "g9") == ["WorkerGroupStartRequested", "WorkerGroupStartFailed"]


class TestSeveralExecutors:
    """Item 2 of the fencing issue: two executors on one store once started a group twice and
    made its stream unreadable (polls with ``poll_seq`` going backwards). Each group is now
    served by the executor that claims it, and its appends are fenced by the claim."""

    @staticmethod
    def _executor_ids(store: Any, group_id: str) -> list[str]:
        return [
            r.metadata["executor_id"]
            for r in store.read_stream(group_stream(group_id))
            if "executor_id" in r.metadata and r.type != "WorkerReported"  # workers append those
        ]

    @staticmethod
    def _poll_seqs(store: Any, group_id: str) -> list[int]:
        return [
            r.event.poll_seq
            for r in store.read_stream(group_stream(group_id))
            if r.type == "WorkerGroupPolled"
        ]

    def test_two_executors_start_each_group_once_and_keep_its_stream_whole(
        self, store: Any
    ) -> None:
        runtime = FakeRuntime(script=FakeScript(reports=5, return_value={"done": True}))
        with (
            RayExecutor(store, runtime=runtime, read_models_interval_s=None) as first,
            RayExecutor(store, runtime=runtime, read_models_interval_s=None) as second,
        ):
            groups = [f"g{n}" for n in range(4)]
            for group_id in groups:
                _request(store, group_id)
            for group_id in groups:
                _follow(
                    store, group_id, lambda s: s.poll_status is not None and s.poll_status.finished
                )
        assert first.errors == [] and second.errors == []
        for group_id in groups:
            starts = [c for c in runtime.calls if c == ("start_workers", group_id)]
            assert len(starts) == 1, f"{group_id} was started {len(starts)} times"
            assert len(set(self._executor_ids(store, group_id))) == 1
            seqs = self._poll_seqs(store, group_id)
            assert seqs == sorted(set(seqs))
            project_worker_group(store.read_stream(group_stream(group_id)))  # readable
        served = {self._executor_ids(store, g)[0] for g in groups}
        assert served <= {first.executor_id, second.executor_id}

    def test_an_executor_whose_claim_was_taken_stops_and_the_new_holder_carries_on(
        self, store: Any
    ) -> None:
        """The first executor paused past its claim while another took the group (a clock ahead
        of the claim): its next append is refused by the database, it lets the group go, and
        the new holder re-attaches to the workers by name and polls the group to its end."""
        from datetime import UTC, datetime, timedelta

        from wgstore.events.leases import acquire_lease

        runtime = FakeRuntime(script=FakeScript(reports=60, return_value={"done": True}))
        first = RayExecutor(store, runtime=runtime, read_models_interval_s=None).start()
        second = RayExecutor(store, runtime=runtime, read_models_interval_s=None)
        try:
            _request(store, "g1", poll_interval_s=0.05)
            _follow(store, "g1", lambda s: s.training_launched and s.version >= 12)  # reports
            ahead = datetime.now(UTC) + timedelta(minutes=5)
            assert acquire_lease(store, group_stream("g1"), second.executor_id, 30.0, now=ahead)
            second.start()
            state = _follow(
                store, "g1", lambda s: s.poll_status is not None and s.poll_status.finished
            )
            assert state.poll_status.finished
        finally:
            first.stop()
            second.stop()
        assert first.errors == [] and second.errors == []
        ids = self._executor_ids(store, "g1")
        assert ids[0] == first.executor_id and ids[-1] == second.executor_id
        handover = ids.index(second.executor_id)
        assert set(ids[handover:]) == {second.executor_id}  # nothing of the first after it
        seqs = self._poll_seqs(store, "g1")
        assert seqs == sorted(set(seqs))
        assert [c for c in runtime.calls if c[0] == "start_workers"] == [("start_workers", "g1")]

    def test_an_executor_that_stops_hands_its_groups_over_at_once(self, store: Any) -> None:
        from wgstore.events.leases import lease_of

        runtime = FakeRuntime(script=FakeScript(reports=40, return_value={"done": True}))
        first = RayExecutor(store, runtime=runtime, read_models_interval_s=None).start()
        _request(store, "g1", poll_interval_s=0.05)
        _follow(store, "g1", lambda s: s.training_launched and s.version >= 10)  # reports
        first.stop()  # a clean stop gives the claims up
        assert lease_of(store, group_stream("g1")) is None
        with RayExecutor(store, runtime=runtime, read_models_interval_s=None) as second:
            _follow(store, "g1", lambda s: s.poll_status is not None and s.poll_status.finished)
        assert second.errors == []
        assert self._executor_ids(store, "g1")[-1] == second.executor_id

    def test_the_claims_of_an_executor_killed_on_this_host_are_taken_at_once(
        self, store: Any
    ) -> None:
        """A SIGKILLed executor's claims would block its groups for a whole claim (30 s); its
        process is gone on this host, so the next executor takes them over at once."""
        import subprocess
        import sys

        from wgstore.events.leases import HolderProcess, acquire_lease, lease_of, this_process

        runtime = FakeRuntime(script=FakeScript(reports=3, return_value={"done": True}))
        child = subprocess.Popen([sys.executable, "-c", "pass"])
        child.wait()
        me = this_process()
        dead = HolderProcess(me.host, child.pid, me.start)
        _request(store, "g1")
        assert acquire_lease(store, group_stream("g1"), "killed-executor", 600.0, process=dead)
        with RayExecutor(store, runtime=runtime, read_models_interval_s=None) as executor:
            _follow(store, "g1", lambda s: s.poll_status is not None and s.poll_status.finished)
            claim = lease_of(store, group_stream("g1"))
        assert executor.errors == []
        assert self._executor_ids(store, "g1")[0] == executor.executor_id
        assert claim is not None and (claim.holder, claim.epoch) == (executor.executor_id, 2)

    def test_a_command_skipped_for_another_executors_claim_is_carried_out_once_it_lapses(
        self, store: Any
    ) -> None:
        """A start request whose group another executor (on another host) had claimed, then
        died: the claim lapses and the command, skipped meanwhile, is carried out."""
        from wgstore.events.leases import HolderProcess, acquire_lease

        runtime = FakeRuntime(script=FakeScript(reports=2, return_value={"done": True}))
        remote = HolderProcess("another-host", 1, "x/1")
        assert acquire_lease(store, group_stream("g1"), "remote-executor", 1.0, process=remote)
        with RayExecutor(
            store, runtime=runtime, read_models_interval_s=None, claim_s=1.5
        ) as executor:
            _request(store, "g1")
            state = _follow(store, "g1", lambda s: s.training_launched)
        assert executor.errors == []
        assert state.training_launched
        assert [c for c in runtime.calls if c[0] == "start_workers"] == [("start_workers", "g1")]


@event_type("ExecutorIdleNoted", version=1)
@dataclass(frozen=True, slots=True, kw_only=True)
class _Noted:
    text: str


class _CountingExecutor(RayExecutor):
    """Counts the loop's looks at the head, its reads of the log and its due work."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.turns = 0
        self.reads = 0
        self.due_work = 0

    def _wait_s(self) -> float:
        self.turns += 1
        return super()._wait_s()

    def _read_new(self) -> None:
        self.reads += 1
        super()._read_new()

    def _maybe_catch_up_read_models(self) -> None:
        self.due_work += 1
        super()._maybe_catch_up_read_models()


def test_an_idle_executor_reads_the_log_only_when_it_grew_and_still_does_its_due_work(
    store: Any, store_url: str
) -> None:
    """Between wakes the loop looks at the head, not a read that finds nothing: an idle
    executor on SQLite read the log every 10 ms (100 reads a second, each process). Its due
    work (polls, the read models' catch-up, the orphan sweep) still runs while nothing is
    appended, at most 0.5 s apart, and an append by another store object (another process: no
    local wake; on SQLite no notification at all) is still read."""
    from wgstore.events import EventStore

    executor = _CountingExecutor(store, runtime=FakeRuntime(), read_models_interval_s=None)
    executor.start()
    try:
        _until(lambda: executor._caught_up.is_set())
        work = executor.due_work
        _until(lambda: executor.due_work >= work + 3)  # idle, it still turns: ~1.5 s
        if not store.is_postgres:
            # (On Postgres every append to the database wakes it, other schemas' too: the
            # notifications' channel is the database's, and the suite's other worker appends.)
            turns, reads = executor.turns, executor.reads
            _until(lambda: executor.turns >= turns + 30)
            assert executor.reads == reads  # nothing was appended: nothing was read

        reads = executor.reads
        with EventStore.open(store_url) as other:
            other.append("idle-check", [_Noted(text="from another process")])
        head = store.head()
        _until(lambda: executor._position == head)  # read, by a head seen to move (SQLite)
        assert executor.reads > reads
    finally:
        executor.stop()
    assert executor.errors == []


class _ApplyingExecutor(RayExecutor):
    """Records the stream of every event the loop decoded and applied."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.applied: list[str] = []

    def _apply(self, record: Any) -> None:
        self.applied.append(record.stream_id)
        super()._apply(record)


def test_an_executor_decodes_only_the_events_of_its_own_groups(store: Any) -> None:
    """A run's executor (or one of several on a store) skips other groups' events before they
    are decoded (the fleet's executors decoded every process's reports): of a group it does not
    serve it decodes the start request alone, and its position still reaches the head."""
    runtime = FakeRuntime(script=FakeScript(reports=3, return_value={"done": True}))
    executor = _ApplyingExecutor(
        store, runtime=runtime, run_ids={"r1"}, read_models_interval_s=None
    ).start()
    try:
        _request(store, "theirs", run_id="r2")
        for n in range(20):
            store.append(
                group_stream("theirs"), [WorkerGroupShutdownRequested(reason=f"not ours {n}")]
            )
        store.append("elsewhere", [_Noted(text="not a group")])
        _request(store, "ours", run_id="r1")
        _follow(store, "ours", lambda s: s.poll_status is not None and s.poll_status.finished)
        ours = store.stream_version(group_stream("ours"))
        head = store.head()
        _until(lambda: executor._position >= head)
    finally:
        executor.stop()
    assert executor.errors == []
    assert executor.applied.count(group_stream("theirs")) == 1  # its request
    assert "elsewhere" not in executor.applied
    assert executor.applied.count(group_stream("ours")) >= ours  # every one of its own


class _ReportsOfG1:
    """The test's store, whose appends of group g1's reports first call ``before`` (a slow or
    failing database round trip of one group's reports; everything else goes through)."""

    def __init__(self, store: Any, before: Callable[[], None]) -> None:
        self._store = store
        self._before = before

    def append(self, stream_id: str, events: Any, *args: Any, **kwargs: Any) -> Any:
        if stream_id == group_stream("g1") and any(
            type(getattr(e, "event", e)).__name__ == "WorkerReported" for e in events
        ):
            self._before()
        return self._store.append(stream_id, events, *args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)


def _reports(store: Any, group_id: str) -> list[tuple[int, int]]:
    return sorted(
        (r.event.world_rank, r.event.index)
        for r in store.read_stream(group_stream(group_id))
        if r.type == "WorkerReported"
    )


class TestReports:
    def test_a_group_whose_report_append_waits_holds_up_no_other_group_s_polls(
        self, store: Any, runtime: FakeRuntime
    ) -> None:
        """Fake workers append their reports as real ones do, each on its own: a poll held in
        one group's report append (the fleet benchmark's) must not stop other groups' polls.
        It did: the poll held the runtime's lock across the appends."""
        waiting, go_on = threading.Event(), threading.Event()

        def wait_to_go_on() -> None:
            waiting.set()
            assert go_on.wait(DEADLINE_S)

        slow = _ReportsOfG1(store, wait_to_go_on)
        with RayExecutor(slow, runtime=runtime, max_threads=2, read_models_interval_s=None) as ex:
            _request(store, "g1")
            assert waiting.wait(DEADLINE_S)
            _request(store, "g2")
            try:
                g2 = _follow(
                    store, "g2", lambda s: s.poll_status is not None and s.poll_status.finished
                )
                g1_reports_meanwhile = _reports(store, "g1")
            finally:
                go_on.set()
            _follow(store, "g1", lambda s: s.poll_status is not None and s.poll_status.finished)
        assert ex.errors == []
        assert g2.poll_status.finished and _reports(store, "g2") == [(0, 0), (0, 1), (1, 0), (1, 1)]
        assert g1_reports_meanwhile == []
        assert _reports(store, "g1") == [(0, 0), (0, 1), (1, 0), (1, 1)]

    def test_a_report_append_that_fails_fails_the_poll_and_is_made_at_the_next(
        self, store: Any, runtime: FakeRuntime
    ) -> None:
        failures = [RuntimeError("the database went away (injected)")]

        def fail_once() -> None:
            if failures:
                raise failures.pop()

        flaky = _ReportsOfG1(store, fail_once)
        with RayExecutor(flaky, runtime=runtime, read_models_interval_s=None) as ex:
            _request(store, "g1")
            _follow(store, "g1", lambda s: s.poll_status is not None and s.poll_status.finished)
        assert failures == []
        assert len(ex.errors) == 1 and "poll of group g1" in ex.errors[0]
        assert "the database went away" in ex.errors[0]
        assert _reports(store, "g1") == [(0, 0), (0, 1), (1, 0), (1, 1)]  # each once
