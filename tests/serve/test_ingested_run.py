"""A run read from Ray's export events (``wgstore ingest ray-export``) on ``wgstore serve``'s run
page: its JSON says where it came from, why it cannot be resumed, the node it lost beside the
attempt it ended, and its driver job (issue 45)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from starlette.testclient import TestClient
from typer.testing import CliRunner

from tests.ingest.exported import copy_export
from wgstore.cli import app
from wgstore.serve.app import create_app

NODE_LOST = "fac4e5ec98ef43dc8285a6c1f39896ac"


def test_an_ingested_runs_page_says_what_the_export_cannot_give(
    store_url: str, tmp_path: Path
) -> None:
    folder = copy_export(tmp_path)
    args = ["ingest", "ray-export", str(folder), "--url", store_url, "--claim-wait-s", "0"]
    assert CliRunner().invoke(app, args).exit_code == 0
    with TestClient(create_app(store_url)) as client:
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
