"""Groups run through the Python API show in the SQL read models without a manual catch-up."""

from __future__ import annotations

import time
from typing import Any

import pytest
import sqlalchemy as sa

from tests.orchestration.conftest import REPO, make_context
from wgstore.orchestration import RayExecutor, WorkerGroup
from wgstore.projections.read_models import wg_worker_groups

pytestmark = [pytest.mark.ray, pytest.mark.slow]


def _row(store: Any, group_id: str) -> Any:
    with store.engine.connect() as connection:
        return connection.execute(
            sa.select(wg_worker_groups.c.status, wg_worker_groups.c.reports_total).where(
                wg_worker_groups.c.group_id == group_id
            )
        ).first()


def test_a_running_executor_keeps_the_read_models_current_while_groups_run(
    store: Any, executor: Any
) -> None:
    group = WorkerGroup.create(store, make_context(2, config={"steps": 3}), executor=executor)
    group.wait(timeout_s=60)
    group.shutdown()
    deadline = time.monotonic() + 3 * executor.read_models_interval_s + 10
    row = _row(store, group.group_id)
    while (row is None or row.status != "SHUT_DOWN") and time.monotonic() < deadline:
        time.sleep(0.1)
        row = _row(store, group.group_id)
    assert row is not None and row.status == "SHUT_DOWN"
    assert row.reports_total == 6


def test_a_group_with_its_own_executor_is_in_the_read_models_when_shutdown_returns(
    store: Any, ray_up: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(REPO)  # the in-process executor's workers import examples from here
    group = WorkerGroup.create(store, make_context(1, config={"steps": 2}))
    group.wait(timeout_s=60)
    group.shutdown()
    row = _row(store, group.group_id)
    assert row is not None and (row.status, row.reports_total) == ("SHUT_DOWN", 2)


def test_an_executor_told_to_leave_the_read_models_alone_does(store: Any, ray_up: None) -> None:
    with RayExecutor(store, extra_sys_path=[str(REPO)], read_models_interval_s=None) as ex:
        group = WorkerGroup.create(store, make_context(1, config={"steps": 1}), executor=ex)
        group.wait(timeout_s=60)
        group.shutdown()
    assert _row(store, group.group_id) is None
