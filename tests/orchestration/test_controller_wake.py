"""When a waiting ``RunController`` wakes (issue 25): for events on its own streams, never for
other runs' events or reports, none missed, and at its lease's deadline with nothing in the log.

Real stores on both backends, no Ray: the executor and the workers are played by hand
(``decide_sim.World``) through *another* store object on the same database, as another process
would write, so only the controller's stream watch can wake it. The runs' leases are long (the
idle re-check, ``lease_s / 3``, is minutes away) unless the test is about the lease: a
controller that moves in time was woken by the event.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from tests.orchestration.decide_sim import World
from tests.waiting import wait_until
from wgstore.events import NO_STREAM, EventStore, event_type
from wgstore.events.leases import acquire_lease
from wgstore.events.run import FailureConfig, RunCreated, ScalingConfig
from wgstore.events.streams import group_stream, run_stream
from wgstore.events.worker_group import WorkerGroupContext, WorkerGroupShutdownRequested
from wgstore.orchestration.errors import RunLeaseLostError
from wgstore.orchestration.run.controller import RunController, read_run
from wgstore.orchestration.run.decide import Decision, attempt_group_id
from wgstore.projections.state import WorkerGroupState, project_worker_group

LONG_LEASE_S = 900.0  # re-checks every 300 s: far beyond every wait below
G1 = attempt_group_id("r1", 1)
R2_G1 = attempt_group_id("r2", 1)  # another run's group


@event_type("ControllerWakeNoted", version=1)
@dataclass(frozen=True, slots=True, kw_only=True)
class Noted:
    text: str


class OtherLog:
    """What ``World`` needs of a log: appends through the other store object."""

    def __init__(self, store: EventStore) -> None:
        self.store = store

    def append(self, stream_id: str, events: list[Any], expected: Any = None) -> None:
        self.store.append(stream_id, events)


class Controller(RunController):
    """Counts its reads; calls ``after_idle_step`` after a step that found nothing to do (that
    is, after the read and before the wait) until it returns True."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.reads = 0
        self.after_idle_step: Callable[[], bool] | None = None

    def refresh(self) -> tuple[Any, WorkerGroupState | None]:
        self.reads += 1
        return super().refresh()

    def step(self) -> Decision:
        decision = super().step()
        hook = self.after_idle_step
        if decision.empty and hook is not None and hook():
            self.after_idle_step = None
        return decision


@pytest.fixture
def other(store_url: str) -> Iterator[EventStore]:
    writer = EventStore.open(store_url)
    try:
        yield writer
    finally:
        writer.close()


def _create(store: EventStore, run_id: str, lease_s: float) -> None:
    context = WorkerGroupContext(num_workers=2, train_fn="examples.train:train_fn")
    created = RunCreated(
        run_id=run_id,
        scaling_config=ScalingConfig(num_workers=2),
        failure_config=FailureConfig(max_failures=1),
        context=context,
        lease_s=lease_s,
    )
    store.append(run_stream(run_id), [created], expected_version=NO_STREAM)


def _group(store: EventStore) -> WorkerGroupState | None:
    if not store.stream_version(group_stream(G1)):
        return None
    return project_worker_group(store.read_stream(group_stream(G1)))


def _state(store: EventStore) -> str:
    return read_run(store, "r1").controller_state


class Running:
    """``controller.run()`` in a thread."""

    def __init__(self, controller: RunController, timeout_s: float = 600) -> None:
        self.controller = controller
        self.result: list[Any] = []
        self.error: list[BaseException] = []
        self.thread = threading.Thread(target=self._run, args=(timeout_s,), daemon=True)
        self.thread.start()

    def _run(self, timeout_s: float) -> None:
        try:
            self.result.append(self.controller.run(timeout_s=timeout_s))
        except BaseException as error:  # noqa: BLE001 - the test looks at it
            self.error.append(error)

    def join(self, timeout_s: float = 120) -> None:
        self.thread.join(timeout_s)
        self.controller.close()
        assert not self.thread.is_alive(), "the controller did not end"


def _until(condition: Callable[[], bool], what: str) -> None:
    wait_until(condition, timeout_s=120, what=what)


def test_an_event_landing_between_the_controllers_read_and_its_wait_wakes_it(
    store: EventStore, other: EventStore
) -> None:
    _create(other, "r1", LONG_LEASE_S)
    world = World(OtherLog(other))  # type: ignore[arg-type]
    controller = Controller(store, "r1", executor="external")

    def start_the_group() -> bool:
        group = _group(other)
        if group is None or group.status.value != "REQUESTED":
            return False
        world.start(group)  # after the step read the group REQUESTED, before the wait
        return True

    controller.after_idle_step = start_the_group
    running = Running(controller)
    _until(lambda: _state(other) == "RUNNING", "the controller to see the group started")
    assert controller.after_idle_step is None  # the hook did append between read and wait
    # A poll (the workers finished) wakes it too; then the shutdown ends the run.
    world.finish(_group(other))  # type: ignore[arg-type]
    _until(lambda: _state(other) == "SHUTTING_DOWN", "the controller to see the workers done")
    world.shut_down(_group(other))  # type: ignore[arg-type]
    running.join()
    assert not running.error and running.result[0].status.value == "FINISHED"


