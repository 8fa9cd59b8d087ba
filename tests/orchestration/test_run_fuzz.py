"""Whole runs without Ray: the real controller loop and a real executor on ``FakeRuntime``.

Hypothesis draws a few hundred runs: a failure budget, a script, one fault per attempt (a start
failing at a random stage, placement never ready, a cluster too small, workers raising, dying or
hanging at a random poll, a node lost), the controller killed before random appends (abandoned,
no cleanup; the next one takes its lease over) and the executor restarted before others. Each
run is driven to its end on a real store (a SQLite file; a few on Postgres) and its log checked
(run_fuzz.check_log): one end event, never two live attempts, every failure counted once by
kind, the budget respected, retries from the latest checkpoint, no command carried out twice,
``decide`` reproducing every recorded decision, nothing left on the fake cluster; and the end
is the one Ray Train's counting gives (run_fuzz.expected).

No sleeps: the fake's workers advance one step per poll (every 5 ms), a ticker thread moves the
fake's health-check clock, and the controller waits on the log. CI: 200 runs on SQLite and 20
on Postgres, derandomized (about 15 s). Locally: ``WGSTORE_FUZZ_EXAMPLES=3000`` runs more
(Postgres a tenth of them), ``WGSTORE_FUZZ_NO_SHRINK=1`` reports the first failure at once, and
``WGSTORE_FUZZ_DEADLINE_S`` bounds each controller's wait for its run (default 30 s).
"""

from __future__ import annotations

import os
import uuid
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, Phase, currently_in_test_context, given, settings
from hypothesis import event as hypothesis_event
from hypothesis import strategies as st

from tests.orchestration.run_fuzz import (
    DEADLINE_S,
    UNKNOWN,
    Fault,
    Scenario,
    check_log,
    create_run,
    drive,
    expected,
    join_halted,
)
from wgstore.events import EventStore
from wgstore.events.run import FailureConfig
from wgstore.events.streams import group_stream
from wgstore.events.worker_group import StartStage, WorkerGroupContext
from wgstore.orchestration import RayExecutor, WorkerGroup
from wgstore.orchestration.runtimes.fake_runtime import FakeRuntime, FakeScript
from wgstore.orchestration.worker_group import follow_group
from wgstore.projections.run_state import RunState
from wgstore.projections.state import project_worker_group

EXAMPLES = int(os.environ.get("WGSTORE_FUZZ_EXAMPLES", "200"))

limits = st.sampled_from([-1, 0, 1, 2])


@st.composite
def faults(draw: Any, workers: int, nodes: int, reports: int) -> Fault:
    kind = draw(
        st.sampled_from(
            ["none", "fail_stage", "never_ready", "cannot_fit", "raise", "die", "hang", "lose_node"]
        )
    )
    if kind == "fail_stage":
        return Fault(kind, stage=draw(st.sampled_from(list(StartStage))))
    if kind in ("raise", "die", "hang"):
        ranks = draw(st.sets(st.integers(0, workers - 1), min_size=1))
        return Fault(kind, ranks=tuple(sorted(ranks)), poll=draw(st.integers(1, reports + 1)))
    if kind == "lose_node":
        return Fault(kind, node=draw(st.integers(0, min(nodes, workers) - 1)))
    return Fault(kind)


@st.composite
def scenarios(draw: Any) -> Scenario:
    workers = draw(st.integers(1, 3))
    nodes = draw(st.integers(1, 2))
    reports = draw(st.integers(1, 3))
    # finite faults, so even unlimited budgets end
    attempt_faults = draw(st.lists(faults(workers, nodes, reports), min_size=1, max_size=4))
    return Scenario(
        run_id=f"fuzz-{uuid.uuid4().hex[:12]}",
        workers=workers,
        nodes=nodes,
        reports=reports,
        checkpoint=draw(st.booleans()),
        failure_config=FailureConfig(
            max_failures=draw(limits),
            controller_failure_limit=draw(limits),
            max_preemption_failures=draw(limits),
        ),
        faults=tuple(attempt_faults),
        controller_kills=frozenset(draw(st.sets(st.integers(1, 14), max_size=3))),
        executor_restarts=frozenset(draw(st.sets(st.integers(1, 14), max_size=2))),
        zombie_steps=frozenset(draw(st.sets(st.integers(1, 14), max_size=2))),
        initial_checkpoint=draw(st.sampled_from([None, "memory://given/ckpt"])),
    )


def event(what: str) -> None:
    """Count ``what`` in hypothesis' statistics (``--hypothesis-show-statistics``)."""
    if currently_in_test_context():
        hypothesis_event(what)


