"""The controller loop on a real store (SQLite and Postgres), without Ray.

The executor's side is played by hand (``decide_sim.World`` appending to the real store): the
controller runs with ``executor="external"`` and is stepped (``step()``) or run in a thread.
"""

from __future__ import annotations

import contextlib
import threading
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from tests.orchestration.decide_sim import World
from tests.waiting import wait_until
from wgstore.events import NO_STREAM
from wgstore.events.leases import acquire_lease, lease_of
from wgstore.events.run import FailureConfig, RunCreated, ScalingConfig
from wgstore.events.streams import group_stream, run_stream
from wgstore.events.worker_group import WorkerGroupContext
from wgstore.orchestration.errors import RunLeaseHeldError, RunLeaseLostError, RunNotFoundError
from wgstore.orchestration.run.controller import RunController, read_run
from wgstore.orchestration.run.decide import attempt_group_id, decide
from wgstore.projections.state import WorkerGroupState, project_worker_group


class StoreLog:
    """What ``World`` needs of a log, on a real store."""

    def __init__(self, store: Any) -> None:
        self.store = store

    def append(self, stream_id: str, events: list[Any], expected: Any = None) -> None:
        self.store.append(stream_id, events)


def _create(
    store: Any, run_id: str = "r1", config: FailureConfig | None = None, lease_s: float = 30.0
) -> None:
    context = WorkerGroupContext(num_workers=2, train_fn="examples.train:train_fn")
    store.append(
        run_stream(run_id),
        [
            RunCreated(
                run_id=run_id,
                scaling_config=ScalingConfig(num_workers=2),
                failure_config=config or FailureConfig(max_failures=1),
                context=context,
                lease_s=lease_s,
            )
        ],
        expected_version=NO_STREAM,
    )


def _group(store: Any, group_id: str) -> WorkerGroupState:
    return project_worker_group(store.read_stream(group_stream(group_id)))


def _types(store: Any, stream_id: str) -> list[str]:
    return [r.type for r in store.read_stream(stream_id)]


def test_a_run_is_driven_through_a_retry_to_its_end(store: Any) -> None:
    _create(store)
    world = World(StoreLog(store))  # type: ignore[arg-type]
    with RunController(store, "r1", executor="external") as controller:
        assert controller.step().to_state == "SCHEDULING"
        g1 = attempt_group_id("r1", 1)
        world.start(_group(store, g1))
        world.report(_group(store, g1), "/ckpt/1")
        assert controller.step().to_state == "RUNNING"
        assert controller.step().empty
        world.fail(_group(store, g1), [1])
        assert controller.step().to_state == "RESTARTING"
        world.shut_down(_group(store, g1))
        assert controller.step().to_state == "RESCHEDULING"
        g2 = attempt_group_id("r1", 2)
        assert _group(store, g2).context.resume_checkpoint == "/ckpt/1"
        world.start(_group(store, g2))
        controller.step()
        world.finish(_group(store, g2))
        controller.step()
        world.shut_down(_group(store, g2))
        controller.step()
    run = read_run(store, "r1")
    assert (run.status.value, run.groups, run.failures) == ("FINISHED", (g1, g2), 1)
    assert [c.resumed for c in run.controllers] == [False]
    assert lease_of(store, "r1") is None  # released at the end


def test_run_waits_for_the_log_and_ends_with_the_run(store: Any) -> None:
    _create(store)
    controller = RunController(store, "r1", executor="external")
    result: list[Any] = []
    thread = threading.Thread(target=lambda: result.append(controller.run(timeout_s=60)))
    thread.start()
    world = World(StoreLog(store))  # type: ignore[arg-type]
    g1 = attempt_group_id("r1", 1)

    def wait_for(predicate: Any) -> WorkerGroupState:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            if store.stream_version(group_stream(g1)):
                state = _group(store, g1)
                if predicate(state):
                    return state
            store.wait_for_new(store.head(), 0.2)
        raise AssertionError("the controller did not act in time")

    world.start(wait_for(lambda s: s.status.value == "REQUESTED"))
    world.finish(wait_for(lambda s: read_run(store, "r1").controller_state == "RUNNING"))
    world.shut_down(wait_for(lambda s: s.status.value == "SHUTTING_DOWN"))
    thread.join(20)
    controller.close()
    assert not thread.is_alive()
    assert result[0].status.value == "FINISHED"


