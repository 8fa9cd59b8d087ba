"""``wgstore replay`` and ``wgstore polls`` on both backends."""

from __future__ import annotations

import json
from typing import Any


def _json_lines(text: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def test_replay_shows_what_each_event_changed(cli: Any, recorded: Any) -> None:
    result = cli("replay", recorded.errored_group[:5], "--url", recorded.url, "--json")
    assert result.exit_code == 0, result.stderr
    steps = _json_lines(result.stdout)
    assert len(steps) == 23
    assert [s["status"] for s in steps[:5]] == [
        "REQUESTED",
        "STARTING",
        "STARTING",
        "STARTING",
        "RUNNING",
    ]
    assert steps[1]["changes"]["status"] == {"from": "REQUESTED", "to": "STARTING"}
    error_poll = steps[19]
    assert error_poll["type"] == "WorkerGroupPolled"
    assert error_poll["changes"]["worker[1]"] == {
        "from": "running",
        "to": "error (ValueError: loss is NaN on rank 1)",
    }
    assert "worker[0]" not in error_poll["changes"]
    assert error_poll["changes"]["polls_total"] == {"from": "1", "to": "5"}
    first_report = steps[7]
    assert first_report["changes"]["latest_metrics[0]"] == {"from": "-", "to": "loss=1 step=0"}
    assert steps[-1]["changes"]["status"] == {"from": "SHUTTING_DOWN", "to": "SHUT_DOWN"}


def test_replay_as_text_puts_the_changes_under_each_event(cli: Any, recorded: Any) -> None:
    result = cli("replay", recorded.failed_group, "--url", recorded.url)
    assert result.exit_code == 0, result.stderr
    lines = result.stdout.splitlines()
    assert "WorkerGroupStartFailed" in lines[-4]
    assert lines[-3].strip() == "status: STARTING -> START_FAILED"
    assert lines[-2].strip().startswith("start_failure: - -> ")
    assert lines[-1].strip() == 'released: [] -> ["pg-2"]'


def test_replay_of_an_unknown_group_exits_2(cli: Any, recorded_sqlite: Any) -> None:
    assert cli("replay", "nope", "--url", recorded_sqlite.url).exit_code == 2


def test_polls_show_each_status_change_with_the_polls_it_stands_for(
    cli: Any, recorded: Any
) -> None:
    result = cli("polls", recorded.errored_group, "--url", recorded.url, "--json")
    assert result.exit_code == 0, result.stderr
    polls = _json_lines(result.stdout)
    assert [p["poll_seq"] for p in polls] == [1, 5, 7]
    assert [p["polls"] for p in polls] == [1, 4, 2]
    assert [p["running"] for p in polls] == [4, 3, 0]
    assert polls[1]["errors"] == {"1": "ValueError: loss is NaN on rank 1"}


def test_polls_table_counts_the_polls_it_stands_for(cli: Any, recorded: Any) -> None:
    result = cli("polls", recorded.errored_group, "--url", recorded.url)
    assert result.exit_code == 0, result.stderr
    assert "rank 1 error (ValueError: loss is NaN on rank 1)" in result.stdout
    assert "3 of 3 recorded polls shown, standing for 7 polls" in result.stdout
    assert "--all" not in result.stdout  # nothing is hidden, so nothing to suggest


def test_polls_hide_recorded_polls_without_a_change_unless_all(
    cli: Any, recorded: Any, history: Any
) -> None:
    from datetime import timedelta

    from wgstore.events import EventStore
    from wgstore.events.worker_group import WorkerGroupPolled, WorkerStatusChange

    group = "0abc0abc0abc0abc"
    with EventStore.open(recorded.url) as store:
        now = history.record_started_group(store, group)
        store.append(
            f"worker-group-{group}",
            [
                WorkerGroupPolled(poll_seq=1, polled_at=now),
                WorkerGroupPolled(
                    poll_seq=7, polled_at=now + timedelta(seconds=6), unchanged_polls=5
                ),
                WorkerGroupPolled(
                    poll_seq=8,
                    polled_at=now + timedelta(seconds=7),
                    changes=(WorkerStatusChange(world_rank=0, running=False),),
                ),
            ],
        )
    changes = cli("polls", group, "--url", recorded.url, "--json")
    assert [p["poll_seq"] for p in _json_lines(changes.stdout)] == [1, 8]
    every = cli("polls", group, "--url", recorded.url, "--json", "--all")
    assert [p["poll_seq"] for p in _json_lines(every.stdout)] == [1, 7, 8]
    assert [p["polls"] for p in _json_lines(every.stdout)] == [1, 6, 1]
    table = cli("polls", group, "--url", recorded.url)
    assert "2 of 3 recorded polls shown, standing for 8 polls" in table.stdout
    assert "--all shows every recorded poll" in table.stdout  # one is hidden


def test_polls_since_the_future_shows_none(cli: Any, recorded: Any) -> None:
    result = cli("polls", recorded.errored_group, "--url", recorded.url, "--since", "2999-01-01")
    assert result.exit_code == 0
    assert "no recorded polls in that time" in result.stdout


def test_polls_of_a_group_that_never_started_say_so(cli: Any, recorded: Any) -> None:
    result = cli("polls", recorded.failed_group, "--url", recorded.url)
    assert result.exit_code == 0
    assert "no recorded polls" in result.stdout


def test_polls_shows_the_first_line_of_a_multi_line_worker_error(
    cli: Any, sqlite_url: str, history: Any
) -> None:
    from datetime import UTC, datetime

    from wgstore.events import EventStore
    from wgstore.events.streams import group_stream
    from wgstore.events.worker_group import ErrorInfo, WorkerGroupPolled, WorkerStatusChange

    error = ErrorInfo(type="RuntimeError", message="first line\nsecond line")
    with EventStore.open(sqlite_url) as store:
        history.record_started_group(store, "multi01")
        store.append(
            group_stream("multi01"),
            [
                WorkerGroupPolled(
                    poll_seq=1,
                    polled_at=datetime.now(UTC),
                    changes=(WorkerStatusChange(world_rank=1, running=False, error=error),),
                )
            ],
        )
    shown = cli("polls", "multi01", "--url", sqlite_url, env={"COLUMNS": "250"})
    assert shown.exit_code == 0, shown.output
    assert "rank 1 error (RuntimeError: first line ...)" in shown.stdout
    assert "second line" not in shown.stdout
