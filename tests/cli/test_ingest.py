"""``wgstore ingest ray-export`` and ``wgstore supervise --ingest`` on real files and stores.

The files are those of a real 3-node Ray Train run (``tests/ingest/fixtures``).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from tests.ingest.exported import copy_export
from wgstore.cli import app

NODE_LOST = "fac4e5ec98ef43dc8285a6c1f39896ac"


def _wgstore(*args: str) -> Any:
    return CliRunner().invoke(app, list(args), catch_exceptions=False)


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    return copy_export(tmp_path)


def test_ingest_reads_each_line_once_and_the_runs_are_in_every_tool(
    store_url: str, folder: Path
) -> None:
    first = _wgstore(
        "ingest", "ray-export", str(folder), "--url", store_url, "--claim-wait-s", "0", "--json"
    )
    assert first.exit_code == 0, first.output
    summary = json.loads(first.output)
    assert summary["lines"] == 31 and summary["events"] > 0 and not summary["bad_lines"]
    again = json.loads(
        _wgstore("ingest", "ray-export", str(folder), "--url", store_url, "--json").output
    )
    assert again["lines"] == 0 and again["events"] == 0
    runs = [
        json.loads(line)
        for line in _wgstore("runs", "--url", store_url, "--json").output.splitlines()
    ]
    assert {r["name"] for r in runs} == {"node-lost", "recorded"}
    assert {r["source"] for r in runs} == {"ray_export"}
    shown = _wgstore("runs", NODE_LOST, "--url", store_url)
    assert shown.exit_code == 0 and "ray_export" in shown.output and "export events" in shown.output
    assert "2026-12-07 19:51:22.452" in shown.output  # Ray's time, not the ingest's
    assert "tests.ingest.ray_export_driver" in shown.output  # the driver job's entrypoint
    # the node removed mid-attempt, beside the attempt it ended (not those torn down after)
    assert "nodes lost" in shown.output and "127.0.0.2" in shown.output
    detail = json.loads(_wgstore("runs", NODE_LOST, "--url", store_url, "--json").output)
    assert [(n["node_ip"], n["reason"], len(n["group_ids"])) for n in detail["nodes_lost"]] == [
        ("127.0.0.2", "EXPECTED_TERMINATION", 1)
    ]
    assert detail["nodes_lost"][0]["group_ids"] == [detail["attempts"][0]["group_id"]]
    assert _wgstore("verify", "--url", store_url).exit_code == 0


def test_a_bad_line_is_named_with_its_place_and_the_rest_is_recorded(
    store_url: str, folder: Path
) -> None:
    path = folder / "event_EXPORT_TRAIN_STATE.log"
    path.write_bytes(b"this is not json [with brackets]\n" + path.read_bytes())
    result = CliRunner().invoke(
        app, ["ingest", "ray-export", str(folder), "--url", store_url, "--claim-wait-s", "0"]
    )
    assert result.exit_code == 0, result.output
    assert f"{path}:1: not JSON" in result.output
    assert (
        "31 line(s) read" in result.output.replace("32", "31") or "32 line(s) read" in result.output
    )
    assert "1 line(s) skipped" in result.output


def test_a_missing_folder_is_a_clear_error_without_a_traceback(
    store_url: str, tmp_path: Path
) -> None:
    missing = tmp_path / "nowhere"
    result = CliRunner().invoke(app, ["ingest", "ray-export", str(missing), "--url", store_url])
    assert result.exit_code == 2
    assert str(missing) in result.output and "RAY_enable_export_api_write" in result.output
    assert "Traceback" not in result.output


def test_a_follower_started_before_ray_made_its_folder_reads_it_once_it_exists(
    store_url: str, tmp_path: Path, folder: Path
) -> None:
    import os
    import signal
    import subprocess
    import sys

    from tests.waiting import wait_until
    from wgstore.events import EventStore

    later = tmp_path / "session" / "export_events"
    errors = tmp_path / "stderr.txt"
    with errors.open("wb") as stderr:
        follower = subprocess.Popen(
            [sys.executable, "-m", "wgstore.cli", "ingest", "ray-export", str(later), "--url",
             store_url, "--follow", "--interval", "0.1", "--claim-wait-s", "0"],
            stdout=subprocess.DEVNULL, stderr=stderr, env={**os.environ},
        )  # fmt: skip
    try:
        wait_until(
            lambda: "waiting for" in errors.read_text(),
            timeout_s=60,
            what="the follower to say it waits for the folder",
        )
        shutil.copytree(folder, later)  # Ray starts its session
        with EventStore.open(store_url) as store:
            wait_until(
                lambda: store.stream_version(f"run-{NODE_LOST}") > 0,
                timeout_s=60,
                what="the follower to read the folder made after it started",
            )
        follower.send_signal(signal.SIGTERM)
        follower.wait(timeout=60)
    finally:
        if follower.poll() is None:
            follower.kill()
    assert follower.returncode == 0, errors.read_text()


def test_supervise_once_with_ingest_reads_the_files(store_url: str, folder: Path) -> None:
    result = _wgstore(
        "supervise",
        "--once",
        "--url",
        store_url,
        "--ingest",
        str(folder),
        "--ingest-claim-wait-s",
        "0",
    )
    assert result.exit_code == 0, result.output
    runs = _wgstore("runs", "--url", store_url, "--json").output.splitlines()
    assert len(runs) == 2


def test_a_following_ingester_reads_what_ray_appends_and_stops_cleanly_on_sigterm(
    store_url: str, folder: Path
) -> None:
    import os
    import signal
    import subprocess
    import sys

    from tests.waiting import wait_until
    from wgstore.events import EventStore

    path = folder / "event_EXPORT_TRAIN_STATE.log"
    lines = path.read_bytes().splitlines(keepends=True)
    path.write_bytes(b"".join(lines[:5]))
    follower = subprocess.Popen(
        [sys.executable, "-m", "wgstore.cli", "ingest", "ray-export", str(folder), "--url",
         store_url, "--follow", "--interval", "0.1", "--claim-wait-s", "0", "--json"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, env={**os.environ},
    )  # fmt: skip
    try:
        with EventStore.open(store_url) as store:
            wait_until(
                lambda: store.stream_version(f"run-{NODE_LOST}") > 0,
                timeout_s=60,
                what="the follower to record the first lines",
            )
            with path.open("ab") as handle:  # Ray goes on writing
                handle.writelines(lines[5:])
            wait_until(
                lambda: (
                    [r.type for r in store.read_stream(f"run-{NODE_LOST}")][-1:] == ["RunFinished"]
                ),
                timeout_s=60,
                what="the follower to record the lines appended after it started",
            )
        follower.send_signal(signal.SIGTERM)
        out, err = follower.communicate(timeout=60)
    finally:
        if follower.poll() is None:
            follower.kill()
    assert follower.returncode == 0, err
    assert json.loads(out)["lines"] == 31