def test_reports_and_other_streams_do_not_wake_it(store: EventStore, other: EventStore) -> None:
    _create(other, "r1", LONG_LEASE_S)
    world = World(OtherLog(other))  # type: ignore[arg-type]
    controller = Controller(store, "r1", executor="external")
    running = Running(controller)
    _until(lambda: _group(other) is not None, "the first attempt's start request")
    world.start(_group(other))  # type: ignore[arg-type]
    _until(lambda: _state(other) == "RUNNING", "the controller to see the group started")
    with store.watch_streams() as probe:  # shares the controller's follower: its position
        head = other.head()
        _until(lambda: probe.position() >= head, "the follower to pass the RUNNING append")
        reads = controller.reads
        for n in range(20):
            world.report(_group(other), None)  # type: ignore[arg-type]
            other.append(group_stream(R2_G1), [WorkerGroupShutdownRequested(reason=str(n))])
            other.append("elsewhere-1", [Noted(text=str(n))])
        head = other.head()
        _until(lambda: probe.position() >= head, "the follower to pass the burst")
    # 40 reports and 40 other events woke it at most for what was in flight before the burst
    # (a wake-up for its own RUNNING append); woken by each, it would have read 80 times.
    assert controller.reads - reads <= 2, controller.reads - reads
    world.finish(_group(other))  # type: ignore[arg-type]
    _until(lambda: _state(other) == "SHUTTING_DOWN", "a poll to wake it")
    world.shut_down(_group(other))  # type: ignore[arg-type]
    running.join()
    assert not running.error


def test_with_on_update_reports_wake_it(store: EventStore, other: EventStore) -> None:
    _create(other, "r1", LONG_LEASE_S)
    world = World(OtherLog(other))  # type: ignore[arg-type]
    seen: list[WorkerGroupState] = []
    controller = Controller(store, "r1", executor="external", on_update=seen.append)
    running = Running(controller)
    _until(lambda: _group(other) is not None, "the first attempt's start request")
    world.start(_group(other))  # type: ignore[arg-type]
    _until(lambda: _state(other) == "RUNNING", "the controller to see the group started")
    world.report(_group(other), None)  # type: ignore[arg-type]
    _until(
        lambda: bool(seen) and sum(seen[-1].report_counts.values()) == 2,
        "on_update to get the reports",
    )
    world.finish(_group(other))  # type: ignore[arg-type]
    _until(lambda: _state(other) == "SHUTTING_DOWN", "a poll to wake it")
    world.shut_down(_group(other))  # type: ignore[arg-type]
    running.join()
    assert not running.error


def test_with_nothing_in_the_log_it_wakes_at_its_lease_deadline(
    store: EventStore, other: EventStore
) -> None:
    """The keeper stops renewing (as when the store is unreachable): the controller, idle with
    no event coming, wakes when the lease it holds runs out and stops, writing nothing."""
    _create(other, "r1", 3.0)
    controller = Controller(store, "r1", executor="external")
    running = Running(controller)
    _until(lambda: _group(other) is not None, "the first attempt's start request")
    version = other.stream_version(run_stream("r1"))
    keeper = controller._keeper
    assert keeper is not None
    keeper.stop()  # no more renewals; no event will come either
    started = time.monotonic()
    running.thread.join(120)
    assert not running.thread.is_alive(), "the controller did not wake at its lease deadline"
    assert time.monotonic() - started < 60
    assert running.error and isinstance(running.error[0], RunLeaseLostError)
    assert other.stream_version(run_stream("r1")) == version
    controller.close()


def test_a_lease_taken_while_it_waits_stops_it_without_an_event(
    store: EventStore, other: EventStore
) -> None:
    _create(other, "r1", 3.0)
    controller = Controller(store, "r1", executor="external")
    running = Running(controller)
    _until(lambda: _group(other) is not None, "the first attempt's start request")
    version = other.stream_version(run_stream("r1"))
    ahead = datetime.now(UTC) + timedelta(minutes=5)
    assert acquire_lease(other, "r1", "thief", 30.0, now=ahead)  # no event on its streams
    running.thread.join(120)
    assert not running.thread.is_alive(), "the controller did not notice the lease was taken"
    assert running.error and isinstance(running.error[0], RunLeaseLostError)
    assert "thief" in str(running.error[0])
    assert other.stream_version(run_stream("r1")) == version
    controller.close()
