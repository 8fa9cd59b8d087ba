"""``wgstore events``: the log for a group, a stream, a run or everything, filtered and followed."""

from __future__ import annotations

import json
import os
import queue
import subprocess
import sys
import threading
import time
from typing import Any

from wgstore.events import EventStore
from wgstore.events.worker_group import WorkerGroupShutdownRequested

GROUP_TYPES = [
    "WorkerGroupStartRequested",
    "PlacementGroupReserved",
    "SyncActorStarted",
    "WorkersStarted",
    "WorkerGroupStarted",
    "TrainingLaunched",
    "WorkerGroupPolled",
    *["WorkerReported"] * 12,
    "WorkerGroupPolled",
    "WorkerGroupPolled",
    "WorkerGroupShutdownRequested",
    "WorkerGroupShutDown",
]


def _json_lines(text: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def test_the_whole_log_comes_out_in_global_order(cli: Any, recorded: Any) -> None:
    result = cli("events", "--url", recorded.url, "--json")
    assert result.exit_code == 0, result.stderr
    events = _json_lines(result.stdout)
    assert [e["position"] for e in events] == sorted(e["position"] for e in events)
    assert len(events) == len(GROUP_TYPES) + 3 + 2
    assert {e["stream_id"] for e in events} == {
        f"worker-group-{recorded.errored_group}",
        f"worker-group-{recorded.failed_group}",
        f"run-{recorded.run_id}",
    }


def test_a_group_given_as_an_argument_is_the_same_as_group_option(cli: Any, recorded: Any) -> None:
    positional = cli("events", recorded.errored_group[:6], "--url", recorded.url, "--json")
    option = cli("events", "--group", recorded.errored_group[:6], "--url", recorded.url, "--json")
    assert positional.exit_code == 0, positional.stderr
    assert [e["type"] for e in _json_lines(positional.stdout)] == GROUP_TYPES
    assert positional.stdout == option.stdout
    both = cli("events", "abc", "--group", "abc", "--url", recorded.url)
    assert both.exit_code == 2
    assert "give the group once" in both.stderr


def test_an_empty_log_says_so(cli: Any, store_url: str) -> None:
    EventStore.open(store_url).close()
    result = cli("events", "--url", store_url)
    assert result.exit_code == 0, result.stderr
    assert result.stdout == ""
    assert "the log is empty" in result.stderr


def test_a_group_given_by_prefix_shows_its_events_with_decoded_data(
    cli: Any, recorded: Any
) -> None:
    result = cli("events", "--url", recorded.url, "--group", recorded.errored_group[:6], "--json")
    assert result.exit_code == 0, result.stderr
    events = _json_lines(result.stdout)
    assert [e["type"] for e in events] == GROUP_TYPES
    assert [e["version"] for e in events] == list(range(1, len(GROUP_TYPES) + 1))
    first = events[0]
    assert first["data"]["context"]["num_workers"] == 4
    assert first["data"]["group_id"] == recorded.errored_group
    assert len(first["hash"]) == 64
    shutdown = events[-2]
    assert shutdown["metadata"]["command_id"] == "cmd-shutdown"


def test_the_table_form_summarises_each_event_on_one_line(cli: Any, recorded: Any) -> None:
    result = cli("events", "--url", recorded.url, "--group", recorded.errored_group)
    assert result.exit_code == 0, result.stderr
    lines = result.stdout.splitlines()
    assert len(lines) == len(GROUP_TYPES)
    text = result.stdout
    assert "4 workers x CPU=0.5, examples.train:train_fn" in text
    assert "rank 1 failed (ValueError: loss is NaN on rank 1)" in text
    assert "(after 3 unchanged polls)" in text
    assert "rank 0 report #2: loss=0.3333 step=2 checkpoint /ckpt/2" in text
    assert "reason: training errored on rank 1" in text


def test_type_filters_combine(cli: Any, recorded: Any) -> None:
    result = cli(
        "events",
        "--url",
        recorded.url,
        "-t",
        "WorkerGroupPolled",
        "-t",
        "WorkerGroupStartFailed",
        "--json",
    )
    assert result.exit_code == 0, result.stderr
    assert [e["type"] for e in _json_lines(result.stdout)] == [
        "WorkerGroupPolled",
        "WorkerGroupPolled",
        "WorkerGroupPolled",
        "WorkerGroupStartFailed",
    ]


def test_an_unknown_type_exits_2_and_suggests_close_names(cli: Any, recorded: Any) -> None:
    result = cli("events", "--url", recorded.url, "--type", "polled")
    assert result.exit_code == 2
    assert "did you mean WorkerGroupPolled" in result.stderr


def test_a_run_shows_its_own_stream_and_every_group_started_for_it(cli: Any, recorded: Any) -> None:
    result = cli("events", "--url", recorded.url, "--run", recorded.run_id, "--json")
    assert result.exit_code == 0, result.stderr
    assert len(_json_lines(result.stdout)) == len(GROUP_TYPES) + 3 + 2


def test_a_stream_shows_only_that_stream(cli: Any, recorded: Any) -> None:
    result = cli("events", "--url", recorded.url, "--stream", f"run-{recorded.run_id}")
    assert result.exit_code == 0, result.stderr
    assert "RunCreated" in result.stdout
    assert "RunErrored" in result.stdout
    assert "WorkerGroup" not in result.stdout.replace(recorded.errored_group, "")


def test_since_and_until_filter_by_recorded_time(cli: Any, recorded: Any) -> None:
    recent = cli("events", "--url", recorded.url, "--since", "1h", "--json")
    assert len(_json_lines(recent.stdout)) == len(GROUP_TYPES) + 5
    future = cli("events", "--url", recorded.url, "--since", "2999-01-01", "--json")
    assert future.exit_code == 0
    assert future.stdout == ""
    past = cli("events", "--url", recorded.url, "--until", "1h", "--json")
    assert past.stdout == ""


def test_since_after_until_is_a_usage_error(cli: Any, recorded_sqlite: Any) -> None:
    result = cli("events", "--url", recorded_sqlite.url, "--since", "1h", "--until", "2h")
    assert result.exit_code == 2
    assert "is after --until" in result.stderr


def test_a_bad_time_exits_2_naming_the_forms_it_takes(cli: Any, recorded_sqlite: Any) -> None:
    result = cli("events", "--url", recorded_sqlite.url, "--since", "last tuesday")
    assert result.exit_code == 2
    assert "'last tuesday' is not a time" in result.stderr
    assert "Traceback" not in result.stderr


def test_an_unknown_group_exits_2_and_says_how_to_list_groups(cli: Any, recorded: Any) -> None:
    result = cli("events", "--url", recorded.url, "--group", "zzz")
    assert result.exit_code == 2
    assert "no worker group id starts with 'zzz'" in result.stderr
    assert "wgstore groups" in result.stderr


def test_an_ambiguous_group_prefix_exits_2_listing_the_matches(
    cli: Any, recorded_sqlite: Any, history: Any
) -> None:
    twin = recorded_sqlite.errored_group[:4] + "ffff"
    with EventStore.open(recorded_sqlite.url) as store:
        history.record_failed_group(store, group_id=twin)
    result = cli("events", "--url", recorded_sqlite.url, "--group", twin[:4])
    assert result.exit_code == 2
    assert "matches 2 worker groups" in result.stderr
    assert twin in result.stderr
    exact = cli("events", "--url", recorded_sqlite.url, "--group", twin, "--json")
    assert exact.exit_code == 0
    assert len(_json_lines(exact.stdout)) == 3


def test_an_unknown_stream_exits_2(cli: Any, recorded_sqlite: Any) -> None:
    result = cli("events", "--url", recorded_sqlite.url, "--stream", "run-nope")
    assert result.exit_code == 2
    assert "no stream 'run-nope'" in result.stderr


def test_group_and_stream_together_are_a_usage_error(cli: Any, recorded_sqlite: Any) -> None:
    result = cli("events", "--url", recorded_sqlite.url, "--group", "a1", "--stream", "run-x")
    assert result.exit_code == 2
    assert "not several" in result.stderr


def test_a_store_that_is_not_migrated_exits_1_and_says_to_upgrade(
    cli: Any, empty_store_url: str
) -> None:
    if empty_store_url.startswith("sqlite"):
        import sqlite3

        sqlite3.connect(empty_store_url.removeprefix("sqlite:///")).close()
    result = cli("events", "--url", empty_store_url)
    assert result.exit_code == 1
    assert "wgstore db upgrade" in result.stderr


def test_read_commands_never_create_or_migrate_the_database(cli: Any, in_tmp_folder: Any) -> None:
    result = cli("events")
    assert result.exit_code == 1
    assert "no wgstore database at wgstore.db" in result.stderr
    assert not (in_tmp_folder / "wgstore.db").exists()


def _next_line(lines: queue.Queue[str], deadline: float) -> dict[str, Any]:
    try:
        line = lines.get(timeout=max(0.0, deadline - time.monotonic()))
    except queue.Empty:
        raise AssertionError("wgstore events --follow printed nothing more in time") from None
    return dict(json.loads(line))


def test_follow_prints_events_appended_while_it_waits(recorded: Any) -> None:
    # A real process, read line by line: the events appended below are appended only after it
    # printed the stored ones (so after it read the head), hence only following can print them.
    command = [sys.executable, "-m", "wgstore.cli", "events", "--url", recorded.url]
    command += ["--group", recorded.failed_group, "--follow", "--stop-after", "120s", "--json"]
    process = subprocess.Popen(
        command,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    lines: queue.Queue[str] = queue.Queue()
    reader = threading.Thread(
        target=lambda: [lines.put(line) for line in process.stdout or ()], daemon=True
    )
    reader.start()
    deadline = time.monotonic() + 60
    try:
        stored = [_next_line(lines, deadline)["type"] for _ in range(3)]
        assert stored == [
            "WorkerGroupStartRequested",
            "PlacementGroupReserved",
            "WorkerGroupStartFailed",
        ]
        with EventStore.open(recorded.url) as store:
            # Appended to another stream (filtered out) and to the followed one (printed). In
            # position order, so a leak of the first would come out before the second.
            store.append(
                f"run-{recorded.run_id}", [WorkerGroupShutdownRequested(reason="elsewhere")]
            )
            store.append(
                f"worker-group-{recorded.failed_group}",
                [WorkerGroupShutdownRequested(reason="late arrival")],
            )
        followed = _next_line(lines, deadline)
        assert (followed["type"], followed["data"].get("reason")) == (
            "WorkerGroupShutdownRequested",
            "late arrival",
        )
    finally:
        process.terminate()
        process.wait(timeout=30)
        reader.join(timeout=10)


def test_stop_after_without_follow_is_a_usage_error(cli: Any, recorded_sqlite: Any) -> None:
    result = cli("events", "--url", recorded_sqlite.url, "--stop-after", "1s")
    assert result.exit_code == 2