def run_and_check(store: EventStore, scenario: Scenario) -> RunState:
    """Drive the scenario, check its log, compare its end with the oracle; returns the run."""
    create_run(store, scenario)
    runtime, report = drive(store, scenario)
    assert report.executor_errors == []
    for what, count in [
        ("controller killed", report.kills),
        ("executor restarted", report.executor_restarts),
        ("zombie controller stepped", report.zombie_steps),
    ]:
        event(f"{what}: {'yes' if count else 'no'}")
    run = check_log(store, scenario, runtime)
    event(f"run {run.status.value.lower()} after {run.attempts} attempt(s)")
    for decision in run.decisions:
        event(f"{decision.failure_kind} failure, {decision.decision}")
    if scenario.executor_restarts and any(f.kind == "lose_node" for f in scenario.faults):
        # An executor restarted after a node was lost and before it polled finds the workers
        # gone by name and cannot tell it was a preemption (neither can Ray's get_actor): the
        # failure then counts as a worker_group one. check_log held on what the log shows.
        return run
    want = expected(scenario)
    got = tuple((d.failure_kind, d.decision, d.failures_so_far) for d in run.decisions)
    assert (run.status.value, got) == (want.status, want.decisions)
    assert (
        tuple((r.world_rank for r in run.errors) if run.status.value == "ERRORED" else ())
        == want.failed_ranks
    )
    resumed_from = tuple(
        project_worker_group(store.read_stream(group_stream(g))).context.resume_checkpoint
        for g in run.groups
    )
    assert len(resumed_from) == len(want.resume_checkpoints)
    for got_checkpoint, want_checkpoint in zip(resumed_from, want.resume_checkpoints, strict=True):
        assert want_checkpoint in (UNKNOWN, got_checkpoint), (resumed_from, want)
    assert run.controllers and len(run.controllers) <= report.controllers
    return run


FUZZ = settings(
    max_examples=EXAMPLES,
    derandomize=True,
    deadline=None,
    database=None,
    phases=[Phase.generate] if os.environ.get("WGSTORE_FUZZ_NO_SHRINK") else list(Phase),
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


@pytest.fixture
def sqlite_store(tmp_path: Path) -> Any:
    """One SQLite file for every example (each run has its own id, each example its own fake)."""
    with EventStore.open(f"sqlite:///{tmp_path / 'fuzz.db'}") as store:
        yield store
        join_halted()


@FUZZ
@given(scenario=scenarios())
def test_random_runs_on_sqlite(sqlite_store: EventStore, scenario: Scenario) -> None:
    run_and_check(sqlite_store, scenario)


@pytest.fixture
def pg_store(pg_url: str) -> Any:
    with EventStore.open(pg_url) as store:
        yield store
        join_halted()


@settings(FUZZ, max_examples=max(20, EXAMPLES // 10))
@given(scenario=scenarios())
def test_random_runs_on_postgres(pg_store: EventStore, scenario: Scenario) -> None:
    run_and_check(pg_store, scenario)


def _scenario(**overrides: Any) -> Scenario:
    options: dict[str, Any] = {
        "run_id": f"fixed-{uuid.uuid4().hex[:12]}",
        "workers": 3,
        "nodes": 2,
        "reports": 2,
        "checkpoint": True,
        "failure_config": FailureConfig(max_failures=0, max_preemption_failures=1),
        "faults": (),
    }
    options.update(overrides)
    return Scenario(**options)


def test_a_lost_node_on_the_fake_is_a_preemption_failure(sqlite_store: EventStore) -> None:
    """Regression (found by the fuzzing): FakeRuntime.lose_node killed the actors, but the fake
    poller did not add Ray's preemption note, so a lost node counted against ``max_failures``
    (here 0: the run errored) instead of ``max_preemption_failures``."""
    scenario = _scenario(faults=(Fault("lose_node", node=1),))
    run = run_and_check(sqlite_store, scenario)
    (decision,) = run.decisions
    assert (decision.failure_kind, decision.decision, decision.failures_so_far) == (
        "preemption",
        "RETRY",
        1,
    )
    assert [e.world_rank for e in decision.errors] == [2]  # the one rank on fake-node-1
    assert run.status.value == "FINISHED" and run.attempts == 2


def test_an_executor_restarted_after_every_worker_died_records_their_failure(
    sqlite_store: EventStore,
) -> None:
    """Regression (found by the fuzzing): a new executor re-attaching to a running group whose
    workers were all gone (their node lost while no executor ran) took the group for finished
    and never recorded why: the group stayed RUNNING and its run waited forever."""
    runtime = FakeRuntime(script=FakeScript(reports=10_000), nodes=1)
    context = WorkerGroupContext(
        num_workers=2, train_fn="examples.train:train_fn", poll_interval_s=0.005
    )
    group_id = f"reattach_{uuid.uuid4().hex[:8]}"
    first = RayExecutor(sqlite_store, runtime=runtime, read_models_interval_s=None).start()
    group = WorkerGroup.create(sqlite_store, context, group_id=group_id, executor=first)
    follow_group(
        sqlite_store,
        None,
        group_id,
        lambda s: sum(s.report_counts.values()) >= 4,
        timeout_s=DEADLINE_S,
    )
    first.stop()
    assert runtime.lose_node("fake-node-0")  # both workers and the sync actor
    with RayExecutor(sqlite_store, runtime=runtime, read_models_interval_s=None) as second:
        state = follow_group(
            sqlite_store, None, group_id, lambda s: bool(s.errors), timeout_s=DEADLINE_S
        )
        group.shutdown(reason="test over", timeout_s=DEADLINE_S)
    assert sorted(state.errors) == [0, 1]
    assert all("is gone" in e.message for e in state.errors.values())
    assert first.errors == second.errors == []
    assert runtime.list_group_resources() == {}
