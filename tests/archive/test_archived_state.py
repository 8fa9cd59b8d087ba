"""``wgstore state`` of an archived worker group: the same state as it had live, now and back
then (``--version``, ``--at``), read from the archive's file and marked archived (both
backends)."""

from __future__ import annotations

import json
from pathlib import Path

from archived_runs import fleet, plan_everything
from typer.testing import CliRunner

from wgstore.cli.app import app
from wgstore.events import EventStore
from wgstore.projections.archiving import archive_runs
from wgstore.projections.views import state_json

GROUP = "fin-a-g2"  # attempt 2 of fin-a (tests/projections/run_scenarios.py)


def _state(url: str, *args: str) -> dict[str, object]:
    result = CliRunner().invoke(app, ["state", *args, "--url", url, "--json"])
    assert result.exit_code == 0, result.output
    return dict(json.loads(result.stdout))


def test_an_archived_group_shows_the_state_it_had_live(store_url: str, tmp_path: Path) -> None:
    with EventStore.open(store_url) as store:
        fleet(store)
        from wgstore.projections import worker_group_state

        live = state_json(worker_group_state(store, GROUP))
        at_three = state_json(worker_group_state(store, GROUP, version=3))
        archive_runs(store, str(tmp_path / "archive"), plan_everything(store))
    now = _state(store_url, "fin-a-g2")
    assert now.pop("archived") is True
    assert now == json.loads(json.dumps(live, default=str))
    back_then = _state(store_url, GROUP, "--version", "3")
    assert back_then.pop("archived") is True
    assert back_then == json.loads(json.dumps(at_three, default=str))
    shown = CliRunner().invoke(app, ["state", GROUP, "--url", store_url])
    assert shown.exit_code == 0 and "archived" in shown.stdout and "restore fin-a" in shown.stdout
    ambiguous = CliRunner().invoke(app, ["state", "fin-a-g", "--url", store_url])
    assert ambiguous.exit_code != 0 and "matches 2 archived groups" in ambiguous.output
    unknown = CliRunner().invoke(app, ["state", "nope", "--url", store_url])
    assert unknown.exit_code != 0 and "no worker group id starts with" in unknown.output