def test_a_second_controller_is_refused_naming_the_holder_and_its_expiry(store: Any) -> None:
    _create(store)
    with RunController(store, "r1", executor="external") as first:
        second = RunController(store, "r1", executor="external")
        with pytest.raises(RunLeaseHeldError, match=first.controller_id) as refused:
            second.start()
        assert "expires at" in str(refused.value)
    assert [c.controller_id for c in read_run(store, "r1").controllers] == [first.controller_id]


def test_a_controller_killed_on_this_host_is_taken_over_at_once(store: Any) -> None:
    """A ``wgstore run`` whose process was SIGKILLed: its 10-minute lease has not expired, but
    its pid is gone on this host, so a resume takes the run at once (the epoch grows)."""
    import signal
    import subprocess
    import sys

    from wgstore.events.leases import HolderProcess, this_process

    _create(store, lease_s=600.0)
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    me = this_process()
    gone = HolderProcess(me.host, child.pid, f"{me.start.split('/')[0]}/{_start_of(child.pid)}")
    held = acquire_lease(store, "r1", "killed-controller", 600.0, process=gone)
    assert held is not None
    live = RunController(store, "r1", executor="external")
    with pytest.raises(RunLeaseHeldError, match=f"pid {child.pid} on {me.host}"):
        live.start()  # its process still runs: refused
    child.send_signal(signal.SIGKILL)
    child.wait()
    with RunController(store, "r1", executor="external") as resumed:
        assert resumed.fence is not None and resumed.fence.epoch == held.epoch + 1
    assert read_run(store, "r1").controllers[-1].controller_id == resumed.controller_id


def _start_of(pid: int) -> str:
    from pathlib import Path

    stat = Path(f"/proc/{pid}/stat").read_text()
    return stat[stat.rindex(")") + 2 :].split()[19]


def test_a_controller_asked_to_wait_takes_the_run_once_the_lease_expires(store: Any) -> None:
    _create(store)
    from wgstore.events.leases import HolderProcess

    remote = HolderProcess("another-host", 1, "x/1")
    assert acquire_lease(store, "r1", "remote-controller", 1.0, process=remote)
    with RunController(store, "r1", executor="external", lease_wait_s=60) as waited:
        assert waited.fence is not None and waited.fence.epoch == 2


def test_a_controller_deciding_on_a_stale_read_appends_nothing(store: Any) -> None:
    _create(store)
    with RunController(store, "r1", executor="external") as controller:
        stale = read_run(store, "r1")
        controller.step()
        version = store.stream_version(run_stream("r1"))
        late = decide(stale, None, datetime.now(UTC))
        # the same decision (same ids): the store keeps the first; any other: ConcurrencyError
        from wgstore.events import ConcurrencyError

        with contextlib.suppress(ConcurrencyError):
            store.append(run_stream("r1"), list(late.run_events), expected_version=stale.version)
        assert store.stream_version(run_stream("r1")) == version
        assert controller.step().empty  # re-read: nothing left to do


def test_a_controller_abandoned_between_its_two_appends_is_resumed_without_repeats(
    store: Any,
) -> None:
    _create(store)
    first = RunController(store, "r1", executor="external").start()
    run = read_run(store, "r1")
    decision = decide(run, None, datetime.now(UTC))
    store.append(run.stream_id, list(decision.run_events), expected_version=run.version)
    first.close()  # died before the group's start request; its lease is given up
    second = RunController(store, "r1", executor="external").start()
    again = second.step()
    assert again.run_events == () and again.group_events == decision.group_events
    second.step()
    assert _types(store, group_stream(attempt_group_id("r1", 1))) == ["WorkerGroupStartRequested"]
    second.close()
    run = read_run(store, "r1")
    assert [c.resumed for c in run.controllers] == [False, True]


