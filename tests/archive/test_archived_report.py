"""``wgstore report`` of an archived run and of one of its groups: the same page data as the
run had live, read from the archive's file, the run marked archived (both backends)."""

from __future__ import annotations

import json
from pathlib import Path

from archived_runs import ENDED, LIVE, fleet, plan_everything
from typer.testing import CliRunner

from wgstore.cli.app import app
from wgstore.events import EventStore
from wgstore.events.streams import group_stream
from wgstore.projections.archived_views import archived_run_timeline
from wgstore.projections.archiving import archive_runs, archived_stream_records
from wgstore.projections.timeline import group_timeline, run_timeline_data, timeline_data


def _comparable(data: dict[str, object]) -> str:
    """The page data without the run's facts (an archived run's carry its batch)."""
    return json.dumps({k: v for k, v in data.items() if k != "run"}, sort_keys=True, default=str)


def test_an_archived_runs_report_is_the_one_it_had_live(store_url: str, tmp_path: Path) -> None:
    with EventStore.open(store_url) as store:
        fleet(store)
        live_run = run_timeline_data(store, "fin-a")
        live_group = timeline_data(store, "fin-a-g1")
        archive_runs(store, str(tmp_path / "archive"), plan_everything(store))
        archived = archived_run_timeline(store, "fin-a")
        group_records = archived_stream_records(store, group_stream("fin-a-g1"))
        archived_group = group_timeline(store, "fin-a-g1", group_records).data
    assert _comparable(archived) == _comparable(live_run)
    assert archived["run"].archive_batch  # type: ignore[attr-defined]
    assert archived["run"].status == live_run["run"].status  # type: ignore[attr-defined]
    page = tmp_path / "run.html"
    done = CliRunner().invoke(
        app, ["report", "--run", "fin-a", "-o", str(page), "--url", store_url]
    )
    assert done.exit_code == 0, done.output
    assert "archived run fin-a" in done.stderr and page.read_text().count("fin-a-g2") >= 1
    group_page = tmp_path / "group.html"
    done = CliRunner().invoke(
        app, ["report", "fin-a-g1", "-o", str(group_page), "--url", store_url]
    )
    assert done.exit_code == 0, done.output
    assert "archived worker group fin-a-g1" in done.stderr
    assert json.dumps(archived_group, sort_keys=True, default=str) == json.dumps(
        live_group, sort_keys=True, default=str
    )


def test_the_served_run_list_shows_archived_runs_unless_filtered(
    store_url: str, tmp_path: Path
) -> None:
    from starlette.testclient import TestClient

    from wgstore.serve.app import create_app

    with EventStore.open(store_url) as store:
        fleet(store)
        archive_runs(store, str(tmp_path / "archive"), plan_everything(store))
    with TestClient(create_app(store_url)) as client:
        listed = client.get("/api/runs").json()
        running = client.get("/api/runs", params={"status": "RUNNING"}).json()
    archived = {r["run_id"]: r for r in listed["runs"] if r.get("archived")}
    assert sorted(archived) == sorted(ENDED)
    assert {r["status"] for r in archived.values()} == {"ARCHIVED"}
    assert all(r["archive_batch"] for r in archived.values())
    # what the manifest keeps of each: how it ended, its name and times (no file read)
    assert {r["ended_as"] for r in archived.values()} == {"FINISHED", "ABORTED"}
    assert archived["fin-a"]["name"] == "fin-a-name" and archived["fin-a"]["ended_at"]
    assert listed["total"] == len(ENDED) + 1
    assert [r["run_id"] for r in running["runs"]] == [LIVE]
