"""``wgstore run`` and ``wgstore executor`` on a real local Ray, then the audit commands on the record.

Uses the session's local Ray (``ray_session``). The train function is ``examples.train:train_fn``,
imported by the workers from the repository root (the current folder during these tests).
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.cli.conftest import make_reader
from tests.cli.test_report import ARTIFACTS, open_in_chromium
from tests.orchestration.conftest import REPO, assert_nothing_left, make_context

FAST = ["--cpus-per-worker", "0.25", "--poll-interval", "0.2"]


@pytest.fixture
def ray_in_repo(ray_session: None, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Ray is up and the current folder is the repository root (so workers import examples)."""
    monkeypatch.chdir(REPO)
    yield
    from wgstore.orchestration.runtimes import ray_resources

    for group_id in ray_resources.list_group_resources():
        ray_resources.release_group(group_id)


def _json_lines(text: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in text.splitlines() if line.strip()]


@pytest.mark.ray
@pytest.mark.slow
def test_a_recorded_run_can_be_inspected_with_every_audit_command(
    cli: Any, store_url: str, ray_in_repo: None, tmp_path: Path
) -> None:
    config = json.dumps({"steps": 4, "step_sleep_s": 0.05})
    run = cli(
        "run",
        "examples.train:train_fn",
        "--workers",
        "2",
        *FAST,
        "--config",
        config,
        "--url",
        store_url,
    )
    assert run.exit_code == 0, run.stdout + run.stderr
    group_id = re.search(r"worker group (\w+) ended: finished", run.stdout).group(1)  # type: ignore[union-attr]
    assert f"wgstore state {group_id[:8]}" in run.stdout
    assert_nothing_left(group_id)

    groups = _json_lines(cli("groups", "--url", store_url, "--json").stdout)
    assert [(g["group_id"], g["status"], g["outcome"], g["reports"]) for g in groups] == [
        (group_id, "SHUT_DOWN", "finished", 8)
    ]
    state = json.loads(cli("state", group_id[:6], "--url", store_url, "--json").stdout)
    assert state["num_workers"] == 2
    assert {rank: m["step"] for rank, m in state["latest_metrics"].items()} == {"0": 4, "1": 4}
    polls = _json_lines(cli("polls", group_id, "--url", store_url, "--json", "--all").stdout)
    assert polls[-1]["running"] == 0
    assert polls[-1]["errors"] == {}
    types = [
        e["type"]
        for e in _json_lines(cli("events", "-g", group_id, "--url", store_url, "--json").stdout)
    ]
    assert types[:6] == [
        "WorkerGroupStartRequested",
        "PlacementGroupReserved",
        "SyncActorStarted",
        "WorkersStarted",
        "WorkerGroupStarted",
        "TrainingLaunched",
    ]
    assert types[-2:] == ["WorkerGroupShutdownRequested", "WorkerGroupShutDown"]
    verified = cli("verify", "--url", store_url)
    assert verified.exit_code == 0
    assert "behind the log" not in verified.stdout  # `run` left the read models current
    make_reader(store_url)  # `wgstore db reader`: the role wgstore sql reads as
    rows = _json_lines(
        cli(
            "sql", "SELECT group_id, status FROM wg_worker_groups", "--url", store_url, "--json"
        ).stdout
    )
    assert rows == [{"group_id": group_id, "status": "SHUT_DOWN"}]

    page = tmp_path / "timeline.html"
    assert cli("report", group_id, "--url", store_url, "-o", str(page)).exit_code == 0
    backend = "postgres" if store_url.startswith("postgresql") else "sqlite"
    dom, console = open_in_chromium(page, ARTIFACTS / f"report-ray-run-{backend}.png")
    assert console == ""
    assert 'data-rendered="true"' in dom
    assert len(re.findall(r'<g class="lane"', dom)) == 2
    assert len(re.findall(r'<svg class="metric-chart"', dom)) == 4  # b, loss, step, w


