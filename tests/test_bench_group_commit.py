"""bench/group_commit.py runs end to end: every side appends, and rates, latencies and ratios
are reported."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[1] / "bench" / "group_commit.py"


def test_the_group_commit_bench_runs_every_side_and_reports_rates_and_latencies() -> None:
    command = [sys.executable, str(BENCH), "--backend", "sqlite", "--json"]
    command += ["--threads", "4", "--appends", "20", "--repeats", "1"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=600, cwd=BENCH.parent)
    assert done.returncode == 0, done.stderr[-3000:]
    (result,) = json.loads(done.stdout)["results"]
    sides = {"wgstore", "wgstore-alone", "eventsourcing"}
    assert result["events_per_s"].keys() == sides
    assert all(rate > 0 for rate in result["events_per_s"].values())
    assert result["latency_ms"]["wgstore"]["p99"] >= result["latency_ms"]["wgstore"]["p50"] > 0
    assert set(result["ratio"]) == {"wgstore-alone", "eventsourcing"}
