"""bench/ingest.py ingests a tiny export log and follows a short one: its tables, every run stored."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from wgstore.events import EventStore

INGEST = Path(__file__).resolve().parents[1] / "bench" / "ingest.py"


def test_a_tiny_ingest_prints_its_tables_and_stores_every_run(tmp_path: Path) -> None:
    command = [sys.executable, str(INGEST), "--backend", "sqlite", "--lines", "2000"]
    command += ["--batch-lines", "500", "--lag-runs", "6", "--lag-rate", "200"]
    command += ["--workdir", str(tmp_path)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    out = done.stdout
    assert "| backend | lines | events |" in out and "goal >= 20,000 lines/s |" in out
    assert "| backend | runs | lines | seen |" in out and "goal p99 < 1 s |" in out
    rate_row = next(line for line in out.splitlines() if line.startswith("| sqlite | 2,006 |"))
    assert rate_row.endswith(("| met |", "| MISSED |"))

    log = tmp_path / "rate" / "export_events" / "event_EXPORT_TRAIN_STATE.log"
    lines = [json.loads(raw) for raw in log.read_text().splitlines()]
    assert len(lines) == 2000
    assert len({line["event_id"] for line in lines}) == 2000
    run_ids = {str(line["event_data"].get("run_id") or line["event_data"]["id"]) for line in lines}
    assert len(run_ids) > 150  # 23 lines hold two runs
    with EventStore.open(f"sqlite:///{tmp_path / 'rate-sqlite.db'}") as store:
        assert {stream.removeprefix("run-") for stream, _ in store.streams("run-")} == run_ids
        assert len(store.streams("worker-group-")) > len(run_ids)  # one run in two has 2 attempts

    with EventStore.open(f"sqlite:///{tmp_path / 'lag-sqlite.db'}") as store:
        assert len(store.streams("run-")) == 6
    lag_row = next(line for line in out.splitlines() if line.startswith("| sqlite | 6 |"))
    assert "| 6 | 6 (" in lag_row  # every run seen, and listed by run_summaries