@pytest.mark.ray
@pytest.mark.slow
def test_a_run_whose_rank_fails_exits_1_and_the_report_marks_the_error(
    cli: Any, sqlite_url: str, ray_in_repo: None, tmp_path: Path
) -> None:
    config = json.dumps({"steps": 6, "step_sleep_s": 0.05, "fail_rank": 1, "fail_at_step": 2})
    run = cli(
        "run", "examples.train:train_fn", "-n", "2", *FAST, "--config", config, "--url", sqlite_url
    )
    assert run.exit_code == 1
    assert "training errored on rank 1: RuntimeError: rank 1 failed at step 2" in run.stderr
    assert "--errors" in run.stderr
    group_id = re.search(r"worker group (\w+) ended: errored", run.stdout).group(1)  # type: ignore[union-attr]
    state = json.loads(cli("state", group_id, "--url", sqlite_url, "--json").stdout)
    assert state["worker_errors"]["1"].startswith("RuntimeError: rank 1 failed at step 2")
    page = tmp_path / "errored.html"
    cli("report", group_id, "--url", sqlite_url, "-o", str(page))
    dom, console = open_in_chromium(page, ARTIFACTS / "report-ray-run-errored.png")
    assert console == ""
    assert len(re.findall(r'class="error-marker"', dom)) == 1


