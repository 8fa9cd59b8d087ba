"""``wgstore runs`` (the listing, filters, ``--json``) and ``wgstore runs RUN`` on both backends.

The runs are appended by hand (tests/projections/run_scenarios.py), as the controller and the Ray
Train recorder write them: no Ray.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "projections"))

import run_scenarios as scenarios

from tests.cli.conftest import make_reader
from wgstore.events import EventStore
from wgstore.projections import catch_up_read_models


def _json_lines(text: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def _fill(url: str, *, caught_up: bool) -> None:
    with EventStore.open(url) as store:
        for scenario in scenarios.ALL:
            scenario(store)
        scenarios.running(store, "orph", lease_expired=True)
        if caught_up:
            catch_up_read_models(store)


@pytest.fixture
def runs_url(store_url: str) -> str:
    """Every run scenario, with the read models caught up (the listing reads ``wg_runs``)."""
    _fill(store_url, caught_up=True)
    return store_url


def test_runs_lists_each_run_with_state_attempts_failures_checkpoint_and_orphaned(
    cli: Any, runs_url: str
) -> None:
    result = cli("runs", "--url", runs_url, "--json")
    assert result.exit_code == 0, result.stderr
    runs = {r["run_id"]: r for r in _json_lines(result.stdout)}
    assert list(runs) == ["fin", "err", "abt", "live", "ray", "orph"]
    assert {k: (r["status"], r["attempts"]) for k, r in runs.items()} == {
        "fin": ("FINISHED", 2),
        "err": ("ERRORED", 2),
        "abt": ("ABORTED", 1),
        "live": ("RUNNING", 1),
        "ray": ("FINISHED", 1),
        "orph": ("RUNNING", 1),
    }
    assert (runs["err"]["worker_group_failures"], runs["err"]["max_failures"]) == (2, 1)
    assert runs["err"]["error"] == "RuntimeError: rank 1 died in err-g2"
    assert runs["fin"]["latest_checkpoint"] == "/ckpt/fin/2"
    assert [k for k, r in runs.items() if r["orphaned"]] == ["orph"]
    assert runs["live"]["lease_holder"] == "c1"
    assert runs["ray"]["source"] == "ray_train"


def test_runs_table_shows_failures_against_the_budget_and_orphaned(cli: Any, runs_url: str) -> None:
    result = cli("runs", "--url", runs_url, env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.stderr
    lines = {line.split()[1]: line for line in result.stdout.splitlines() if "│" in line}
    assert "ERRORED" in lines["err"] and "2/1" in lines["err"]
    assert "1/2" in lines["fin"] and "/ckpt/fin/2" in lines["fin"]
    assert "ORPHANED" in lines["orph"]
    assert "ORPHANED" not in lines["live"]


def test_the_listing_is_the_same_from_the_log_before_a_catch_up(
    cli: Any, sqlite_url: str, tmp_path: Path
) -> None:
    _fill(sqlite_url, caught_up=False)
    from_log = _json_lines(cli("runs", "--url", sqlite_url, "--json").stdout)
    with EventStore.open(sqlite_url) as store:
        catch_up_read_models(store)
    from_read_model = _json_lines(cli("runs", "--url", sqlite_url, "--json").stdout)
    strip = [{k: v for k, v in r.items() if k != "lease_expires_at"} for r in from_log]
    assert [{k: v for k, v in r.items() if k != "lease_expires_at"} for r in from_read_model] == (
        strip
    )
    assert len(from_log) == 6


def test_runs_filters_by_status_source_orphaned_and_time(cli: Any, runs_url: str) -> None:
    def ids(*args: str) -> list[str]:
        result = cli("runs", "--url", runs_url, "--json", *args)
        assert result.exit_code == 0, result.stderr
        return [r["run_id"] for r in _json_lines(result.stdout)]

    assert ids("--status", "running") == ["live", "orph"]
    assert ids("--status", "ERRORED", "--status", "ABORTED") == ["err", "abt"]
    assert ids("--source", "ray_train") == ["ray"]
    assert ids("--orphaned") == ["orph"]
    assert ids("--since", "1h") == ["fin", "err", "abt", "live", "ray", "orph"]
    assert ids("--since", "2999-01-01") == []
    none = cli("runs", "--url", runs_url, "--status", "RESIZING")
    assert (none.exit_code, none.stdout.strip()) == (0, "no runs match")


def test_one_run_shows_every_attempt_with_its_failure_and_decision(cli: Any, runs_url: str) -> None:
    result = cli("runs", "er", "--url", runs_url, "--json")  # a prefix of "err"
    assert result.exit_code == 0, result.stderr
    detail = json.loads(result.stdout)
    assert detail["run"]["run_id"] == "err"
    attempts = detail["attempts"]
    assert [(a["group_id"], a["attempt"], a["status"], a["outcome"]) for a in attempts] == [
        ("err-g1", 1, "SHUT_DOWN", "errored"),
        ("err-g2", 2, "SHUT_DOWN", "errored"),
    ]
    assert attempts[0]["error"] == "RuntimeError: rank 1 died in err-g1"
    assert [
        (d["decision"], d["failure_kind"], d["failures_so_far"], d["limit"])
        for a in attempts
        for d in a["decisions"]
    ] == [("RETRY", "worker_group", 1, 1), ("RAISE", "worker_group", 2, 1)]
    assert [t["to_state"] for t in detail["transitions"]][-1] == "ERRORED"
    assert [c["controller_id"] for c in detail["controllers"]] == ["c1"]
    table = cli("runs", "err", "--url", runs_url, env={"COLUMNS": "200"})
    assert table.exit_code == 0, table.stderr
    assert "RETRY worker_group 1/1" in table.stdout
    assert "RAISE worker_group 2/1" in table.stdout
    assert "rank 1: RuntimeError: rank 1 died in err-g2" in table.stdout


def test_one_run_shows_its_committed_checkpoint_and_the_one_only_some_ranks_reported(
    cli: Any, store_url: str
) -> None:
    with EventStore.open(store_url) as store:
        run = scenarios.retried_from_the_committed_step(store)
        run.group("part-g2")  # attempt 2 reports no checkpoint of its own
        catch_up_read_models(store)
    listed = _json_lines(cli("runs", "--url", store_url, "--json").stdout)
    assert [(r["latest_checkpoint"], r["latest_reported_checkpoint"]) for r in listed] == [
        ("/ckpt/step1", "/ckpt/step2")
    ]
    assert listed[0]["checkpoint_committed_at"] is not None
    detail = json.loads(cli("runs", "part", "--url", store_url, "--json").stdout)
    assert [
        (a["latest_checkpoint"], a["latest_reported_checkpoint"]) for a in detail["attempts"]
    ] == [
        ("/ckpt/step1", "/ckpt/step2"),
        (None, None),
    ]
    table = cli("runs", "part", "--url", store_url, env={"COLUMNS": "200"})
    assert table.exit_code == 0, table.stderr
    assert "/ckpt/step1 (committed " in table.stdout
    assert "/ckpt/step2 (not by every rank: not committed" in table.stdout


def test_a_ray_train_run_that_cannot_be_resumed_says_why(cli: Any, store_url: str) -> None:
    with EventStore.open(store_url) as store:
        scenarios.from_ray_train_unpicklable(store)
        scenarios.finished_after_a_retry(store)
        catch_up_read_models(store)
    for from_log in ((), ("--from-log",)):
        listed = _json_lines(cli("runs", "--url", store_url, "--json", *from_log).stdout)
        assert {r["run_id"]: (r["resumable"], r["not_resumable_reason"]) for r in listed} == {
            "rayx": (False, "the train loop __main__:train cannot be pickled (TypeError)"),
            "fin": (True, None),
        }
    table = cli("runs", "--url", store_url, env={"COLUMNS": "200"})
    assert "not resumable: the train loop __main__:train cannot be pickled" in table.stdout
    detail = cli("runs", "rayx", "--url", store_url, env={"COLUMNS": "200"})
    assert "no: the train loop __main__:train cannot be pickled" in detail.stdout


def test_one_orphaned_run_says_how_to_continue_or_release_it(cli: Any, runs_url: str) -> None:
    result = cli("runs", "orph", "--url", runs_url, env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.stderr
    assert "orphaned" in result.stdout and "wgstore gc" in result.stdout


def test_an_unknown_or_ambiguous_run_id_exits_2_naming_the_problem(cli: Any, runs_url: str) -> None:
    unknown = cli("runs", "zzz", "--url", runs_url)
    assert unknown.exit_code == 2
    assert "no run id starts with 'zzz'" in unknown.stderr
    assert "Traceback" not in unknown.stderr
    with EventStore.open(runs_url) as store:
        scenarios.aborted(store, "abt2")
    ambiguous = cli("runs", "ab", "--url", runs_url)
    assert ambiguous.exit_code == 2
    assert "matches 2 runs (abt, abt2)" in ambiguous.stderr


def test_bad_listing_options_exit_2(cli: Any, sqlite_url: str) -> None:
    EventStore.open(sqlite_url).close()
    status = cli("runs", "--url", sqlite_url, "--status", "DONE")
    assert status.exit_code == 2 and "unknown status DONE" in status.stderr
    assert "ERRORED" in status.stderr
    source = cli("runs", "--url", sqlite_url, "--source", "slurm")
    assert source.exit_code == 2 and "wgstore, ray_train" in source.stderr
    mixed = cli("runs", "r1", "--url", sqlite_url, "--orphaned")
    assert mixed.exit_code == 2 and "filter the listing" in mixed.stderr
    empty = cli("runs", "--url", sqlite_url)
    assert (empty.exit_code, empty.stdout.strip()) == (0, "no runs in the log")


def test_the_sql_reader_reads_the_run_read_models(cli: Any, runs_url: str) -> None:
    make_reader(runs_url)  # `wgstore db reader`: the role wgstore sql reads as
    result = cli(
        "sql",
        "SELECT r.run_id, d.decision FROM wg_runs AS r "
        "JOIN wg_run_decisions AS d ON d.run_id = r.run_id ORDER BY r.run_id, d.stream_version",
        "--url",
        runs_url,
        "--json",
    )
    assert result.exit_code == 0, result.stderr
    rows = [(r["run_id"], r["decision"]) for r in _json_lines(result.stdout)]
    assert rows == [("err", "RETRY"), ("err", "RAISE"), ("fin", "RETRY")]


def test_one_run_shows_the_users_error_not_rays_multi_line_wrapper(
    cli: Any, sqlite_url: str
) -> None:
    """Ray Train's run error is its grouped worker errors (several lines, tracebacks): the
    error line is the failed rank's own error, as every view shows it (issue 41, item 10); the
    wrapper stays in --json."""
    from wgstore.events.run import RankError, RunCreated, RunErrored, stream_id_for_run
    from wgstore.events.worker_group import ErrorInfo

    message = "Training failed due to worker errors:\n[Rank 1 Error Snippet]:\nTraceback (most"
    with EventStore.open(sqlite_url) as store:
        store.append(
            stream_id_for_run("multi"),
            [
                RunCreated(run_id="multi"),
                RunErrored(
                    error=ErrorInfo(type="WorkerGroupError", message=message),
                    errors=(
                        RankError(
                            world_rank=1,
                            error=ErrorInfo(type="RuntimeError", message="rank 1 fails once"),
                        ),
                    ),
                ),
            ],
        )
    shown = cli("runs", "mul", "--url", sqlite_url, env={"COLUMNS": "200"})
    assert shown.exit_code == 0, shown.output
    (error,) = [line for line in shown.stdout.splitlines() if line.startswith("error")]
    assert error.split(None, 1)[1].rstrip() == "rank 1: RuntimeError: rank 1 fails once"
    assert "WorkerGroupError" not in shown.stdout
    assert "Rank 1 Error Snippet" not in shown.stdout
    (whole,) = _json_lines(cli("runs", "mul", "--url", sqlite_url, "--json").stdout)
    assert whole["run"]["error"] == f"WorkerGroupError: {message}"


def test_orphaned_runs_say_whether_they_can_be_resumed_and_why_not(
    cli: Any, store_url: str
) -> None:
    """``runs --orphaned``: each orphan's resumable column, and why not on the row below
    (docs/runs-and-resume.md says "ORPHANED, resumable or why not"; issue 41, item 16)."""
    from datetime import UTC, datetime, timedelta

    from wgstore.events.leases import acquire_lease
    from wgstore.events.run import ControllerStarted

    with EventStore.open(store_url) as store:
        scenarios.running(store, "orph", lease_expired=True)  # wgstore's: resumable
        run = scenarios.from_ray_train_unpicklable(store, "rayo")  # its train loop: no pickle
        run.add(ControllerStarted(controller_id="c9", host="h", pid=7, lease_s=30.0))
        assert acquire_lease(store, "rayo", "c9", 30.0, now=datetime.now(UTC) - timedelta(hours=1))
        scenarios.finished_after_a_retry(store)
    result = cli("runs", "--url", store_url, "--orphaned", env={"COLUMNS": "220"})
    assert result.exit_code == 0, result.stderr
    header = next(line for line in result.stdout.splitlines() if "resumable" in line)
    column = header.index("resumable")
    rows = {line.split()[1]: line for line in result.stdout.splitlines() if line.startswith("│ ")}
    assert rows["orph"][column:].split()[0] == "yes"
    assert rows["rayo"][column:].split()[0] == "no"
    assert "not resumable: the train loop __main__:train cannot be pickled" in result.stdout
    everything = cli("runs", "--url", store_url, env={"COLUMNS": "220"})
    finished = next(line for line in everything.stdout.splitlines() if "│ fin " in line)
    assert finished[column:].split()[0] == "│"  # an ended run: nothing to resume


def test_an_elastic_run_shows_its_range_its_sizes_and_why_each_changed(
    cli: Any, store_url: str
) -> None:
    with EventStore.open(store_url) as store:
        scenarios.elastic_resized(store)
        catch_up_read_models(store)
    result = cli("runs", "ela", "--url", store_url)
    assert result.exit_code == 0, result.stderr
    out = result.stdout
    assert "2..4 x {CPU=1} (now 4)" in out
    assert "2 -> 4" in out and "grew" in out and "more resources available" in out
    detail = json.loads(cli("runs", "ela", "--url", store_url, "--json").stdout)
    assert (detail["run"]["min_workers"], detail["run"]["current_workers"]) == (2, 4)
    assert [a["num_workers"] for a in detail["attempts"]] == [2, 4]
    assert [(r["previous_workers"], r["num_workers"], r["cause"]) for r in detail["resizes"]] == [
        (None, 2, "initial"),
        (2, 4, "grew"),
    ]
    listing = json.loads(cli("runs", "--url", store_url, "--json").stdout.splitlines()[0])
    assert (listing["min_workers"], listing["current_workers"], listing["desired_workers"]) == (
        2,
        4,
        4,
    )


def test_a_run_whose_log_cannot_be_read_is_a_data_problem_exit_1(cli: Any, store_url: str) -> None:
    """As ``report --run`` (issue 41, item 15): exit 2 is kept for a wrong command line."""
    from wgstore.events.run import RunErrored
    from wgstore.events.worker_group import ErrorInfo

    with EventStore.open(store_url) as store:  # no RunCreated first: the fold refuses it
        store.append("run-b0rken", [RunErrored(error=ErrorInfo(type="X", message="lost"))])
    result = cli("runs", "b0rken", "--url", store_url)
    assert result.exit_code == 1, (result.stdout, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "run b0rken" in lines[0], result.stderr
