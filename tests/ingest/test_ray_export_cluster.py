"""``wgstore ingest ray-export`` on the export events of a real 3-node Ray cluster.

The driver (``tests/ingest/ray_export_driver.py``, once for the module, in a subprocess with a
Ray temp folder of its own: a process has one Ray, and a ``Cluster`` needs its own) runs two
Ray Train runs with Ray's export events on: ``node-lost`` (no callback; a worker's node is
removed mid-attempt, so 2 attempts, the first ERRORED) and ``recorded`` (wgstore's
``RecordingCallback`` writing into a SQLite file). It leaves Ray's export folder and what Ray's
own state actor held of both runs (``ray_state.json``). This proves:

1. an ingested run is what Ray's state actor says: run, attempts and workers field by field,
   read back with the projections of ``projections/ray_train.py`` (both backends);
2. each export line is recorded exactly once when ingesters are killed mid-way and two run at
   once on the same files: every file's reads add up to its lines and end at its size, and every
   stream is what one ingester alone writes (both backends); ``wgstore verify`` passes;
3. ingested into the store the callback wrote, the callback's run stays one run holding only
   the callback's events, and the run without a callback is added from the export (SQLite);
4. Ray's node facts: the removed node started, then died during the attempt it failed, whose
   worker ran on it (SQLite).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from itertools import accumulate
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from tests.ingest.exported import ATTEMPT_FIELDS, RUN_FIELDS, WORKER_FIELDS
from tests.waiting import wait_until
from wgstore.cli import app
from wgstore.events import EventStore
from wgstore.events.ray_cluster import (
    READ_STREAM_PREFIX,
    RayExportRead,
    RayNodeDied,
    RayNodeStarted,
    node_stream,
    read_stream_of,
)
from wgstore.events.streams import group_stream, run_stream
from wgstore.orchestration.ray_export.files import export_files, file_id
from wgstore.projections.ray_train import ray_train_run, ray_train_run_attempts
from wgstore.projections.run_state import project_run

pytestmark = [pytest.mark.ray, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
DRIVER_TIMEOUT_S = 480  # ~60-90 s on this machine; generous for a loaded one
CLAIM_WAIT_S = 45  # `wgstore ingest ray-export`'s default --claim-wait-s

# Ray's Unix sockets live at <RAY_TMPDIR>/ray/session_<date>_<time>_<us>_<pid>/sockets/
# plasma_store.N, and a socket path must fit in 107 bytes: 71 of them are Ray's.
RAY_TMPDIR_MAX = 107 - 71

# What is compared with Ray's state actor. Left out, with why:
# - TrainRun.run_settings: the export writes the run's settings as proto JSON (enum names such
#   as "TRAINING_FRAMEWORK_UNSPECIFIED" for None, 0.0 for 0, "num_workers_fixed", an "all": {}
#   of data_config) where the state actor has pydantic's form of the same settings.
RUN_NOT_COMPARED = {"run_settings"}
WORKER_NOT_COMPARED: set[str] = set()


@dataclass(frozen=True)
class ClusterExport:
    """What the driver left: Ray's export folder, the callback's store, Ray's own records."""

    export_events: Path
    callback_db: Path
    state: dict[str, Any]

    def run_id(self, name: str) -> str:
        (run_id,) = [i for i, run in self.state["runs"].items() if run["name"] == name]
        return run_id

    def attempts(self, run_id: str) -> list[dict[str, Any]]:
        """Ray's attempts of the run, in the order they started (ray_state.json's keys are
        sorted: by attempt id)."""
        return sorted(self.state["attempts"][run_id].values(), key=lambda a: a["start_time_ns"])


def _tail(text: str, limit: int) -> str:
    return text if len(text) <= limit else "...\n" + text[-limit:]


