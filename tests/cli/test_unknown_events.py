"""Events of a type the ``wgstore`` command does not know never break an audit command.

docs/python-api.md invites custom event types (its ``CheckpointPinned`` snippet). Here a program with
its own registry appends them into a store that also holds real recorded groups, in streams of
its own (``pins-42``); and a type a newer wgstore defines, under the same name, lands inside
worker-group streams (the one way a type a reader does not know gets there now that ``append``
refuses other programs' types in wgstore's streams). The command, which never imported either,
must still show, export, fold and project the log.
"""

from __future__ import annotations

import json
import os
import queue
import subprocess
import sys
import threading
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from wgstore.events import (
    NO_STREAM,
    EventRegistry,
    EventStore,
    InvalidArgumentError,
    NewEvent,
    event_type,
)
from wgstore.events.worker_group import WorkerGroupPolled, stream_id_for_group
from wgstore.projections import READ_MODELS_SUBSCRIPTION, catch_up_read_models
from wgstore.projections.projector import read_model_rows
from wgstore.projections.read_models import wg_worker_groups

OTHER_PROGRAM = EventRegistry()
"""The registry of "another program": the ``wgstore`` command under test never sees it."""


@event_type("CheckpointPinned", version=1, registry=OTHER_PROGRAM)
@dataclass(frozen=True)
class CheckpointPinned:
    path: str


NEWER_WGSTORE = EventRegistry()
"""The registry of a newer wgstore: a type of its own that the command under test lacks."""


@event_type("CheckpointPinned", version=1, registry=NEWER_WGSTORE)
@dataclass(frozen=True)
class NewerCheckpointPinned:
    path: str


NewerCheckpointPinned.__module__ = "wgstore.events.newer"  # where a newer wgstore defines it


RUNNING_GROUP = "0badc0de0badc0de0badc0de0badc0de"


@dataclass(frozen=True)
class Mixed:
    """A store with real groups, a run, and unknown events in and out of the groups' streams."""

    url: str
    errored_group: str
    failed_group: str
    running_group: str


def _append_unknown(url: str, stream_id: str, path: str, **kwargs: Any) -> None:
    """Append an event of a type the command does not know: another program's in its own
    streams, a newer wgstore's in wgstore's streams."""
    if stream_id.startswith("worker-group-"):
        with EventStore.open(url, registry=NEWER_WGSTORE) as newer:
            newer.append(stream_id, [NewerCheckpointPinned(path=path)], **kwargs)
        return
    with EventStore.open(url, registry=OTHER_PROGRAM) as other:
        other.append(stream_id, [CheckpointPinned(path=path)], **kwargs)


def test_another_programs_type_is_refused_in_wgstores_streams(recorded: Any) -> None:
    for stream_id in ("run-42", stream_id_for_group(recorded.errored_group)):
        with EventStore.open(recorded.url, registry=OTHER_PROGRAM) as other:
            before = other.stream_version(stream_id)
            with pytest.raises(InvalidArgumentError, match="a stream of your own") as refused:
                other.append(stream_id, [NewEvent(CheckpointPinned(path="/x"))])
            assert f"cannot append CheckpointPinned to {stream_id!r}" in str(refused.value)
            assert other.stream_version(stream_id) == before  # nothing was written
    with EventStore.open(recorded.url, registry=OTHER_PROGRAM) as other:
        other.append("pins-42", iter([CheckpointPinned(path="/x")]))  # a generator is read once
        assert [r.event.path for r in other.read_stream("pins-42")] == ["/x"]


@pytest.fixture
def mixed(recorded: Any, history: Any) -> Mixed:
    """``recorded`` + a running group, read models caught up, then unknown events appended."""
    with EventStore.open(recorded.url) as store:
        now = history.record_started_group(store, RUNNING_GROUP)
        catch_up_read_models(store)
    # docs/python-api.md's own snippet: a stream of its own.
    _append_unknown(recorded.url, "pins-42", "/ckpt/3", expected_version=NO_STREAM)
    # Inside worker-group streams: after a terminal state, and in the middle of a running group.
    _append_unknown(recorded.url, stream_id_for_group(recorded.errored_group), "/ckpt/after-end")
    _append_unknown(recorded.url, stream_id_for_group(recorded.failed_group), "/ckpt/failed")
    _append_unknown(recorded.url, stream_id_for_group(RUNNING_GROUP), "/ckpt/mid")
    with EventStore.open(recorded.url) as store:
        store.append(
            stream_id_for_group(RUNNING_GROUP), [WorkerGroupPolled(poll_seq=1, polled_at=now)]
        )
    return Mixed(recorded.url, recorded.errored_group, recorded.failed_group, RUNNING_GROUP)


def _json_lines(text: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in text.splitlines() if line.strip()]


