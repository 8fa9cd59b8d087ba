"""bench/fleet.py runs a tiny fleet end to end: every report in the log once, runs finished."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import PG_URL, require_postgres

FLEET = Path(__file__).resolve().parents[1] / "bench" / "fleet.py"
KEYS = {
    "config", "load_start", "load_end", "wall_s", "events", "events_per_s", "reports_per_s",
    "offered_reports_per_s", "report_ms", "poll_append_ms", "read_model_lag",
    "cpu_ms_per_1000_events", "bytes", "log_bytes", "bytes_per_run_hour", "by_type", "check",
    "phases_s", "appends_per_commit", "scheduling_late_ms", "report_ms_steady",
}  # fmt: skip


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_a_tiny_fleet_runs_end_to_end_and_loses_nothing(backend: str, tmp_path: Path) -> None:
    if backend == "postgres":
        require_postgres()
    url = f"sqlite:///{tmp_path}/fleet.db" if backend == "sqlite" else PG_URL
    command = [sys.executable, str(FLEET), "--backend", backend, "--url", url, "--json"]
    command += ["--runs", "3", "--workers", "2", "--interval", "0.2", "--duration", "1.2"]
    command += ["--fail-share", "0.34", "--procs", "2", "--spawn-s", "1"]
    done = subprocess.run(
        command,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout)
    assert report.keys() >= KEYS
    check = report["check"]
    assert check["ok"], check
    assert check["runs"] == {"FINISHED": 3}
    # 3 runs x 2 workers x 6 reports; the failing run's first attempt adds the reports it made
    # before rank 0 raised, its second makes the rest
    assert check["reports_made"] == check["reports_in_log"] == check["read_model_reports"]
    assert check["reports_made"] >= 3 * 2 * 6
    assert (check["lost"], check["unexpected"], check["duplicate_event_ids"]) == (0, 0, 0)
    assert report["by_type"]["WorkerReported"]["events"] == check["reports_in_log"]
    assert "FailureDecisionMade" in report["by_type"]
    assert report["report_ms"]["n"] == check["reports_made"]
    # the runs started spread over one interval (the default); the steady rate's reports are
    # those made once all had started and before the last interval
    assert report["config"]["stagger_s"] == 0.2
    assert 0 < report["report_ms_steady"]["n"] < report["report_ms"]["n"]
    assert report["scheduling_late_ms"]["n"] > 0 and report["scheduling_late_ms"]["p50"] >= 0
    assert report["bytes"] > report["log_bytes"] > 0
    phases = report["phases_s"]  # when the runs got where, from the log's own times
    assert set(phases) == {"WorkerGroupStartRequested", "TrainingLaunched", "WorkerReported",
                           "RunFinished"}  # fmt: skip
    for name, at in phases.items():
        assert 0 <= at["p10"] <= at["p50"] <= at["p90"] <= at["last"], (name, at)
    assert phases["TrainingLaunched"]["p10"] >= phases["WorkerGroupStartRequested"]["p10"]
    assert phases["RunFinished"]["last"] >= phases["WorkerReported"]["last"]