@pytest.mark.ray
@pytest.mark.slow
def test_a_rank_that_dies_mid_run_keeps_every_report_and_ray_noise_stays_off_the_terminal(
    sqlite_url: str, ray_in_repo: None
) -> None:
    import ray

    from wgstore.events import EventStore

    config = json.dumps({"steps": 8, "step_sleep_s": 0.05, "exit_rank": 1, "fail_at_step": 5})
    env = {
        **os.environ,
        "RAY_ADDRESS": ray.get_runtime_context().gcs_address,  # the session's Ray
        "COLUMNS": "200",
    }
    args = ["run", "examples.train:train_fn", "-n", "2", *FAST, "--config", config]
    run = subprocess.run(
        [sys.executable, "-m", "wgstore.cli", *args, "--url", sqlite_url],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=REPO,
        env=env,
    )
    assert run.returncode == 1, run.stderr
    terminal = run.stdout + run.stderr
    for noise in ("(raylet)", "Unhandled error", "RAY_IGNORE_UNHANDLED_ERRORS", "Traceback"):
        assert noise not in terminal, terminal
    errors = [line for line in run.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "on rank 1" in errors[0] and "--errors" in errors[0]
    assert "class_name" not in run.stderr  # the multi-line actor error is not printed
    group_id = re.search(r"worker group (\w+) ended: errored", run.stdout).group(1)  # type: ignore[union-attr]
    with EventStore.open(sqlite_url) as store:
        reports = [
            r.event
            for r in store.read_stream(f"worker-group-{group_id}")
            if r.type == "WorkerReported" and r.event.world_rank == 1
        ]
    assert [r.metrics["step"] for r in reports] == [1, 2, 3, 4]  # every step it reported


@pytest.mark.ray
@pytest.mark.slow
def test_on_a_cluster_a_module_missing_here_is_left_to_the_workers_whose_start_fails(
    cli: Any, sqlite_url: str, ray_in_repo: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    import ray

    # RAY_ADDRESS: the workers may have modules this machine has not, so only they can tell
    monkeypatch.setenv("RAY_ADDRESS", ray.get_runtime_context().gcs_address)
    run = cli("run", "examples.missing_module:train_fn", "-n", "1", *FAST, "--url", sqlite_url)
    assert run.exit_code == 1
    assert "wgstore state" in run.stderr
    assert "Traceback" not in run.stderr
    groups = _json_lines(cli("groups", "--url", sqlite_url, "--json").stdout)
    assert [g["status"] for g in groups] == ["START_FAILED"]


def test_run_refuses_a_config_that_is_not_a_json_object(cli: Any, sqlite_url: str) -> None:
    bad = cli("run", "examples.train:train_fn", "--config", "{steps: 3}", "--url", sqlite_url)
    assert bad.exit_code == 2
    assert "--config is not valid JSON" in bad.stderr
    listed = cli("run", "examples.train:train_fn", "--config", "[1, 2]", "--url", sqlite_url)
    assert listed.exit_code == 2


def test_run_refuses_a_bad_url_before_starting_anything(cli: Any) -> None:
    result = cli("run", "examples.train:train_fn", "--url", "oracle://x")
    assert result.exit_code == 2


MALFORMED_RUNS = {
    "url not a database": (["examples.train:train_fn", "--url", "oracle://x"], 2, "oracle"),
    "train_fn a file path": (["examples/train.py", "--url", "{sqlite}"], 2, "not a file path"),
    "train_fn without a function": (["examples.train", "--url", "{sqlite}"], 2, "import path"),
    "config not JSON": (
        ["examples.train:train_fn", "--config", "{steps: 3}", "--url", "{sqlite}"],
        2,
        "--config is not valid JSON",
    ),
    "config a list": (
        ["examples.train:train_fn", "--config", "[1]", "--url", "{sqlite}"],
        2,
        "JSON object",
    ),
    "postgres unreachable": (
        ["examples.train:train_fn", "--url", "postgresql+psycopg://postgres@127.0.0.1:1/none"],
        1,
        "127.0.0.1",
    ),
}


@pytest.mark.parametrize("case", list(MALFORMED_RUNS))
def test_run_refuses_malformed_input_in_one_line_before_ray_is_imported(
    case: str, tmp_path: Path
) -> None:
    args, exit_code, needle = MALFORMED_RUNS[case]
    args = [a.replace("{sqlite}", f"sqlite:///{tmp_path}/w.db") for a in args]
    # what it imported, not how long it took: CPU seconds grow with the neighbours' load (0.75 s
    # quiet became 2.1 s in a loaded CI run), and importing Ray is the cost this test guards
    returncode, said, imported = _run_listing_imports(["run", *args], cwd=REPO)
    assert returncode == exit_code, said
    assert len(said) == 1, said
    assert needle in said[0]
    assert "Traceback" not in said[0] and "ray" not in said[0].lower().replace("array", "")
    assert "wgstore.cli.run" in imported  # the listing works
    assert [m for m in imported if m == "ray" or m.startswith("ray.")] == []


UNLOADABLE = {
    "no such module": ("nosuchmod:train", "cannot import module 'nosuchmod' of train_fn"),
    "no such function": ("examples.train:no_such_fn", "has no attribute 'no_such_fn'"),
    "a syntax error": ("broken_train:train_fn", "SyntaxError: '(' was never closed"),
}


@pytest.mark.parametrize("case", list(UNLOADABLE))
def test_a_train_function_that_cannot_load_fails_in_one_line_before_ray_is_imported(
    case: str, tmp_path: Path
) -> None:
    path, needle = UNLOADABLE[case]
    (tmp_path / "broken_train.py").write_text("def train_fn(config):\n    return (\n")
    db = tmp_path / "w.db"
    # cwd: workers would put this folder on sys.path, so broken_train is found here
    returncode, said, imported = _run_listing_imports(
        ["run", path, "--url", f"sqlite:///{db}"], cwd=tmp_path
    )
    assert returncode == 2, said
    assert len(said) == 1 and said[0].startswith("error: "), said
    assert needle in said[0]
    assert "wgstore.cli.run" in imported  # the listing works
    assert [m for m in imported if m == "ray" or m.startswith("ray.")] == []
    assert not db.exists()  # not even the store was made, let alone a group recorded


def _run_listing_imports(args: list[str], cwd: Path) -> tuple[int, list[str], list[str]]:
    """Run the CLI with ``-X importtime``: its exit code, what it said, every module it imported."""
    result = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "wgstore.cli", *args],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=cwd,
        env={**os.environ, "RAY_ADDRESS": "", "COLUMNS": "300", "PYTHONPATH": str(REPO)},
    )
    lines = result.stderr.splitlines()
    imported = [ln.rsplit("|", 1)[1].strip() for ln in lines if ln.startswith("import time:")]
    said = [ln for ln in lines if ln.strip() and not ln.startswith("import time:")]
    return result.returncode, said, imported