@pytest.fixture(scope="module")
def cluster_export(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ClusterExport]:
    """Runs the driver once for the module (both runs on one cluster start)."""
    work = tmp_path_factory.mktemp("ray_export")
    out = work / "out"
    callback_db = work / "callback.db"
    ray_tmp = tmp_path_factory.mktemp("ray")
    if len(str(ray_tmp)) > RAY_TMPDIR_MAX:  # (pytest's base folder under xdist, a long user)
        ray_tmp = Path(tempfile.mkdtemp(prefix="wgre", dir="/tmp"))
    env = {**os.environ, "RAY_TMPDIR": str(ray_tmp)}
    env.pop("RAY_ADDRESS", None)
    command = [
        sys.executable,
        "-m",
        "tests.ingest.ray_export_driver",
        str(out),
        f"sqlite:///{callback_db}",
    ]
    # Its own session: on a timeout the driver and the Ray processes it started are killed
    # together (a killed driver never shuts its cluster down).
    proc = subprocess.Popen(
        command,
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        stdout, stderr = proc.communicate(timeout=DRIVER_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        stdout, stderr = proc.communicate()
        pytest.fail(
            f"the driver did not finish within {DRIVER_TIMEOUT_S} s\n--- stdout\n"
            f"{_tail(stdout, 4000)}\n--- stderr\n{_tail(stderr, 12000)}"
        )
    finally:
        shutil.rmtree(ray_tmp, ignore_errors=True)
    state_file = out / "ray_state.json"
    assert proc.returncode == 0 and state_file.exists(), (
        f"the driver exited {proc.returncode}\n--- stdout\n{_tail(stdout, 4000)}\n"
        f"--- stderr\n{_tail(stderr, 12000)}"
    )
    state = json.loads(state_file.read_text())
    assert "error" not in state["removed"], state["removed"]
    yield ClusterExport(out / "export_events", callback_db, state)


def wgstore(*args: str) -> Any:
    """``wgstore ARGS`` in this process (CliRunner); the result, its exit code checked by the
    caller. ``wgstore ingest`` sets a SIGTERM handler of its own: the session's is put back."""
    sigterm = signal.getsignal(signal.SIGTERM)
    try:
        return CliRunner().invoke(app, list(args), catch_exceptions=False)
    finally:
        signal.signal(signal.SIGTERM, sigterm)


def ingest(url: str, folder: Path, *options: str) -> dict[str, Any]:
    """``wgstore ingest ray-export FOLDER --url URL OPTIONS --json``: its summary."""
    result = wgstore("ingest", "ray-export", str(folder), "--url", url, *options, "--json")
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def reference_url(cluster_export: ClusterExport, tmp_path_factory: pytest.TempPathFactory) -> str:
    """The export read by one ingester alone, at once, into a fresh SQLite file."""
    url = f"sqlite:///{tmp_path_factory.mktemp('reference') / 'wgstore.db'}"
    EventStore.open(url, migrate=True).close()  # (ingest creates no schema: db upgrade does)
    stats = ingest(url, cluster_export.export_events, "--claim-wait-s", "0")
    assert (stats["bad_lines"], stats["problems"], stats["held"]) == ([], [], 0), stats
    return url


Histories = dict[str, list[tuple[str, object]]]


def histories(store: EventStore) -> Histories:
    """Every stream but the ingesters' reads: its events' types and the export lines they came
    from, in order."""
    return {
        stream_id: [
            (r.type, r.metadata.get("ray_export_event_id")) for r in store.read_stream(stream_id)
        ]
        for stream_id, _ in store.streams()
        if not stream_id.startswith(READ_STREAM_PREFIX)
    }


def run_streams(store: EventStore, run_id: str) -> dict[str, list[Any]]:
    """The run's stream and its attempts' group streams, as stored."""
    run = list(store.read_stream(run_stream(run_id)))
    streams = {run_stream(run_id): run}
    for group_id in project_run(run).groups:
        streams[group_stream(group_id)] = list(store.read_stream(group_stream(group_id)))
    return streams


# ----------------------------------------------------------------------------- 1. Ray's state


def test_an_ingested_run_is_what_rays_state_actor_holds(
    cluster_export: ClusterExport, store_url: str
) -> None:
    stats = ingest(store_url, cluster_export.export_events, "--claim-wait-s", "0")
    assert (stats["bad_lines"], stats["problems"], stats["held"]) == ([], [], 0), stats
    assert stats["files"] == 3 and stats["lines"] > 0 and stats["events"] > 0, stats

    state = cluster_export.state
    lost = cluster_export.run_id("node-lost")
    assert [a["status"] for a in cluster_export.attempts(lost)] == ["ERRORED", "FINISHED"]
    with EventStore.open(store_url) as store:
        for run_id, ray_run in state["runs"].items():  # node-lost, and recorded (no callback here)
            streams = run_streams(store, run_id)
            records = streams.pop(run_stream(run_id))
            assert project_run(records).source == "ray_export"
            run = ray_train_run(records)
            attempts = ray_train_run_attempts(streams.values())

            assert set(ray_run) == {*RUN_FIELDS, *RUN_NOT_COMPARED}  # nothing new left unseen
            assert {f: run[f] for f in RUN_FIELDS} == {f: ray_run[f] for f in RUN_FIELDS}

            ray_attempts = cluster_export.attempts(run_id)
            # The same attempts, in the order Ray started them.
            assert list(attempts) == [a["attempt_id"] for a in ray_attempts]
            for ray_attempt in ray_attempts:
                attempt_id = ray_attempt["attempt_id"]
                attempt = attempts[attempt_id]
                assert set(ray_attempt) == {*ATTEMPT_FIELDS, "workers"}
                assert {f: attempt[f] for f in ATTEMPT_FIELDS} == {
                    f: ray_attempt[f] for f in ATTEMPT_FIELDS
                }, (ray_run["name"], attempt_id)
                assert len(attempt["workers"]) == len(ray_attempt["workers"])
                for worker, ray_worker in zip(
                    attempt["workers"], ray_attempt["workers"], strict=True
                ):
                    assert set(ray_worker) == {*WORKER_FIELDS, *WORKER_NOT_COMPARED}
                    assert {f: worker[f] for f in WORKER_FIELDS} == {
                        f: ray_worker[f] for f in WORKER_FIELDS
                    }, (ray_run["name"], attempt_id, ray_worker["world_rank"])

    # The ERRORED attempt's detail is Ray's, word for word (compared above): it names the node.
    errored = cluster_export.attempts(lost)[0]
    assert state["removed"]["node_id"] in errored["status_detail"]


# --------------------------------------------------------------------------- 2. exactly once


def ingester_process(url: str, folder: Path) -> subprocess.Popen[str]:
    """``wgstore ingest ray-export`` in a process of its own, one line per transaction."""
    command = ["ingest", "ray-export", str(folder), "--url", url, "--claim-wait-s", "0"]
    return subprocess.Popen(
        [sys.executable, "-m", "wgstore.cli", *command, "--batch-lines", "1", "--json"],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def read_versions(store: EventStore) -> dict[str, int]:
    """Each read stream (``ray-export-file-<file id>``) and its version."""
    return dict(store.streams(READ_STREAM_PREFIX))


def kill_when(
    store: EventStore, url: str, folder: Path, condition: Callable[[dict[str, int]], bool]
) -> None:
    """Start an ingester and SIGKILL it once the log's reads meet ``condition``."""
    proc = ingester_process(url, folder)
    try:
        deadline = time.monotonic() + 120
        while not condition(read_versions(store)):
            if proc.poll() is not None:
                out, err = proc.communicate()
                pytest.fail(
                    f"the ingester ended ({proc.returncode}) before it was killed: {out}{err}"
                )
            if time.monotonic() > deadline:
                pytest.fail("the ingester read nothing within 120 s")
            time.sleep(0.002)
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        if proc.poll() is None:
            proc.kill()  # (the test failed waiting)
        out, err = proc.communicate()
    assert proc.returncode == -signal.SIGKILL, f"it ended before the kill: {out}{err}"


def lines_read(store: EventStore) -> int:
    """Lines the log says were read, over every file."""
    return sum(
        record.event.lines
        for stream_id in read_versions(store)
        for record in store.read_stream(stream_id)
        if isinstance(record.event, RayExportRead)
    )


def test_killed_and_concurrent_ingesters_record_every_line_exactly_once(
    cluster_export: ClusterExport, reference_url: str, store_url: str, tmp_path: Path
) -> None:
    folder = tmp_path / "export_events"
    shutil.copytree(cluster_export.export_events, folder)
    files = {}
    for path in export_files([folder]):
        fid = file_id(path)
        assert fid is not None, path
        files[fid] = (path, path.read_bytes().count(b"\n"), path.stat().st_size)
    total = sum(lines for _, lines, _ in files.values())
    train = file_id(folder / "event_EXPORT_TRAIN_STATE.log")
    assert train in files and len(files) == 3

    with EventStore.open(store_url) as store:
        # Killed as soon as its first read is in the log.
        kill_when(store, store_url, folder, lambda reads: any(v >= 1 for v in reads.values()))
        after_first_kill = lines_read(store)
        assert 0 < after_first_kill < total

        # Killed again two reads into the Train file: the runs' streams half written.
        start = read_versions(store).get(read_stream_of(train), 0)
        kill_when(
            store,
            store_url,
            folder,
            lambda reads: reads.get(read_stream_of(train), 0) >= start + 2,
        )
        before = lines_read(store)
        assert after_first_kill < before < total

        # Two at once on the same files and store, to the end.
        procs = [ingester_process(store_url, folder) for _ in range(2)]
        outputs = [proc.communicate(timeout=180) for proc in procs]
        for proc, (out, err) in zip(procs, outputs, strict=True):
            assert proc.returncode == 0, f"{out}{err}"
        stats = [json.loads(out.strip().splitlines()[-1]) for out, _ in outputs]
        for stat in stats:
            assert (stat["bad_lines"], stat["problems"], stat["held"]) == ([], [], 0), stat
        # What they say they read is what was left, neither more nor less.
        assert sum(stat["lines"] for stat in stats) == total - before, stats

        # Every file read to its end, each line once: reads follow one another, and add up.
        reads = {
            stream_id.removeprefix(READ_STREAM_PREFIX): [
                r.event for r in store.read_stream(stream_id)
            ]
            for stream_id in read_versions(store)
        }
        assert set(reads) == set(files)
        for fid, (path, lines, size) in files.items():
            events = reads[fid]
            assert all(isinstance(e, RayExportRead) and e.file_id == fid for e in events)
            assert sum(e.lines for e in events) == lines, path
            assert [e.line for e in events] == list(accumulate(e.lines for e in events)), path
            assert events[-1].offset == size, path
            assert all(e.lines >= 1 and not e.bad_lines for e in events), path
        assert lines_read(store) == total

        # Every other stream is what one ingester alone writes: same events, same lines.
        written = histories(store)
    with EventStore.open(reference_url) as reference:
        alone = histories(reference)
    assert written == alone

    result = wgstore("verify", "--url", store_url)
    assert result.exit_code == 0, result.output


# --------------------------------------------------------------------------------- 3. merge


def test_the_callbacks_run_stays_its_one_run_and_the_export_adds_the_other(
    cluster_export: ClusterExport, tmp_path: Path
) -> None:
    db = tmp_path / "callback.db"
    for suffix in ("", "-wal", "-shm"):
        source = Path(f"{cluster_export.callback_db}{suffix}")
        if source.exists():
            shutil.copyfile(source, f"{db}{suffix}")
    url = f"sqlite:///{db}"
    recorded = cluster_export.run_id("recorded")
    lost = cluster_export.run_id("node-lost")
    with EventStore.open(url) as store:
        callbacks = {s: [r.event_id for r in store.read_stream(s)] for s, _ in store.streams()}
    assert run_stream(recorded) in callbacks and run_stream(lost) not in callbacks

    # The default claim wait holds a run's lines until 45 s after Ray started it; node-lost's
    # start is normally long past by now (the driver ran recorded after it): made sure of.
    claim_ends_ns = cluster_export.state["runs"][lost]["start_time_ns"] + CLAIM_WAIT_S * 10**9
    wait_until(
        lambda: time.time_ns() > claim_ends_ns + 10**9,
        timeout_s=CLAIM_WAIT_S + 30,
        what="node-lost's claim to pass (45 s after Ray started it)",
    )
    stats = ingest(url, cluster_export.export_events)
    assert (stats["bad_lines"], stats["problems"], stats["held"]) == ([], [], 0), stats

    with EventStore.open(url) as store:
        # recorded: the callback's streams, untouched, and no stream of its own from the export.
        mine = run_streams(store, recorded)
        for stream_id, records in mine.items():
            assert [r.metadata.get("source") for r in records] == ["ray_train"] * len(records)
            assert [r.event_id for r in records] == callbacks[stream_id], stream_id
        assert project_run(mine[run_stream(recorded)]).source == "ray_train"
        # node-lost: read from the export, every event of its run and attempts.
        exported = run_streams(store, lost)
        assert len(exported) == 3  # the run and its 2 attempts
        for records in exported.values():
            assert {r.metadata.get("source") for r in records} == {"ray_export"}
        assert project_run(exported[run_stream(lost)]).source == "ray_export"
        runs = {s for s, _ in store.streams("run-")}
    assert runs == {run_stream(recorded), run_stream(lost)}

    listed = wgstore("runs", "--url", url, "--json")
    assert listed.exit_code == 0, listed.output
    rows = [json.loads(line) for line in listed.stdout.splitlines() if line.strip()]
    assert Counter(row["run_id"] for row in rows) == {recorded: 1, lost: 1}
    assert {row["name"]: row["source"] for row in rows} == {
        "recorded": "ray_train",
        "node-lost": "ray_export",
    }

    shown = wgstore("runs", lost, "--url", url)
    assert shown.exit_code == 0, shown.output
    (resumable,) = [line for line in shown.stdout.splitlines() if line.startswith("resumable")]
    assert "no" in resumable and "export" in resumable, shown.stdout


# ----------------------------------------------------------------------------- 4. node facts


def test_the_removed_node_started_then_died_during_the_attempt_it_failed(
    cluster_export: ClusterExport, reference_url: str
) -> None:
    state = cluster_export.state
    removed = state["removed"]["node_id"]
    assert state["removed"]["node"] in ("n2", "n3")
    assert removed == state["nodes"][state["removed"]["node"]]
    lost = cluster_export.run_id("node-lost")
    errored, _ = cluster_export.attempts(lost)

    with EventStore.open(reference_url) as store:
        started, died = (r.event for r in store.read_stream(node_stream(removed)))
        streams = run_streams(store, lost)
        attempt = ray_train_run_attempts(v for k, v in streams.items() if k != run_stream(lost))[
            errored["attempt_id"]
        ]
        others = [
            [r.event for r in store.read_stream(node_stream(node_id))]
            for node_id in state["nodes"].values()
            if node_id != removed
        ]

    assert isinstance(started, RayNodeStarted) and isinstance(died, RayNodeDied)
    assert started.node_id == died.node_id == removed and not started.is_head_node
    assert attempt["status"] == "ERRORED"
    on_it = [w for w in attempt["workers"] if w["node_id"] == removed]
    assert on_it and {w["node_ip"] for w in on_it} == {started.node_ip}
    assert removed in {w["node_id"] for w in errored["workers"]}  # as Ray's state actor says
    # It died while that attempt ran (Ray's clocks: the node's in ms, the attempt's in ns), before
    # the nodes left, which died with the cluster at the driver's end.
    assert errored["start_time_ns"] // 10**6 <= died.end_time_ms <= errored["end_time_ns"] // 10**6
    for events in others:
        assert isinstance(events[0], RayNodeStarted)
        later = [e.end_time_ms for e in events if isinstance(e, RayNodeDied)]
        assert all(end > died.end_time_ms for end in later)
