"""``wgstore projections status | catch-up | rebuild`` and ``wgstore verify`` of the read models."""

from __future__ import annotations

import re
from typing import Any

from tests.cli.conftest import make_reader
from wgstore.events.engine import create_store_engine


def _execute(url: str, sql: str) -> None:
    engine = create_store_engine(url)
    try:
        with engine.begin() as connection:
            connection.exec_driver_sql(sql)
    finally:
        engine.dispose()


def test_status_says_how_far_behind_the_read_models_are(cli: Any, recorded: Any) -> None:
    result = cli("projections", "status", "--url", recorded.url)
    assert result.exit_code == 0, result.stderr
    assert "28 event(s) not applied yet" in result.stdout


def test_catch_up_then_status_is_up_to_date_with_the_rows_counted(cli: Any, recorded: Any) -> None:
    caught = cli("projections", "catch-up", "--url", recorded.url)
    assert caught.exit_code == 0, caught.stderr
    assert "applied 28 worker-group and run event(s)" in caught.stdout  # 26 + 2 of the run
    assert "(position 28;" in caught.stdout
    status = cli("projections", "status", "--url", recorded.url)
    assert "up to date" in status.stdout
    for table, rows in (
        ("wg_worker_groups", 2),
        ("wg_workers", 4),
        ("wg_poll_history", 3),
        ("wg_reports", 12),
        ("wg_runs", 1),
    ):
        assert re.search(rf"{table}\s+│ {rows}\s", status.stdout), table


def test_rebuild_refills_the_read_models_and_sql_sees_them(cli: Any, recorded: Any) -> None:
    result = cli("projections", "rebuild", "--url", recorded.url)
    assert result.exit_code == 0, result.stderr
    assert (
        "rebuilt the read models from 28 worker-group and run event(s), up to position 28"
        in result.stdout
    )
    assert "rebuilding" in result.stdout
    make_reader(recorded.url)  # `wgstore db reader`: the role wgstore sql reads as
    rows = cli(
        "sql",
        "SELECT group_id, status, outcome FROM wg_worker_groups ORDER BY group_id",
        "--url",
        recorded.url,
        "--json",
    )
    assert rows.stdout.splitlines() == [
        f'{{"group_id": "{recorded.errored_group}", "outcome": "errored", "status": "SHUT_DOWN"}}',
        f'{{"group_id": "{recorded.failed_group}", "outcome": null, "status": "START_FAILED"}}',
    ]


def test_verify_passes_when_the_read_models_match_a_rebuild(cli: Any, recorded: Any) -> None:
    cli("projections", "catch-up", "--url", recorded.url)
    result = cli("verify", "--url", recorded.url)
    assert result.exit_code == 0, result.stdout + result.stderr
    assert "read models match a rebuild from the log" in result.stdout


def test_verify_names_a_read_model_row_changed_behind_the_projector(
    cli: Any, recorded: Any
) -> None:
    cli("projections", "catch-up", "--url", recorded.url)
    _execute(
        recorded.url,
        f"UPDATE wg_worker_groups SET status = 'RUNNING' WHERE group_id = '{recorded.errored_group}'",
    )
    _execute(
        recorded.url,
        f"DELETE FROM wg_reports WHERE group_id = '{recorded.errored_group}' AND world_rank = 2 AND report_index = 1",
    )
    result = cli("verify", "--url", recorded.url)
    assert result.exit_code == 1
    assert (
        f"wg_worker_groups row {recorded.errored_group}: status is 'RUNNING' in the read model, 'SHUT_DOWN' in a rebuild"
        in result.stdout
    )
    assert (
        f"wg_reports row {recorded.errored_group}, 2, 1 is missing from the read model"
        in result.stdout
    )
    assert "verify found 2 problem(s)" in result.stderr
    skipped = cli("verify", "--url", recorded.url, "--no-read-models")
    assert skipped.exit_code == 0


def test_verify_of_read_models_behind_the_log_is_only_a_note(
    cli: Any, recorded: Any, history: Any
) -> None:
    from wgstore.events import EventStore

    cli("projections", "catch-up", "--url", recorded.url)
    with EventStore.open(recorded.url) as store:
        history.record_failed_group(store, group_id="0123")
    result = cli("verify", "--url", recorded.url)
    assert result.exit_code == 0, result.stdout
    assert "read models are 3 event(s) behind the log" in result.stdout


def test_projection_commands_on_a_missing_database_exit_1(cli: Any, tmp_path: Any) -> None:
    url = f"sqlite:///{tmp_path / 'none.db'}"
    assert cli("projections", "status", "--url", url).exit_code == 1


def test_catch_up_follow_keeps_the_read_models_current_until_interrupted(
    recorded: Any, history: Any
) -> None:
    import os
    import signal
    import subprocess
    import sys

    from tests.waiting import wait_until
    from wgstore.events import EventStore
    from wgstore.projections import READ_MODELS_SUBSCRIPTION

    command = [sys.executable, "-m", "wgstore.cli", "projections", "catch-up", "--follow"]
    command += ["--every", "0.1", "--url", recorded.url]
    process = subprocess.Popen(
        command,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    try:
        with EventStore.open(recorded.url) as store:
            checkpoint = store.subscription(READ_MODELS_SUBSCRIPTION).checkpoint
            wait_until(
                lambda: checkpoint() == store.head(), timeout_s=120, what="the first catch-up"
            )
            group_id = "f0110e5e" * 4
            history.record_started_group(store, group_id)  # appended while it follows
            wait_until(
                lambda: checkpoint() == store.head(),
                timeout_s=120,
                what="the follower to apply the new group",
            )
            with store.engine.connect() as connection:
                groups = connection.exec_driver_sql(
                    f"SELECT count(*) FROM wg_worker_groups WHERE group_id = '{group_id}'"
                ).scalar()
            assert groups == 1
        process.send_signal(signal.SIGINT)
        out, err = process.communicate(timeout=120)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert process.returncode == 0, err
    assert "following the log" in out and "stopped; the read models are at position" in out
    assert "Traceback" not in err