@pytest.mark.ray
@pytest.mark.slow
def test_a_standalone_executor_serves_a_group_and_stops_on_sigterm(
    store: Any, store_url: str, ray_in_repo: None, tmp_path: Path
) -> None:
    import ray

    from wgstore.orchestration import WorkerGroup

    log = (tmp_path / "executor.log").open("w")
    env = {**os.environ, "RAY_ADDRESS": ray.get_runtime_context().gcs_address}
    process = subprocess.Popen(
        [sys.executable, "-X", "faulthandler", "-m", "wgstore.cli", "executor", "--url", store_url],
        cwd=REPO,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        group = WorkerGroup.create(
            store, make_context(2, config={"steps": 3}), executor="external", timeout_s=120
        )
        final = group.wait(timeout_s=120)
        assert final.finished and not final.errors
        group.shutdown(reason="done")
        assert_nothing_left(group.group_id)
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            code = process.wait(timeout=60)
        finally:
            if process.poll() is None:
                process.kill()
            log.close()
    output = (tmp_path / "executor.log").read_text()
    assert code == 0, output
    assert "executor stopped" in output


def test_executor_refuses_a_bad_url_before_joining_ray(cli: Any) -> None:
    result = cli("executor", "--url", "sqlite://")
    assert result.exit_code == 2
    assert "in-memory SQLite" in result.stderr


@pytest.mark.ray
def test_executor_stops_by_itself_after_stop_after(
    cli: Any, sqlite_url: str, ray_in_repo: None
) -> None:
    started = time.monotonic()
    result = cli("executor", "--url", sqlite_url, "--stop-after", "2s", "--no-release-orphans")
    assert result.exit_code == 0, result.stderr
    assert "executor stopped" in result.stderr
    assert 2 <= time.monotonic() - started < 60


@pytest.mark.ray
@pytest.mark.slow
def test_ctrl_c_during_a_run_shuts_the_group_down_and_records_why(
    cli: Any, sqlite_url: str, ray_in_repo: None
) -> None:
    from wgstore.events import EventStore

    def press_ctrl_c_once_training_runs() -> None:
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            try:
                with EventStore.open(sqlite_url, read_only=True) as store:
                    types = [e.type for e in store.read_all()]
            except Exception:  # noqa: BLE001 - the file may not be migrated yet
                types = []
            if "TrainingLaunched" in types and "WorkerReported" in types:
                os.kill(os.getpid(), signal.SIGINT)
                return
            time.sleep(0.2)

    presser = threading.Thread(target=press_ctrl_c_once_training_runs, daemon=True)
    presser.start()
    # 300 s of training at most, so the interrupt lands while it trains however late a loaded
    # machine delivers it (20 s of it, before, ended first under stress --cpu 2: exit 0, not 130)
    config = json.dumps({"steps": 6000, "step_sleep_s": 0.05})
    run = cli(
        "run", "examples.train:train_fn", "-n", "2", *FAST, "--config", config, "--url", sqlite_url
    )
    presser.join(timeout=5)
    assert run.exit_code == 130, run.stdout + run.stderr
    assert "was interrupted and shut down: aborted" in run.stdout
    group_id = re.search(r"worker group (\w+) was interrupted", run.stdout).group(1)  # type: ignore[union-attr]
    assert_nothing_left(group_id)
    state = json.loads(cli("state", group_id, "--url", sqlite_url, "--json").stdout)
    assert (state["status"], state["outcome"], state["shutdown_reason"]) == (
        "SHUT_DOWN",
        "aborted",
        "interrupted",
    )


_ANSI = re.compile(r"\x1b\[[0-9;]*m")


class _Reader:
    """Collects a child's stdout and stderr lines as they come (threads), for waiting on them."""

    def __init__(self, process: subprocess.Popen[str]) -> None:
        self.out: list[str] = []
        self.err: list[str] = []
        assert process.stdout is not None and process.stderr is not None
        self._threads = [
            threading.Thread(target=self._read, args=(process.stdout, self.out), daemon=True),
            threading.Thread(target=self._read, args=(process.stderr, self.err), daemon=True),
        ]
        for thread in self._threads:
            thread.start()

    @staticmethod
    def _read(stream: Any, lines: list[str]) -> None:
        for line in stream:
            lines.append(_ANSI.sub("", line.rstrip("\n")))

    def wait_for(self, seen: Any, process: subprocess.Popen[str], within_s: float) -> None:
        deadline = time.monotonic() + within_s
        while not seen(self.out):
            assert process.poll() is None, "\n".join(self.out + self.err)
            assert time.monotonic() < deadline, "\n".join(self.out + self.err)
            time.sleep(0.1)

    def join(self) -> None:
        for thread in self._threads:
            thread.join(timeout=60)


def _run_cli(args: list[str], *, cwd: Path) -> subprocess.Popen[str]:
    """``wgstore ARGS`` (the console script, as a user types it) on the session's Ray."""
    import ray

    env = {
        **os.environ,
        "RAY_ADDRESS": ray.get_runtime_context().gcs_address,
        "COLUMNS": "300",
    }
    return subprocess.Popen(
        [str(Path(sys.executable).parent / "wgstore"), *args],
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


@pytest.mark.ray
@pytest.mark.slow
@pytest.mark.parametrize("quiet", [False, True], ids=["workers-shown", "quiet-workers"])
def test_run_shows_progress_while_training_and_what_each_rank_prints(
    quiet: bool, sqlite_url: str, ray_in_repo: None, tmp_path: Path
) -> None:
    release = tmp_path / "release"
    config = json.dumps({"release": str(release)})
    args = ["run", "tests.cli.run_fns:chatty_fn", "-n", "2", *FAST, "--config", config]
    args += ["--url", sqlite_url] + (["--quiet-workers"] if quiet else [])
    process = _run_cli(args, cwd=REPO)
    reader = _Reader(process)
    try:
        # Both ranks reported step 1 and wait for the release: a progress line shows it now,
        # while training runs (stdout is a pipe: lines, not the terminal's live table).
        def progress_shown(out: list[str]) -> bool:
            return any(
                line.startswith("attempt 1: RUNNING")
                and all(
                    re.search(rf"rank {r} \w+, 1 report\(s\) loss=0.5 step=1", line) for r in (0, 1)
                )
                for line in out
            )

        def hellos_shown(out: list[str]) -> bool:
            return all(
                any(
                    re.match(rf"\(rank {r} pid=\d+\) train function {w} says hello", line)
                    for line in out
                )
                for r, w in ((0, "alpha"), (1, "beta"))
            )

        reader.wait_for(progress_shown, process, within_s=180)
        if not quiet:
            reader.wait_for(hellos_shown, process, within_s=180)
        release.touch()
        code = process.wait(timeout=180)
    finally:
        if process.poll() is None:
            process.kill()
        reader.join()
    shown = "\n".join(reader.out + reader.err)
    assert code == 0, shown
    assert re.search(r"worker group \w+ ended: finished", shown)
    assert ("says hello" in shown) is not quiet, shown
    for noise in ("(raylet)", "Traceback", "Unhandled error"):
        assert noise not in shown, shown


@pytest.mark.ray
@pytest.mark.slow
def test_run_from_the_folder_that_holds_the_clone_imports_wgstore_on_the_workers(
    sqlite_url: str, ray_in_repo: None, tmp_path: Path
) -> None:
    """Ray puts the driver's working folder on the workers' ``sys.path``; in the folder that
    holds the clone, ``wgstore/`` (the clone) is there. The installed package must win."""
    (tmp_path / "wgstore").mkdir()  # as the clone's folder is, seen from its parent
    (tmp_path / "my_train.py").write_text(
        "import wgstore\n"
        "from wgstore.orchestration import report\n\n"
        "def train_fn(config):\n"
        "    report({'version': wgstore.__version__})\n"
    )
    args = ["run", "my_train:train_fn", "-n", "1", *FAST, "--url", sqlite_url]
    process = _run_cli(args, cwd=tmp_path)  # workers import my_train from this folder
    reader = _Reader(process)
    try:
        code = process.wait(timeout=300)
    finally:
        if process.poll() is None:
            process.kill()
        reader.join()
    shown = "\n".join(reader.out + reader.err)
    assert code == 0, shown
    assert re.search(r"worker group \w+ ended: finished", shown), shown
    from wgstore import __version__
    from wgstore.events import EventStore

    with EventStore.open(sqlite_url) as store:
        reports = [r.event for r in store.read_all() if r.type == "WorkerReported"]
    assert [dict(r.metrics) for r in reports] == [{"version": __version__}]
