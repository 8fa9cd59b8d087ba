"""Migration 0007 adds the run read models to a store whose read models were already caught up:
it makes the projector fold the log again, so runs recorded before the upgrade get their rows."""

from __future__ import annotations

import sys
from pathlib import Path

import sqlalchemy as sa

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "projections"))

import run_scenarios as scenarios

from wgstore.events import EventStore
from wgstore.events.schema import wg_runs, wg_worker_groups
from wgstore.migrations.runner import downgrade, upgrade
from wgstore.projections import catch_up_read_models
from wgstore.projections.projector import READ_MODELS_SUBSCRIPTION


def _count(store: EventStore, table: sa.Table) -> int:
    with store.engine.connect() as connection:
        return int(connection.execute(sa.select(sa.func.count()).select_from(table)).scalar_one())


def test_upgrading_to_0007_refolds_the_log_so_existing_runs_get_rows(store_url: str) -> None:
    with EventStore.open(store_url) as store:
        scenarios.finished_after_a_retry(store)
        catch_up_read_models(store)
        groups = _count(store, wg_worker_groups)
        with store.engine.begin() as connection:
            downgrade(connection, "0006_run_leases")  # as a store caught up before 0007
            upgrade(connection)
        assert _count(store, wg_runs) == 0
        assert store.subscription(READ_MODELS_SUBSCRIPTION).checkpoint() == 0
        assert catch_up_read_models(store) == store.head()  # every event of the log, again
        assert (_count(store, wg_runs), _count(store, wg_worker_groups)) == (1, groups)