AUDIT_COMMANDS = [
    ("events",),
    ("events", "--json"),
    ("events", "--stream", "pins-42"),
    ("events", "--group", "{errored}"),
    ("export", "-o", "{tmp}/log.jsonl"),
    ("export", "-o", "{tmp}/log.parquet"),
    ("export", "--group", "{running}", "-o", "{tmp}/group.jsonl"),
    ("report", "{errored}", "-o", "{tmp}/errored.html"),
    ("report", "{running}", "-o", "{tmp}/running.html"),
    ("verify",),
    ("groups",),
    ("groups", "--json"),
    ("state", "{errored}"),
    ("state", "{running}"),
    ("state", "{failed}"),
    ("replay", "{running}"),
    ("replay", "{errored}", "--json"),
    ("polls", "{running}"),
    ("polls", "{errored}"),
    ("projections", "status"),
    ("projections", "catch-up"),
    ("projections", "rebuild"),
]


@pytest.mark.parametrize("command", AUDIT_COMMANDS, ids=" ".join)
def test_every_audit_command_exits_0_with_unknown_events_in_the_log(
    cli: Any, mixed: Mixed, tmp_path: Path, command: tuple[str, ...]
) -> None:
    names = {
        "errored": mixed.errored_group,
        "running": mixed.running_group,
        "failed": mixed.failed_group,
        "tmp": str(tmp_path),
    }
    args = [part.format(**names) for part in command]
    result = cli(*args, "--url", mixed.url)
    assert result.exit_code == 0, result.stdout + result.stderr
    assert "Traceback" not in result.stderr


def test_events_show_the_unknown_type_its_position_and_its_raw_data(cli: Any, mixed: Mixed) -> None:
    result = cli("events", "--url", mixed.url, "--json")
    assert result.exit_code == 0, result.stderr
    pinned = [e for e in _json_lines(result.stdout) if e["type"] == "CheckpointPinned"]
    assert [(e["stream_id"], e["data"]) for e in pinned] == [
        ("pins-42", {"path": "/ckpt/3"}),
        (f"worker-group-{mixed.errored_group}", {"path": "/ckpt/after-end"}),
        (f"worker-group-{mixed.failed_group}", {"path": "/ckpt/failed"}),
        (f"worker-group-{mixed.running_group}", {"path": "/ckpt/mid"}),
    ]
    assert all(e["position"] > 0 and e["schema_version"] == 1 for e in pinned)
    text = cli("events", "--url", mixed.url, "--stream", "pins-42")
    assert text.exit_code == 0, text.stderr
    assert "CheckpointPinned" in text.stdout
    assert "not registered" in text.stdout and "/ckpt/3" in text.stdout


def test_exports_carry_the_unknown_events_raw(cli: Any, mixed: Mixed, tmp_path: Path) -> None:
    jsonl, parquet = tmp_path / "log.jsonl", tmp_path / "log.parquet"
    assert cli("export", "--url", mixed.url, "-o", str(jsonl)).exit_code == 0
    assert cli("export", "--url", mixed.url, "-o", str(parquet)).exit_code == 0
    rows = _json_lines(jsonl.read_text())
    pinned = [r["data"]["path"] for r in rows if r["type"] == "CheckpointPinned"]
    assert pinned == ["/ckpt/3", "/ckpt/after-end", "/ckpt/failed", "/ckpt/mid"]
    table = pq.read_table(parquet).to_pylist()
    assert len(table) == len(rows)
    assert next(json.loads(r["data"]) for r in table if r["type"] == "CheckpointPinned") == {
        "path": "/ckpt/3"
    }


def test_the_folds_step_over_unknown_events_in_a_group_stream(cli: Any, mixed: Mixed) -> None:
    result = cli("groups", "--url", mixed.url, "--json")
    assert result.exit_code == 0, result.stderr
    groups = {g["group_id"]: g for g in _json_lines(result.stdout)}
    assert groups[mixed.errored_group]["status"] == "SHUT_DOWN"
    assert groups[mixed.failed_group]["status"] == "START_FAILED"
    assert groups[mixed.running_group]["status"] == "RUNNING"
    assert groups[mixed.running_group]["running_workers"] == 4


def test_catch_up_applies_the_groups_and_the_read_models_equal_a_rebuild(
    cli: Any, mixed: Mixed
) -> None:
    assert cli("projections", "catch-up", "--url", mixed.url).exit_code == 0
    with EventStore.open(mixed.url) as store:
        assert store.subscription(READ_MODELS_SUBSCRIPTION).checkpoint() == store.head()
        with store.engine.connect() as connection:
            caught_up = read_model_rows(connection)
    groups = {row[0]: row for row in caught_up["wg_worker_groups"]}
    assert set(groups) == {mixed.errored_group, mixed.failed_group, mixed.running_group}
    error_at = list(wg_worker_groups.c.keys()).index("projection_error")
    assert all(row[error_at] is None for row in groups.values())
    assert len(caught_up["wg_poll_history"]) == 4  # 3 of the errored group, 1 after the unknown
    assert cli("projections", "rebuild", "--url", mixed.url).exit_code == 0
    with EventStore.open(mixed.url) as store, store.engine.connect() as connection:
        assert read_model_rows(connection) == caught_up
    verify = cli("verify", "--url", mixed.url)
    assert verify.exit_code == 0, verify.stdout
    assert "read models match a rebuild" in verify.stdout


