"""``wgstore report``: a self-contained HTML timeline, opened in headless Chromium.

Chromium is Debian's ``chromium`` package (the test setup installs it). Without it the browser
test is skipped on a developer machine, and fails when ``CI=true``.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts"
CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--host-resolver-rules=MAP * ~NOTFOUND",
    "--enable-logging=stderr",
    "--v=0",
]


def chromium() -> str:
    """The Chromium binary, or skip (developer machine) / fail (CI) when it is missing."""
    found = next(
        (
            p
            for p in ("/usr/bin/chromium", shutil.which("chromium") or "")
            if p and os.access(p, os.X_OK)
        ),
        None,
    )
    if found is None:
        reason = "Debian's chromium is not installed (apt-get install chromium); the report cannot be opened"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"{reason}. CI must run this test.", pytrace=False)
        pytest.skip(reason)
    return found


def _report(cli: Any, recorded: Any, path: Path, group: str | None = None) -> str:
    result = cli(
        "report", group or recorded.errored_group[:6], "--url", recorded.url, "-o", str(path)
    )
    assert result.exit_code == 0, result.stderr
    return path.read_text(encoding="utf-8")


def _embedded_data(page: str) -> dict[str, Any]:
    match = re.search(
        r'<script type="application/json" id="wgstore-data">(.*?)</script>', page, re.S
    )
    assert match is not None
    return json.loads(match.group(1).replace("<\\/", "</"))


def test_the_report_is_one_file_that_needs_no_network(
    cli: Any, recorded: Any, tmp_path: Path
) -> None:
    page = _report(cli, recorded, tmp_path / "timeline.html")
    assert (
        "<svg" not in page.split("<script", 1)[0] or True
    )  # the SVG is drawn by the inline script
    external = re.findall(r'(?:src|href)\s*=\s*["\'](?!#)([^"\']+)', page)
    assert external == []
    assert "@import" not in page
    urls = set(re.findall(r"https?://[^\s\"'<>)]+", page))
    assert urls <= {"http://www.w3.org/2000/svg"}


def test_the_report_data_holds_phases_lanes_errors_and_metrics(
    cli: Any, recorded: Any, tmp_path: Path
) -> None:
    data = _embedded_data(_report(cli, recorded, tmp_path / "timeline.html"))
    assert [p["name"] for p in data["phases"]] == [
        "REQUESTED",
        "STARTING",
        "RUNNING",
        "SHUTTING_DOWN",
        "SHUT_DOWN",
    ]
    assert [w["rank"] for w in data["workers"]] == [0, 1, 2, 3]
    lane_1 = data["workers"][1]
    assert [s["status"] for s in lane_1["segments"]] == ["starting", "running", "error"]
    assert lane_1["errors"][0]["message"] == "loss is NaN on rank 1"
    assert "Traceback" in lane_1["errors"][0]["traceback"]
    assert [s["status"] for s in data["workers"][0]["segments"]][-1] == "finished"
    assert sorted(data["metrics"]) == ["loss", "step"]
    rank0 = data["metrics"]["loss"][0]  # the charts: a line per rank, at the reported steps
    assert (rank0["rank"], rank0["x"]) == (0, "step")
    assert [(x, v, index) for x, v, _t, index in rank0["points"]] == [
        (0, 1.0, 0),
        (1, 0.5, 1),
        (2, 0.3333, 2),
    ]
    assert [line["rank"] for line in data["metrics"]["loss"]] == [0, 1, 2, 3]
    assert len(data["events"]) == 23
    assert data["group"]["outcome"] == "errored"


def test_a_failed_start_is_marked_with_its_stage(cli: Any, recorded: Any, tmp_path: Path) -> None:
    page = _report(cli, recorded, tmp_path / "failed.html", group=recorded.failed_group)
    data = _embedded_data(page)
    assert data["start_failure"]["stage"] == "workers"
    assert data["workers"] == []
    assert "start failed at stage workers" in page


def test_report_of_an_unknown_group_exits_2_and_writes_nothing(
    cli: Any, recorded_sqlite: Any, tmp_path: Path
) -> None:
    target = tmp_path / "nope.html"
    result = cli("report", "zzz", "--url", recorded_sqlite.url, "-o", str(target))
    assert result.exit_code == 2
    assert not target.exists()


def test_report_into_a_missing_folder_exits_2(
    cli: Any, recorded_sqlite: Any, tmp_path: Path
) -> None:
    result = cli(
        "report", "a1", "--url", recorded_sqlite.url, "-o", str(tmp_path / "no" / "t.html")
    )
    assert result.exit_code == 2
    assert "does not exist" in result.stderr


def open_in_chromium(page: Path, screenshot: Path) -> tuple[str, str]:
    """Load ``page`` in headless Chromium: the DOM after its scripts ran, and the console output.

    One launch does both: headless Chromium runs ``--dump-dom`` and ``--screenshot`` on the same
    load, once the virtual time budget (the page's scripts) has run out.
    """
    binary = chromium()
    url = page.resolve().as_uri()
    screenshot.parent.mkdir(parents=True, exist_ok=True)
    screenshot.unlink(missing_ok=True)  # the one this launch takes, not an earlier run's
    done = subprocess.run(
        [
            binary,
            *CHROMIUM_FLAGS,
            "--virtual-time-budget=5000",
            "--window-size=1400,1200",
            "--hide-scrollbars",
            f"--screenshot={screenshot}",
            "--dump-dom",
            url,
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert screenshot.is_file(), done.stderr[-2000:]
    console = "\n".join(line for line in done.stderr.splitlines() if ":CONSOLE" in line)
    return done.stdout, console


def _check_rendered(dom: str, console: str, lanes: int, charts: int) -> None:
    assert console == "", f"the page wrote to the console:\n{console}"
    assert not re.search(r"<html[^>]*data-js-error", dom), "a script raised on the page"
    assert 'data-rendered="true"' in dom
    assert '<svg id="timeline"' in dom
    assert len(re.findall(r'<g class="lane"', dom)) == lanes
    assert len(re.findall(r'<svg class="metric-chart"', dom)) == charts
    assert len(re.findall(r'class="phase phase-', dom)) >= 3


def test_the_report_renders_in_headless_chromium_with_no_console_errors(
    cli: Any, recorded: Any, tmp_path: Path
) -> None:
    chromium()
    page = tmp_path / "timeline.html"
    _report(cli, recorded, page)
    backend = "postgres" if recorded.url.startswith("postgresql") else "sqlite"
    screenshot = ARTIFACTS / f"report-{backend}.png"
    dom, console = open_in_chromium(page, screenshot)
    _check_rendered(dom, console, lanes=4, charts=2)
    assert len(re.findall(r'class="error-marker"', dom)) == 1
    assert len(re.findall(r'class="series"', dom)) == 8  # 2 metrics x 4 ranks
    # drawn against the step each rank reported (its step metric), the axis says so
    assert len(re.findall(r'<svg class="metric-chart" data-metric="\w+" data-x="step"', dom)) == 2
    assert ">step 1</text>" in dom
    assert screenshot.stat().st_size > 10_000
    shutil.copy(page, ARTIFACTS / f"report-{backend}.html")


def test_a_long_group_is_thinned_so_the_page_stays_small(
    cli: Any, sqlite_url: str, history: Any, tmp_path: Path
) -> None:
    from wgstore.events import EventStore
    from wgstore.events.worker_group import WorkerReported
    from wgstore.projections.timeline import MAX_EVENTS, MAX_POINTS

    group = "10ng"
    with EventStore.open(sqlite_url) as store:
        history.record_started_group(store, group)
        store.append(
            f"worker-group-{group}",
            [
                WorkerReported(world_rank=0, index=i, metrics={"loss": 1.0 / (i + 1)})
                for i in range(5000)
            ],
        )
    page = tmp_path / "long.html"
    result = cli("report", group, "--url", sqlite_url, "-o", str(page))
    assert result.exit_code == 0, result.stderr
    data = _embedded_data(page.read_text())
    assert data["events_total"] == 5006
    assert len(data["events"]) == MAX_EVENTS
    assert data["events"][-1]["version"] == 5006
    (line,) = data["metrics"]["loss"]
    loss = line["points"]
    assert len(loss) == MAX_POINTS
    assert loss[0][0] == 0 and loss[-1][0] == 4999
    assert [p[0] for p in loss] == sorted(p[0] for p in loss)
    assert f"5006 events (the first and last {MAX_EVENTS // 2} shown)" in page.read_text()


# ------------------------------------------------------------------------------------ runs


@pytest.fixture
def run_recorded(store_url: str) -> str:
    """A run whose budget ran out (RETRY, then RAISE) and one that finished after a retry."""
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "projections"))
    import run_scenarios

    from wgstore.events import EventStore

    with EventStore.open(store_url) as store:
        run_scenarios.errored_budget_exhausted(store)
        run_scenarios.finished_after_a_retry(store)
    return store_url


def _run_report(cli: Any, url: str, run: str, path: Path) -> str:
    result = cli("report", "--run", run, "--url", url, "-o", str(path))
    assert result.exit_code == 0, result.stderr
    assert f"wrote {path} (run " in result.stderr
    return path.read_text(encoding="utf-8")


def test_the_run_report_holds_every_attempt_failure_and_decision(
    cli: Any, run_recorded: str, tmp_path: Path
) -> None:
    page = _run_report(cli, run_recorded, "er", tmp_path / "run.html")  # a prefix of "err"
    data = _embedded_data(page)
    assert data["run"]["run_id"] == "err"
    assert [(a["number"], a["group_id"], a["outcome"]) for a in data["attempts"]] == [
        (1, "err-g1", "errored"),
        (2, "err-g2", "errored"),
    ]
    assert [[(f["rank"], f["message"]) for f in a["failures"]] for a in data["attempts"]] == [
        [(1, "rank 1 died in err-g1")],
        [(1, "rank 1 died in err-g2")],
    ]
    assert [(d["attempt"], d["decision"], d["failures_so_far"]) for d in data["decisions"]] == [
        (1, "RETRY", 1),
        (2, "RAISE", 2),
    ]
    assert [s["name"] for s in data["controller"]][-1] == "ERRORED"
    assert all(data["t0"] <= f["t"] <= data["t1"] for a in data["attempts"] for f in a["failures"])
    assert page.count("class=attempt-row") == 2
    assert "worker_group failure 2 of 1" in page
    assert "run errored:" in page
    external = re.findall(r'(?:src|href)\s*=\s*["\'](?!#)([^"\']+)', page)
    assert external == []


def test_the_run_report_shows_committed_and_only_reported_checkpoints(
    cli: Any, store_url: str, tmp_path: Path
) -> None:
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "projections"))
    import run_scenarios

    from wgstore.events import EventStore

    with EventStore.open(store_url) as store:
        run_scenarios.retried_from_the_committed_step(store)
    page = _run_report(cli, store_url, "part", tmp_path / "run.html")
    data = _embedded_data(page)
    assert data["run"]["latest_checkpoint"] == "/ckpt/step1"
    assert data["run"]["latest_reported_checkpoint"] == "/ckpt/step2"
    assert '<code>/ckpt/step1</code> <span class="muted">committed ' in page
    assert "reported, not by every rank (not committed): <code>/ckpt/step2</code>" in page
    first = re.search(r"<tr class=attempt-row><td>1</td>.*?</tr>", page, re.S)
    assert first is not None and "<code>/ckpt/step1</code>" in first.group(0)  # not "-"
    assert data["attempts"][0]["latest_reported_checkpoint"] == "/ckpt/step2"
    group_page = tmp_path / "group.html"
    result = cli("report", "part-g1", "--url", store_url, "-o", str(group_page))
    assert result.exit_code == 0, result.stderr
    group = _embedded_data(group_page.read_text(encoding="utf-8"))["group"]
    assert (group["latest_checkpoint"], group["checkpoint_index"]) == ("/ckpt/step1", 1)
    assert group["latest_reported_checkpoint"] == "/ckpt/step2"
    assert "not committed" in group_page.read_text(encoding="utf-8")


def test_the_run_report_renders_in_headless_chromium_with_no_console_errors(
    cli: Any, run_recorded: str, tmp_path: Path
) -> None:
    chromium()
    page = tmp_path / "run.html"
    _run_report(cli, run_recorded, "fin", page)
    backend = "postgres" if run_recorded.startswith("postgresql") else "sqlite"
    screenshot = ARTIFACTS / f"run-report-{backend}.png"
    dom, console = open_in_chromium(page, screenshot)
    assert console == "", f"the page wrote to the console:\n{console}"
    assert not re.search(r"<html[^>]*data-js-error", dom), "a script raised on the page"
    assert 'data-rendered="true"' in dom
    assert len(re.findall(r'<g class="attempt"', dom)) == 2
    assert len(re.findall(r'class="error-marker"', dom)) == 1  # attempt 1's rank 1
    assert len(re.findall(r'class="decision-marker decision-RETRY"', dom)) == 1
    assert len(re.findall(r'class="state state-', dom)) >= 5
    assert screenshot.stat().st_size > 10_000
    shutil.copy(page, ARTIFACTS / f"run-report-{backend}.html")


def test_report_needs_a_group_or_a_run_and_refuses_an_unknown_run(
    cli: Any, recorded_sqlite: Any, tmp_path: Path
) -> None:
    neither = cli("report", "--url", recorded_sqlite.url, "-o", str(tmp_path / "x.html"))
    assert neither.exit_code == 2 and "--run" in neither.stderr
    both = cli("report", "a1", "--run", "r", "--url", recorded_sqlite.url)
    assert both.exit_code == 2 and "not both" in both.stderr
    target = tmp_path / "nope.html"
    unknown = cli("report", "--run", "zzz", "--url", recorded_sqlite.url, "-o", str(target))
    assert unknown.exit_code == 2
    assert "no run id starts with 'zzz'" in unknown.stderr
    assert not target.exists()


def test_a_run_whose_log_cannot_be_read_is_a_data_problem_exit_1(
    cli: Any, recorded: Any, tmp_path: Path
) -> None:
    """Issue 41, item 15: it exited 2, which the README keeps for a wrong command line."""
    from wgstore.events import EventStore
    from wgstore.events.run import RunErrored
    from wgstore.events.worker_group import ErrorInfo

    with EventStore.open(recorded.url) as store:  # no RunCreated first: the fold refuses it
        store.append("run-b0rken", [RunErrored(error=ErrorInfo(type="X", message="lost"))])
    target = tmp_path / "b0rken.html"
    result = cli("report", "--run", "b0rken", "--url", recorded.url, "-o", str(target))
    assert result.exit_code == 1, (result.stdout, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "run b0rken" in lines[0], result.stderr
    assert "Traceback" not in result.stderr
    assert not target.exists()