def test_a_controller_that_lost_its_lease_stops_without_acting(store: Any) -> None:
    """Paused past its lease (the keeper thread too) while another holder took the run with a
    clock ahead of the lease: the controller stops, and nothing it tries is written."""
    _create(store)
    controller = RunController(store, "r1", executor="external", lease_s=30.0).start()
    ahead = datetime.now(UTC) + timedelta(minutes=5)
    assert acquire_lease(store, "r1", "thief", 30.0, now=ahead)  # taken over: epoch + 1
    version = store.stream_version(run_stream("r1"))
    with pytest.raises(RunLeaseLostError, match="thief"):
        controller.run(timeout_s=30)
    assert store.stream_version(run_stream("r1")) == version
    assert lease_of(store, "r1").holder == "thief"  # type: ignore[union-attr]
    controller.close()
    assert lease_of(store, "r1").holder == "thief"  # type: ignore[union-attr]


def test_a_stale_controller_writes_neither_the_run_decision_nor_the_group_start(
    store: Any,
) -> None:
    """The defect of the fencing issue: a controller paused between deciding and appending
    thaws after gc took the run. Its decision (the run's events and the attempt's start
    request, one atomic append) is refused by the database, not by a check in the client."""
    _create(store)
    controller = RunController(store, "r1", executor="external", lease_s=30.0).start()
    run = read_run(store, "r1")
    decision = decide(run, None, datetime.now(UTC))
    assert decision.run_events and decision.group_events  # the first attempt's start
    ahead = datetime.now(UTC) + timedelta(minutes=5)
    assert acquire_lease(store, "r1", "gc-x", 30.0, now=ahead)
    before = [(r.stream_id, r.version) for r in store.read_all()]
    with pytest.raises(RunLeaseLostError, match="gc-x"):
        controller.step()
    assert [(r.stream_id, r.version) for r in store.read_all()] == before
    assert not store.stream_version(group_stream(attempt_group_id("r1", 1)))
    controller.close()


def test_the_lease_is_renewed_while_the_controller_is_busy_elsewhere(store: Any) -> None:
    """Item 3: the controller never steps (it is blocked, connecting to Ray, say), yet its lease
    stays ahead of the clock for several lease lengths."""
    _create(store)
    controller = RunController(store, "r1", executor="external", lease_s=0.6).start()
    try:
        first = lease_of(store, "r1").expires_at  # type: ignore[union-attr]
        wait_until(
            lambda: lease_of(store, "r1").expires_at > first + timedelta(seconds=1.2),  # type: ignore[union-attr]
            timeout_s=60,
            what="the keeper to renew the lease twice",
        )
        assert not lease_of(store, "r1").expired()  # type: ignore[union-attr]
        controller.keep_lease()  # still ours
    finally:
        controller.close()
    assert lease_of(store, "r1") is None


def test_the_lease_stays_live_while_the_executor_is_still_connecting(store: Any) -> None:
    """Item 3 of the fencing issue: with Ray unreachable, connecting took longer than the lease
    and a second controller took the run from a live one. The keeper thread renews the lease
    while ``start()`` is blocked in the executor's connect, so a second controller is refused."""
    from wgstore.orchestration import RayExecutor
    from wgstore.orchestration.errors import RunLeaseHeldError
    from wgstore.orchestration.runtimes.fake_runtime import FakeRuntime

    connecting = threading.Event()
    reachable = threading.Event()

    class SlowCluster(FakeRuntime):
        def connect(self) -> None:
            connecting.set()
            reachable.wait(60)
            super().connect()

    _create(store)
    executor = RayExecutor(store, runtime=SlowCluster(), read_models_interval_s=None)
    controller = RunController(store, "r1", executor=executor, lease_s=2.0)
    starting = threading.Thread(target=controller.start)
    starting.start()
    try:
        assert connecting.wait(30)
        first = lease_of(store, "r1").expires_at  # type: ignore[union-attr]
        wait_until(
            lambda: lease_of(store, "r1").expires_at > first + timedelta(seconds=3),  # type: ignore[union-attr]
            timeout_s=60,
            what="the lease to be renewed past its first length while connecting",
        )
        with pytest.raises(RunLeaseHeldError):
            RunController(store, "r1", executor="external").start()
    finally:
        reachable.set()
        starting.join(30)
        executor.stop()
        controller.close()


