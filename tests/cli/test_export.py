"""``wgstore export`` to JSON Lines and Parquet, for a group, a run, a type or a time range."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

from wgstore.cli.export import PARQUET_COLUMNS


def test_jsonl_export_of_a_group_has_every_event_in_order(
    cli: Any, recorded: Any, tmp_path: Path
) -> None:
    target = tmp_path / "group.jsonl"
    result = cli(
        "export", "--url", recorded.url, "--group", recorded.errored_group[:4], "-o", str(target)
    )
    assert result.exit_code == 0, result.stderr
    assert "wrote 23 event(s)" in result.stderr
    rows = [json.loads(line) for line in target.read_text().splitlines()]
    assert [r["version"] for r in rows] == list(range(1, 24))
    assert rows[0]["data"]["context"]["train_fn"] == "examples.train:train_fn"
    at = datetime.fromisoformat(rows[0]["recorded_at"])
    micros = (at - datetime(1970, 1, 1, tzinfo=UTC)) // timedelta(microseconds=1)
    assert rows[0]["recorded_at_ns"] == micros * 1000


def test_parquet_export_of_a_run_reads_back_with_pyarrow(
    cli: Any, recorded: Any, tmp_path: Path
) -> None:
    target = tmp_path / "run.parquet"
    result = cli("export", "--url", recorded.url, "--run", recorded.run_id, "-o", str(target))
    assert result.exit_code == 0, result.stderr
    table = pq.read_table(target)
    assert table.column_names == list(PARQUET_COLUMNS)
    assert table.num_rows == 28
    types = table.column("type").to_pylist()
    assert types.count("WorkerReported") == 12
    first = json.loads(table.column("data")[0].as_py())
    assert first["group_id"] == recorded.errored_group
    assert str(table.schema.field("recorded_at").type) == "timestamp[us, tz=UTC]"


def test_export_to_stdout_filters_by_type(cli: Any, recorded: Any) -> None:
    result = cli("export", "--url", recorded.url, "-o", "-", "--type", "WorkerGroupStartFailed")
    assert result.exit_code == 0, result.stderr
    rows = [json.loads(line) for line in result.stdout.splitlines()]
    assert [r["data"]["stage"] for r in rows] == ["workers"]


def test_export_of_an_empty_time_range_writes_an_empty_parquet_file(
    cli: Any, recorded: Any, tmp_path: Path
) -> None:
    target = tmp_path / "none.parquet"
    result = cli("export", "--url", recorded.url, "--since", "2999-01-01", "-o", str(target))
    assert result.exit_code == 0, result.stderr
    assert pq.read_table(target).num_rows == 0


def test_export_until_a_past_time_and_since_an_hour_ago(cli: Any, recorded: Any) -> None:
    past = cli("export", "--url", recorded.url, "-o", "-", "--until", "2000-01-01")
    assert past.stdout == ""
    recent = cli("export", "--url", recorded.url, "-o", "-", "--since", "1h")
    assert len(recent.stdout.splitlines()) == 28


def test_export_needs_a_known_format(cli: Any, recorded_sqlite: Any, tmp_path: Path) -> None:
    result = cli("export", "--url", recorded_sqlite.url, "-o", str(tmp_path / "out.csv"))
    assert result.exit_code == 2
    assert "name it .jsonl or .parquet" in result.stderr
    assert (
        cli("export", "--url", recorded_sqlite.url, "-o", "-", "--format", "parquet").exit_code == 2
    )


def test_export_with_group_and_run_is_a_usage_error(cli: Any, recorded_sqlite: Any) -> None:
    result = cli("export", "--url", recorded_sqlite.url, "-o", "-", "--group", "a1", "--run", "x")
    assert result.exit_code == 2


def test_export_of_an_unknown_run_exits_2(cli: Any, recorded_sqlite: Any) -> None:
    result = cli("export", "--url", recorded_sqlite.url, "-o", "-", "--run", "nope")
    assert result.exit_code == 2
    assert "no run id starts with 'nope'" in result.stderr