def test_follow_keeps_running_when_an_unknown_event_arrives(mixed: Mixed) -> None:
    env = {**os.environ, "WGSTORE_URL": mixed.url, "NO_COLOR": "1"}
    follower = subprocess.Popen(
        [sys.executable, "-m", "wgstore.cli", "events", "--follow", "--json"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    lines = _lines_of(follower)
    try:
        with EventStore.open(mixed.url) as store:
            head = store.head()
        _read_until(follower, lines, lambda e: e["position"] == head)
        _append_unknown(mixed.url, "pins-43", "/ckpt/live")
        with EventStore.open(mixed.url) as store:
            [after] = store.append(
                stream_id_for_group(mixed.running_group),
                [WorkerGroupPolled(poll_seq=2, polled_at=datetime.now(UTC))],
            )
        live = _read_until(follower, lines, lambda e: e["position"] == after.position)
        assert [(e["type"], e["stream_id"]) for e in live] == [
            ("CheckpointPinned", "pins-43"),
            ("WorkerGroupPolled", f"worker-group-{mixed.running_group}"),
        ]
        assert live[0]["data"] == {"path": "/ckpt/live"}
        assert follower.poll() is None, follower.stderr.read() if follower.stderr else ""
    finally:
        follower.terminate()
        follower.wait(timeout=30)


def _lines_of(process: subprocess.Popen[str]) -> queue.Queue[str]:
    """The lines ``process`` prints, read by a thread ("" once its output ends)."""
    lines: queue.Queue[str] = queue.Queue()

    def pump() -> None:
        assert process.stdout is not None
        for line in process.stdout:
            lines.put(line)
        lines.put("")

    threading.Thread(target=pump, daemon=True).start()
    return lines


def _read_until(
    process: subprocess.Popen[str], lines: queue.Queue[str], done: Any, timeout_s: float = 60
) -> list[Any]:
    """The JSON lines ``process`` prints, up to the first one ``done`` accepts (or fail)."""
    got: list[Any] = []
    while True:
        try:
            line = lines.get(timeout=timeout_s)
        except queue.Empty:
            pytest.fail(f"no matching event within {timeout_s}s; got {got}")
        if not line:
            stderr = process.stderr.read() if process.stderr else ""
            pytest.fail(f"the follower stopped (exit {process.wait()}): {stderr}")
        got.append(json.loads(line))
        if done(got[-1]):
            return got


def test_an_unregistered_type_found_in_the_log_can_be_asked_for_by_name(
    cli: Any, mixed: Mixed, tmp_path: Path
) -> None:
    result = cli("events", "--url", mixed.url, "--type", "CheckpointPinned", "--json")
    assert result.exit_code == 0, result.stderr
    assert [e["data"]["path"] for e in _json_lines(result.stdout)] == [
        "/ckpt/3",
        "/ckpt/after-end",
        "/ckpt/failed",
        "/ckpt/mid",
    ]
    target = tmp_path / "pinned.jsonl"
    exported = cli("export", "--url", mixed.url, "-t", "CheckpointPinned", "-o", str(target))
    assert exported.exit_code == 0, exported.stderr
    assert len(_json_lines(target.read_text())) == 4
    missing = cli("events", "--url", mixed.url, "--type", "CheckpointUnpinned")
    assert missing.exit_code == 2
    assert "'CheckpointUnpinned' is not an event type" in missing.stderr


def test_verify_says_how_many_events_it_read_of_types_it_does_not_know(
    cli: Any, mixed: Mixed
) -> None:
    result = cli("verify", "--url", mixed.url)
    assert result.exit_code == 0, result.stdout
    assert "4 event(s) of types this wgstore does not know (CheckpointPinned x4)" in " ".join(
        result.stdout.split()
    )


def test_replay_says_it_stepped_over_the_unknown_event(cli: Any, mixed: Mixed) -> None:
    result = cli("replay", mixed.running_group, "--url", mixed.url)
    assert result.exit_code == 0, result.stderr
    lines = result.stdout.splitlines()
    at = next(i for i, line in enumerate(lines) if "CheckpointPinned" in line)
    assert "/ckpt/mid" in lines[at]
    assert "stepped over" in lines[at + 1]
