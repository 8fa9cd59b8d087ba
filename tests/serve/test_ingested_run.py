"""A run read from Ray's export events (``wgstore ingest ray-export``) on ``wgstore serve``'s run
page: its JSON says where it came from, why it cannot be resumed, the node it lost beside the
attempt it ended, and its driver job (issue 45)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient
from typer.testing import CliRunner

from tests.ingest.exported import copy_export
from wgstore.cli import app
from wgstore.serve.app import create_app

NODE_LOST = "fac4e5ec98ef43dc8285a6c1f39896ac"


@pytest.fixture
def ingested(store_url: str, tmp_path: Path) -> str:
    """The store with the fixture's export files ingested (no claim wait)."""
    folder = copy_export(tmp_path)
    args = ["ingest", "ray-export", str(folder), "--url", store_url, "--claim-wait-s", "0"]
    assert CliRunner().invoke(app, args).exit_code == 0
    return store_url


def test_an_ingested_runs_page_says_what_the_export_cannot_give(ingested: str) -> None:
    with TestClient(create_app(ingested)) as client:
        detail: dict[str, Any] = client.get(f"/api/runs/{NODE_LOST}").json()
        page = client.get(f"/runs/{NODE_LOST}")
    run = detail["run"]
    assert run["source"] == "ray_export" and run["resumable"] is False
    assert "export events" in run["not_resumable_reason"]
    assert [n["node_ip"] for n in detail["nodes_lost"]] == ["127.0.0.2"]
    assert detail["nodes_lost"][0]["group_ids"] == [detail["attempts"][0]["group_id"]]
    assert detail["ray_job"]["job_id"] == "01000000"
    assert "tests.ingest.ray_export_driver" in detail["ray_job"]["entrypoint"]
    assert page.status_code == 200


def test_of_several_clusters_jobs_with_the_runs_job_id_the_run_shows_its_own(
    ingested: str,
) -> None:
    """``01000000`` is every cluster's first job: the run's is the last that started before it."""
    from wgstore.events import EventStore
    from wgstore.events.ray_cluster import RayJobStarted, job_stream

    ours = 1796673076971  # the fixture's job started then; the run 5.5 s later
    with EventStore.open(ingested) as store:
        for start, entrypoint in (
            (ours - 86_400_000, "an older cluster"),
            (ours + 60_000, "a later one"),
        ):
            job = RayJobStarted(job_id="01000000", entrypoint=entrypoint, start_time_ms=start)
            store.append(job_stream("01000000", start), [job])
    with TestClient(create_app(ingested)) as client:
        detail = client.get(f"/api/runs/{NODE_LOST}").json()
    assert "tests.ingest.ray_export_driver" in detail["ray_job"]["entrypoint"]
