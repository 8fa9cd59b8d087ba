"""Archived runs read back like live ones (both backends, real Parquet files): ``wgstore runs
RUN`` shows the detail the run had live, marked archived; ``wgstore runs`` lists it archived
from the manifest; ``wgstore events --run`` prints the events it had live; ``wgstore serve``'s
run page shows it, marked archived."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from archived_runs import ENDED, LIVE, fleet, plan_everything
from typer.testing import CliRunner

from wgstore.cli import app
from wgstore.events import EventStore, InvalidArgumentError
from wgstore.events.archive_log import stored_batches
from wgstore.projections.archiving import archive_runs, restore_run
from wgstore.projections.run_views import resolve_run_id

ARCHIVE_KEYS = ("archived", "archive_batch", "archived_at")


def _cli(*args: str) -> Any:
    result = CliRunner().invoke(app, list(args), catch_exceptions=False, env={"COLUMNS": "200"})
    return result


def _json(*args: str) -> list[dict[str, Any]]:
    result = _cli(*args, "--json")
    assert result.exit_code == 0, result.stderr
    return [json.loads(line) for line in result.stdout.splitlines() if line.strip()]


def _page(url: str, run: str) -> Any:
    """The run page's JSON and its events (``/api/events?run=``) from ``wgstore serve``."""
    from starlette.testclient import TestClient

    from wgstore.serve.app import create_app

    with TestClient(create_app(url)) as client:
        page = client.get(f"/api/runs/{run}")
        events = client.get("/api/events", params={"run": run, "after": 0})
    assert page.status_code == 200, page.text
    assert events.status_code == 200, events.text
    return page.json(), events.json()["events"]


def _unmarked(run: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in run.items() if k not in ARCHIVE_KEYS}


def test_an_archived_run_reads_back_as_it_was_live_marked_archived(
    store: EventStore, store_url: str, tmp_path: Path
) -> None:
    pytest.importorskip("starlette", reason="the run page needs the serve extra")
    fleet(store)
    url = store_url
    live_detail = {run_id: _json("runs", run_id, "--url", url)[0] for run_id in ENDED}
    live_events = {run_id: _json("events", "--run", run_id, "--url", url) for run_id in ENDED}
    live_page, live_page_events = _page(url, "fin-a")
    assert "archived" not in live_detail["fin-a"]["run"]

    result = archive_runs(store, str(tmp_path / "archive"), plan_everything(store))
    assert sorted(result.runs) == sorted(ENDED)
    (batch,) = stored_batches(store)

    # `wgstore runs RUN`: the detail it had live, from the archive's file, marked
    for run_id in ENDED:
        (shown,) = _json("runs", run_id, "--url", url)
        run = shown.pop("run")
        live = dict(live_detail[run_id])
        assert _unmarked(run) == live.pop("run")
        assert shown == live  # attempts, decisions, transitions, controllers...
        assert (run["archived"], run["archive_batch"]) == (True, batch.batch_id)
        assert run["archived_at"] is not None
    fin = live_detail["fin-a"]["run"]
    assert (fin["status"], fin["attempts"], fin["name"]) == ("FINISHED", 2, "fin-a-name")
    assert live_detail["abt-a"]["run"]["abort_reason"] == "SIGINT"
    text = _cli("runs", "fin-a", "--url", url)
    assert text.exit_code == 0, text.stderr
    assert f"archived in batch {batch.batch_id}" in text.stdout
    assert "wgstore restore fin-a" in text.stdout
    assert "FINISHED" in text.stdout and "fin-a-g2" in text.stdout

    # `wgstore runs`: the archived runs from the manifest, marked; --live / --archived
    listed = {r["run_id"]: r for r in _json("runs", "--url", url)}
    assert list(listed) == [*(r for r in batch.manifest.runs), LIVE]
    assert set(batch.manifest.runs) == set(ENDED)
    for run_id in ENDED:
        row = listed[run_id]
        assert (row["status"], row["archived"], row["archive_batch"]) == (
            "ARCHIVED",
            True,
            batch.batch_id,
        )
    assert "archived" not in listed[LIVE] and listed[LIVE]["status"] == "RUNNING"
    assert [r["run_id"] for r in _json("runs", "--live", "--url", url)] == [LIVE]
    assert {r["run_id"] for r in _json("runs", "--archived", "--url", url)} == set(ENDED)
    assert [r["run_id"] for r in _json("runs", "--status", "RUNNING", "--url", url)] == [LIVE]
    table = _cli("runs", "--url", url)
    rows = {line.split()[1]: line for line in table.stdout.splitlines() if "│" in line}
    assert "ARCHIVED" in rows["fin-a"] and "RUNNING" in rows[LIVE]
    assert f"archived in batch {batch.batch_id}" in table.stdout

    # `wgstore events --run`: the events it had live (ids, types, data, positions)
    for run_id in ENDED:
        assert _json("events", "--run", run_id, "--url", url) == live_events[run_id]
    typed = _json("events", "--run", "fin-a", "--type", "RunFinished", "--url", url)
    assert [e["type"] for e in typed] == ["RunFinished"]
    assert typed == [e for e in live_events["fin-a"] if e["type"] == "RunFinished"]

    # the run page's JSON: as it was live, marked archived
    archived_page, page_events = _page(url, "fin-a")
    run = archived_page.pop("run")
    assert run["archived"] is True and run["archive_batch"] == batch.batch_id
    live_run = live_page.pop("run")
    assert _unmarked(run) == live_run
    assert archived_page == live_page  # attempts, metrics, latest per rank...
    assert archived_page["metrics"]
    assert page_events == live_page_events and page_events

    # a prefix of archived runs only, and the commands that read live runs only
    ambiguous = _cli("runs", "fin-", "--url", url)
    assert ambiguous.exit_code == 2 and "matches 2 runs" in ambiguous.stderr
    with pytest.raises(InvalidArgumentError, match="is archived"):
        resolve_run_id(store, "fin-a")
    assert resolve_run_id(store, "abt", archived=True) == "abt-a"
    assert resolve_run_id(store, "run-abt-a", archived=True) == "abt-a"
    assert resolve_run_id(store, LIVE[:3], archived=True) == LIVE
    with pytest.raises(InvalidArgumentError, match="no run id starts with 'nope'"):
        resolve_run_id(store, "nope", archived=True)

    # restored, it is a live run again
    restore_run(store, "fin-a")
    (back,) = _json("runs", "fin-a", "--url", url)
    assert "archived" not in back["run"]
    assert back["run"] == live_detail["fin-a"]["run"]
    listed = {r["run_id"]: r for r in _json("runs", "--url", url)}
    assert listed["fin-a"]["status"] == "FINISHED" and "archived" not in listed["fin-a"]
