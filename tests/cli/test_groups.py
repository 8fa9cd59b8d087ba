"""``wgstore groups`` and ``wgstore state`` (now, --version, --at) on both backends."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import pytest

from wgstore.events import EventStore


def _json_lines(text: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def test_groups_lists_each_group_with_status_outcome_and_error(cli: Any, recorded: Any) -> None:
    result = cli("groups", "--url", recorded.url, "--json")
    assert result.exit_code == 0, result.stderr
    groups = {g["group_id"]: g for g in _json_lines(result.stdout)}
    errored, failed = groups[recorded.errored_group], groups[recorded.failed_group]
    assert (errored["status"], errored["outcome"], errored["running_workers"]) == (
        "SHUT_DOWN",
        "errored",
        0,
    )
    assert errored["error"] == "ValueError: loss is NaN on rank 1"
    assert errored["reports"] == 12
    assert (failed["status"], failed["attempt"]) == ("START_FAILED", 2)
    assert failed["error"] == "ImportError: No module named 'examples.nope'"


def test_groups_table_shows_the_status_and_the_error(cli: Any, recorded: Any) -> None:
    result = cli("groups", "--url", recorded.url)
    assert result.exit_code == 0, result.stderr
    assert "SHUT_DOWN (errored)" in result.stdout
    assert "START_FAILED" in result.stdout
    assert "0/4 running" in result.stdout


def test_groups_filters_by_status_run_and_time(cli: Any, recorded: Any) -> None:
    failed = cli("groups", "--url", recorded.url, "--status", "start_failed", "--json")
    assert [g["group_id"] for g in _json_lines(failed.stdout)] == [recorded.failed_group]
    both = cli(
        "groups",
        "--url",
        recorded.url,
        "--status",
        "SHUT_DOWN",
        "--status",
        "START_FAILED",
        "--json",
    )
    assert len(_json_lines(both.stdout)) == 2
    other_run = cli("groups", "--url", recorded.url, "--run", "another-run")
    assert other_run.exit_code == 2  # an unknown run, as in every command that takes one
    assert "no run id starts with 'another-run'" in other_run.stderr
    this_run = cli("groups", "--url", recorded.url, "--run", recorded.run_id, "--json")
    assert len(_json_lines(this_run.stdout)) == 2
    later = cli("groups", "--url", recorded.url, "--since", "2999-01-01", "--json")
    assert later.stdout == ""
    recent = cli("groups", "--url", recorded.url, "--since", "1h", "--json")
    assert len(_json_lines(recent.stdout)) == 2


def test_groups_refuses_an_unknown_status_naming_the_known_ones(
    cli: Any, recorded_sqlite: Any
) -> None:
    result = cli("groups", "--url", recorded_sqlite.url, "--status", "DONE")
    assert result.exit_code == 2
    assert "unknown status DONE" in result.stderr
    assert "SHUT_DOWN" in result.stderr


def test_groups_on_an_empty_store_says_so(cli: Any, sqlite_url: str) -> None:
    EventStore.open(sqlite_url).close()
    result = cli("groups", "--url", sqlite_url)
    assert result.exit_code == 0
    assert "no worker groups in the log" in result.stdout


def test_state_shows_workers_metrics_and_errors_at_the_head(cli: Any, recorded: Any) -> None:
    result = cli("state", recorded.errored_group[:8], "--url", recorded.url)
    assert result.exit_code == 0, result.stderr
    out = result.stdout
    assert "SHUT_DOWN (errored)" in out
    assert "training errored on rank 1" in out
    assert "ValueError: loss is NaN on rank 1" in out
    assert "loss=0.3333 step=2" in out
    assert "7 (3 recorded)" in out
    assert "node rank" in out and "node ip" in out  # the node column says what it shows


def test_state_at_a_version_travels_back_in_time(cli: Any, recorded: Any) -> None:
    result = cli("state", recorded.errored_group, "--url", recorded.url, "--version", "8", "--json")
    assert result.exit_code == 0, result.stderr
    state = json.loads(result.stdout)
    assert state["status"] == "RUNNING"
    assert state["version"] == 8
    assert state["reports_total"] == 1
    assert state["latest_metrics"] == {"0": {"loss": 1.0, "step": 0}}
    assert state["outcome"] is None


def test_state_at_a_moment_before_the_group_existed_exits_2(cli: Any, recorded: Any) -> None:
    result = cli("state", recorded.errored_group, "--url", recorded.url, "--at", "2000-01-01")
    assert result.exit_code == 2
    assert "has no events at 2000-01-01" in result.stderr


def test_state_at_now_equals_the_head(cli: Any, recorded: Any) -> None:
    now = datetime.now(UTC).isoformat()
    at_now = cli("state", recorded.failed_group, "--url", recorded.url, "--at", now, "--json")
    head = cli("state", recorded.failed_group, "--url", recorded.url, "--json")
    assert json.loads(at_now.stdout) == json.loads(head.stdout)
    assert json.loads(head.stdout)["start_failure"]["stage"] == "workers"


def test_state_past_the_last_version_exits_2(cli: Any, recorded_sqlite: Any) -> None:
    result = cli(
        "state", recorded_sqlite.failed_group, "--url", recorded_sqlite.url, "--version", "99"
    )
    assert result.exit_code == 2
    assert "no state after version 99" in result.stderr


def test_state_with_both_version_and_at_is_a_usage_error(cli: Any, recorded_sqlite: Any) -> None:
    result = cli("state", "a1", "--url", recorded_sqlite.url, "--version", "2", "--at", "1h")
    assert result.exit_code == 2


def test_state_of_an_unknown_group_exits_2(cli: Any, recorded: Any) -> None:
    result = cli("state", "0000", "--url", recorded.url)
    assert result.exit_code == 2
    assert "no worker group id starts with '0000'" in result.stderr


def test_groups_reads_current_read_models_and_they_agree_with_the_log(
    cli: Any, recorded: Any
) -> None:
    from wgstore.events import EventStore
    from wgstore.projections.views import summaries_from_read_models

    from_log = cli("groups", "--url", recorded.url, "--json")
    assert cli("projections", "catch-up", "--url", recorded.url).exit_code == 0
    with EventStore.open(recorded.url, read_only=True) as store:
        assert summaries_from_read_models(store) is not None  # current: groups uses them
    from_models = cli("groups", "--url", recorded.url, "--json")
    forced = cli("groups", "--url", recorded.url, "--json", "--from-log")
    assert _json_lines(from_models.stdout) == _json_lines(from_log.stdout)
    assert _json_lines(forced.stdout) == _json_lines(from_log.stdout)
    filtered = cli("groups", "--url", recorded.url, "--status", "START_FAILED", "--json")
    assert [g["group_id"] for g in _json_lines(filtered.stdout)] == [recorded.failed_group]


def test_groups_behind_the_log_are_folded_again_and_the_rest_read_from_the_read_models(
    cli: Any, recorded: Any, history: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from wgstore.events import EventStore
    from wgstore.projections import behind
    from wgstore.projections.views import summaries_from_log, summaries_from_read_models

    cli("projections", "catch-up", "--url", recorded.url)
    with EventStore.open(recorded.url) as store:
        history.record_failed_group(store, group_id="1a7e")
        lag = behind.read_models_behind(store)
        assert lag is not None and lag.group_ids == {"1a7e"} and not lag.current
        corrected = summaries_from_read_models(store)
        assert corrected is not None
        by_id = lambda rows: sorted(rows, key=lambda g: g.group_id)  # noqa: E731
        assert by_id(corrected) == by_id(summaries_from_log(store))  # as right as the log
        monkeypatch.setattr(behind, "MAX_BEHIND_EVENTS", lag.head - lag.checkpoint - 1)
        assert summaries_from_read_models(store) is None  # too far behind: fold the log
    groups = _json_lines(cli("groups", "--url", recorded.url, "--json").stdout)
    assert [g["group_id"] for g in groups][-1] == "1a7e"
    assert len(groups) == 3


def test_a_stream_the_fold_refuses_is_listed_as_unreadable_and_state_names_the_event(
    cli: Any, recorded: Any
) -> None:
    from wgstore.events import EventStore
    from wgstore.events.worker_group import WorkerGroupShutDown

    with EventStore.open(recorded.url) as store:
        store.append("worker-group-b0rken", [WorkerGroupShutDown(duration_s=0.0)])

    def listed() -> dict[str, Any]:
        lines = _json_lines(cli("groups", "--url", recorded.url, "--json").stdout)
        return {g["group_id"]: g for g in lines}

    from_log = listed()  # the read models are behind: folded from the log
    assert cli("projections", "catch-up", "--url", recorded.url).exit_code == 0
    from_models = listed()  # the read models are current: read from wg_worker_groups
    for groups in (from_log, from_models):
        assert groups["b0rken"]["status"] == "UNREADABLE"
        assert "must begin with WorkerGroupStartRequested" in groups["b0rken"]["error"]
    state = cli("state", "b0rken", "--url", recorded.url)
    assert state.exit_code == 1
    assert "stream 'worker-group-b0rken', version 1" in state.stderr
    assert "Traceback" not in state.stderr


def test_state_errors_prints_every_error_whole_and_tables_show_only_the_first_line(
    cli: Any, recorded: Any
) -> None:
    from wgstore.events.worker_group import ErrorInfo
    from wgstore.projections.views import first_line

    whole = cli("state", recorded.errored_group[:8], "--url", recorded.url, "--errors")
    assert whole.exit_code == 0
    assert "rank 1" in whole.stdout
    assert "ValueError: loss is NaN on rank 1" in whole.stdout
    assert 'File "train.py", line 9' in whole.stdout  # the traceback, whole
    table = cli("state", recorded.errored_group[:8], "--url", recorded.url)
    assert "Traceback" not in table.stdout
    failed = cli("state", recorded.failed_group[:8], "--url", recorded.url, "--errors")
    assert "start failed at stage" in failed.stdout
    health = ErrorInfo(
        type="WorkerHealthCheckFailedError", message="A worker health check failed.\nWorker: x"
    )
    assert first_line(health) == "WorkerHealthCheckFailedError: A worker health check failed. ..."


def test_the_groups_table_shows_the_first_line_of_a_multi_line_error(
    cli: Any, sqlite_url: str
) -> None:
    """As Ray Train's errors are (a grouped error string, a traceback): the table cell shows the
    first line and `` ...``; ``--json`` and ``state --errors`` keep all of it."""
    from wgstore.events.streams import group_stream
    from wgstore.events.worker_group import (
        ErrorInfo,
        StartStage,
        WorkerGroupContext,
        WorkerGroupStartFailed,
        WorkerGroupStartRequested,
    )

    message = "Training failed due to worker errors:\n[Rank 1 Error Snippet]:\nTraceback ...\n"
    with EventStore.open(sqlite_url) as store:
        store.append(
            group_stream("multi"),
            [
                WorkerGroupStartRequested(
                    group_id="multi",
                    run_id="multi",
                    context=WorkerGroupContext(num_workers=1, train_fn="m:f"),
                ),
                WorkerGroupStartFailed(
                    stage=StartStage.WORKERS,
                    error=ErrorInfo(type="WorkerGroupError", message=message),
                ),
            ],
        )
    table = cli("groups", "--url", sqlite_url, env={"COLUMNS": "250"})
    assert "WorkerGroupError: Training failed due to worker errors: ..." in table.stdout
    assert "Rank 1 Error Snippet" not in table.stdout
    (summary,) = _json_lines(cli("groups", "--url", sqlite_url, "--json").stdout)
    assert "Rank 1 Error Snippet" in summary["error"]


def test_a_group_on_its_own_is_not_a_run_in_groups_runs_or_state(
    cli: Any, sqlite_url: str, history: Any
) -> None:
    """``WorkerGroup.create`` without a run records the group's own id as its run id and writes
    no run stream: ``groups`` and ``state`` show no run, as ``runs`` lists none."""
    with EventStore.open(sqlite_url) as store:
        history.record_started_group(store, "alone01", run_id="alone01")
        history.record_errored_group(store, group_id="inrun01", run_id="r1")
        history.record_run(store, run_id="r1")
    listed = {
        g["group_id"]: g for g in _json_lines(cli("groups", "--url", sqlite_url, "--json").stdout)
    }
    assert (listed["alone01"]["run_id"], listed["inrun01"]["run_id"]) == (None, "r1")
    runs = _json_lines(cli("runs", "--url", sqlite_url, "--json").stdout)
    assert [r["run_id"] for r in runs] == ["r1"]
    table = cli("groups", "--url", sqlite_url, env={"COLUMNS": "250"}).stdout
    (alone_row,) = [line for line in table.splitlines() if "alone01" in line]
    assert "│ -" in alone_row and "alone01" not in alone_row.replace("alone01", "", 1)
    state = cli("state", "alone01", "--url", sqlite_url, env={"COLUMNS": "200"}).stdout
    assert "none (a group on its own, not part of a run)" in state
    assert "r1 (attempt 1)" in cli("state", "inrun01", "--url", sqlite_url).stdout
