"""A run's ``wg_runs`` and ``wg_run_decisions`` rows, built from hand-made states (no database).

Written for the survivors of ``make mutate`` (issue 15): the read-model tests compare the rows
with the same functions' output, so the values here are written out: the order of attempts,
where the worker count comes from, the per-kind failure counts, the decision rows' JSON, the
time zone of every timestamp, and immutability.
"""

from __future__ import annotations

import dataclasses
import os
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest

from tests.projections.projection_builders import Stream
from wgstore.events.run import ControllerState, FailureConfig, RankError, ScalingConfig
from wgstore.events.worker_group import ErrorInfo, WorkerGroupContext
from wgstore.projections.run_rows import (
    RUN_SOURCES,
    Attempt,
    attempt_of,
    decision_rows,
    order_attempts,
    run_row,
    run_source,
)
from wgstore.projections.run_state import FailureDecision, RunState, RunStatus
from wgstore.projections.state import project_worker_group

T0 = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)
CONTEXT = WorkerGroupContext(
    num_workers=3, resources_per_worker={"CPU": 0.5}, train_fn="examples.train:train_fn"
)


def _run(**fields: Any) -> RunState:
    base: dict[str, Any] = {
        "stream_id": "run-r1",
        "run_id": "r1",
        "name": "demo",
        "status": RunStatus.RUNNING,
        "controller_state": ControllerState.RUNNING,
        "version": 3,
        "position": 9,
        "created_at": T0,
        "updated_at": T0,
    }
    return RunState(**{**base, **fields})


def _decision(kind: str, decision: str = "RETRY", **fields: Any) -> FailureDecision:
    return FailureDecision(
        decision=decision,
        group_id="g1",
        reason="why",
        failures_so_far=1,
        at=T0,
        version=2,
        failure_kind=kind,
        **fields,
    )


def test_the_sources_are_wgstore_ray_train_and_ray_export() -> None:
    assert RUN_SOURCES == ("wgstore", "ray_train", "ray_export")
    assert (
        run_source(_run(context=CONTEXT)),
        run_source(_run()),
        run_source(_run(source="ray_export")),
    ) == RUN_SOURCES
    assert run_source(_run(source="ray_train")) == "ray_train"


def test_attempts_go_by_request_time_then_the_controller_s_order_and_untimed_last() -> None:
    attempts = [
        Attempt(group_id="a-late", requested_at=T0 + timedelta(seconds=2)),
        Attempt(group_id="0-untimed", attempt=9),
        Attempt(group_id="b-early", requested_at=T0 + timedelta(seconds=1)),
    ]  # ids sort the other way round: only the times give this order
    ordered = order_attempts(_run(), attempts)
    assert [a.group_id for a in ordered] == ["b-early", "a-late", "0-untimed"]


def test_a_group_the_run_named_without_an_attempt_is_listed_as_a_bare_attempt_last() -> None:
    run = _run(groups=("named", "g1"))
    ordered = order_attempts(run, [Attempt(group_id="g1", requested_at=T0, status="RUNNING")])
    assert ordered == [
        Attempt(group_id="g1", requested_at=T0, status="RUNNING"),
        Attempt(group_id="named"),
    ]


def test_an_attempt_s_error_is_its_text_and_a_group_without_one_has_none() -> None:
    failed = project_worker_group(Stream("g1").requested().start_failed().events)
    fine = project_worker_group(Stream("g2").running().events)
    assert attempt_of(failed).error == str(failed.error) and "no resources" in str(failed.error)
    assert attempt_of(fine).error is None


def test_a_run_without_a_scaling_config_takes_its_workers_from_the_context() -> None:
    row = run_row(_run(context=CONTEXT), [])
    assert (row["num_workers"], row["resources_per_worker"]) == (3, {"CPU": 0.5})
    bare = run_row(_run(), [])
    assert (bare["num_workers"], bare["resources_per_worker"]) == (None, None)
    scaled = run_row(_run(scaling_config=ScalingConfig(num_workers=2), context=CONTEXT), [])
    assert scaled["num_workers"] == 2


def test_failures_are_counted_per_kind_in_the_row() -> None:
    run = _run(
        failure_config=FailureConfig(max_failures=5),
        decisions=(
            _decision("start"),
            _decision("start"),
            _decision("preemption"),
            _decision("worker_group", "RAISE"),
        ),
    )
    row = run_row(run, [])
    assert (
        row["worker_group_failures"],
        row["start_failures"],
        row["preemption_failures"],
        row["last_decision"],
        row["max_failures"],
    ) == (1, 2, 1, "RAISE", 5)


def test_a_decision_row_lists_each_rank_s_error_as_plain_json() -> None:
    errors = (RankError(world_rank=1, error=ErrorInfo(type="RuntimeError", message="rank 1")),)
    run = _run(decisions=(_decision("worker_group", errors=errors, limit=2),))
    (row,) = decision_rows(run)
    assert row["errors"] == [{"world_rank": 1, "type": "RuntimeError", "message": "rank 1"}]
    assert (row["failure_limit"], row["decided_at"]) == (2, T0)


@pytest.fixture
def tokyo_local_time() -> Iterator[None]:
    """A local time zone that is not UTC, so a naive time read as local time shows."""
    saved = os.environ.get("TZ")
    os.environ["TZ"] = "Asia/Tokyo"
    time.tzset()
    try:
        yield
    finally:
        if saved is None:
            del os.environ["TZ"]
        else:
            os.environ["TZ"] = saved
        time.tzset()


@pytest.mark.usefixtures("tokyo_local_time")
def test_timestamps_are_utc_naive_ones_taken_as_utc_and_others_converted() -> None:
    naive = datetime(2026, 1, 1, 12, 0)
    plus_two = datetime(2026, 1, 1, 14, 0, tzinfo=timezone(timedelta(hours=2)))
    row = run_row(_run(created_at=naive, updated_at=plus_two, ended_at=None), [])
    assert row["created_at"] == T0 and row["created_at"].tzinfo is UTC
    assert row["updated_at"] == T0 and row["updated_at"].tzinfo is UTC
    assert row["ended_at"] is None


def test_an_attempt_is_immutable_slotted_and_built_by_keyword() -> None:
    attempt = Attempt(group_id="g1")
    with pytest.raises(dataclasses.FrozenInstanceError):
        attempt.group_id = "g2"  # type: ignore[misc]
    assert not hasattr(attempt, "__dict__")
    with pytest.raises(TypeError):
        Attempt("g1", 1)  # type: ignore[misc]
