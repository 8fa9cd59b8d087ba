"""``wgstore run --resume`` / ``--max-failures`` / ``--run-id``: mistakes refused before Ray starts.

A run resumed for real (on Ray) is in ``test_controller_ray.py``; these need no Ray.
"""

from __future__ import annotations

from typing import Any

import pytest
from typer.testing import CliRunner

from tests.orchestration.test_controller import _create
from wgstore.cli.app import app


def _run(*args: str) -> Any:
    return CliRunner().invoke(app, ["run", *args], catch_exceptions=False)


def test_resume_of_an_unknown_run_says_so_in_one_line(sqlite_url: str) -> None:
    from wgstore.events import EventStore

    EventStore.open(sqlite_url).close()  # a store without that run
    result = _run("--resume", "nope", "--url", sqlite_url)
    assert result.exit_code == 2  # an unknown run id (or prefix), as in every command
    assert "no run id starts with 'nope'" in result.stderr
    assert "Traceback" not in result.stderr + result.stdout


def test_resume_of_a_run_a_live_controller_holds_names_the_holder(sqlite_url: str) -> None:
    from wgstore.events import EventStore
    from wgstore.orchestration.run.controller import RunController

    with EventStore.open(sqlite_url) as store:
        _create(store, "held")
        holder = RunController(store, "held", executor="external").start()
        result = _run("--resume", "held", "--url", sqlite_url)
        holder.close()
    assert result.exit_code == 1
    assert holder.controller_id in result.stderr and "expires at" in result.stderr


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--resume", "r1", "examples.train:train_fn"], "drop TRAIN_FN"),
        ([], "missing TRAIN_FN"),
        (["examples.train:train_fn", "--max-failures", "-2"], "--max-failures"),
        (["examples.train:train_fn", "--run-id", "bad id!"], "--run-id must be"),
    ],
)
def test_run_refuses_bad_run_options_with_exit_2(
    sqlite_url: str, args: list[str], says: str
) -> None:
    result = _run(*args, "--url", sqlite_url)
    assert result.exit_code == 2, result.stdout + result.stderr
    assert says in result.stderr


def test_run_refuses_a_run_id_that_exists_and_points_to_resume(sqlite_url: str) -> None:
    from wgstore.events import EventStore

    with EventStore.open(sqlite_url) as store:
        _create(store, "taken")
    result = _run("examples.train:train_fn", "--run-id", "taken", "--url", sqlite_url)
    assert result.exit_code == 2
    assert "wgstore run --resume taken" in result.stderr
