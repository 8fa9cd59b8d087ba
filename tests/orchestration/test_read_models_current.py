"""Groups run through the Python API show in the SQL read models without a manual catch-up.

The executor's own catch-up runs on ``FakeRuntime`` (it is the executor's logic); the group
that makes its own executor (``WorkerGroup.create`` with none given) needs Ray.
"""

from __future__ import annotations

import time
from typing import Any

import pytest
import sqlalchemy as sa

from tests.orchestration.conftest import REPO, make_context
from wgstore.events.worker_group import WorkerGroupContext
from wgstore.orchestration import RayExecutor, WorkerGroup
from wgstore.orchestration.runtimes.fake_runtime import FakeRuntime, FakeScript
from wgstore.projections.read_models import wg_worker_groups


def _fake_context(num_workers: int) -> WorkerGroupContext:
    return WorkerGroupContext(
        num_workers=num_workers, train_fn="examples.train:train_fn", poll_interval_s=0.01
    )


def _row(store: Any, group_id: str) -> Any:
    with store.engine.connect() as connection:
        return connection.execute(
            sa.select(wg_worker_groups.c.status, wg_worker_groups.c.reports_total).where(
                wg_worker_groups.c.group_id == group_id
            )
        ).first()


def test_a_running_executor_keeps_the_read_models_current_while_groups_run(store: Any) -> None:
    runtime = FakeRuntime(script=FakeScript(reports=3))
    with RayExecutor(store, runtime=runtime, read_models_interval_s=0.05) as executor:
        group = WorkerGroup.create(store, _fake_context(2), executor=executor)
        group.wait(timeout_s=20)
        group.shutdown()
        deadline = time.monotonic() + 20
        row = _row(store, group.group_id)  # while the executor runs, not by its final catch-up
        while (row is None or row.status != "SHUT_DOWN") and time.monotonic() < deadline:
            time.sleep(0.01)
            row = _row(store, group.group_id)
    assert executor.errors == []
    assert row is not None and row.status == "SHUT_DOWN"
    assert row.reports_total == 6


@pytest.mark.ray
@pytest.mark.slow
def test_a_group_with_its_own_executor_is_in_the_read_models_when_shutdown_returns(
    store: Any, ray_up: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(REPO)  # the in-process executor's workers import examples from here
    group = WorkerGroup.create(store, make_context(1, config={"steps": 2}))
    group.wait(timeout_s=60)
    group.shutdown()
    row = _row(store, group.group_id)
    assert row is not None and (row.status, row.reports_total) == ("SHUT_DOWN", 2)


def test_an_executor_told_to_leave_the_read_models_alone_does(store: Any) -> None:
    runtime = FakeRuntime(script=FakeScript(reports=1))
    with RayExecutor(store, runtime=runtime, read_models_interval_s=None) as ex:
        group = WorkerGroup.create(store, _fake_context(1), executor=ex)
        group.wait(timeout_s=20)
        group.shutdown()
    assert _row(store, group.group_id) is None