def test_an_unknown_run_is_refused_with_how_to_find_one(store: Any) -> None:
    with pytest.raises(RunNotFoundError, match="wgstore runs"):
        RunController(store, "nope", executor="external")


def _world_acts(store: Any, world: World, run_id: str) -> None:
    """The executor and workers move the current group on: attempt 1 fails, attempt 2 finishes."""
    run = read_run(store, run_id)
    group = _group(store, run.current_group_id)  # type: ignore[arg-type]
    if group.status.value == "REQUESTED":
        world.start(group)
        group = _group(store, group.group_id)
        world.report(group, f"/ckpt/{group.attempt}")
        group = _group(store, group.group_id)
        if group.attempt == 1:
            world.fail(group, [1])
        else:
            world.finish(group)
    elif group.status.value == "SHUTTING_DOWN":
        world.shut_down(group)
    else:
        raise AssertionError(f"stuck: {run.controller_state}, group {group.status.value}")


@pytest.mark.parametrize(
    "dies_moving_to",
    ["SCHEDULING", "RUNNING", "RESTARTING", "RESCHEDULING", "SHUTTING_DOWN", "FINISHED"],
)
def test_a_controller_abandoned_mid_step_in_any_state_is_resumed_without_repeats(
    store: Any, dies_moving_to: str
) -> None:
    _create(store)
    world = World(StoreLog(store))  # type: ignore[arg-type]
    controller = RunController(store, "r1", executor="external").start()
    while True:  # drive until the step that moves to the state the controller dies in
        run = read_run(store, "r1")
        current = run.current_group_id
        group = (
            _group(store, current)
            if current and store.stream_version(group_stream(current))
            else None
        )
        decision = decide(run, group, datetime.now(UTC))
        if decision.to_state == dies_moving_to:
            store.append(run.stream_id, list(decision.run_events), expected_version=run.version)
            break  # dies here: run events appended, group events not
        if controller.step().empty:
            _world_acts(store, world, "r1")
    controller.close()
    resumed = RunController(store, "r1", executor="external").start()
    while not read_run(store, "r1").ended:
        if resumed.step().empty:
            _world_acts(store, world, "r1")
    resumed.close()
    run = read_run(store, "r1")
    g1, g2 = attempt_group_id("r1", 1), attempt_group_id("r1", 2)
    assert (run.status.value, run.groups, run.failures) == ("FINISHED", (g1, g2), 1)
    # a run that ended in the dying append leaves the next controller nothing to take
    ended_already = dies_moving_to == "FINISHED"
    assert [c.resumed for c in run.controllers] == [False] + ([] if ended_already else [True])
    for group_id in (g1, g2):
        types = _types(store, group_stream(group_id))
        assert types.count("WorkerGroupStartRequested") == 1
        assert types.count("WorkerGroupShutdownRequested") == 1
    moves = [t.to_state for t in run.transitions]
    assert moves == [
        "SCHEDULING",
        "RUNNING",
        "RESTARTING",
        "RESCHEDULING",
        "RUNNING",
        "SHUTTING_DOWN",
        "FINISHED",
    ]
    assert _group(store, g2).context.resume_checkpoint == "/ckpt/1"
