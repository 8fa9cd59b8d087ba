"""What ``wgstore resume`` shows while the run it resumed trains: ``wgstore run``'s progress
lines and final table (``live_run.watch_run``), read from the log, whoever writes the run. The
commands on real Ray: test_resume_after_kill.py and test_ray_train_resume.py."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "projections"))

import run_scenarios as scenarios

from tests.waiting import wait_until
from wgstore.cli.live_run import watch_run
from wgstore.events.streams import group_stream
from wgstore.events.worker_group import WorkerReported


def _report(store: Any, rank: int, index: int, loss: float) -> None:
    store.append(
        group_stream("live-g1"),
        [WorkerReported(world_rank=rank, index=index, metrics={"loss": loss})],
    )


def test_a_run_driven_elsewhere_shows_progress_lines_then_its_final_table(
    store: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    scenarios.running(store, "live")
    printed: list[str] = []

    def output() -> str:
        printed.append(capsys.readouterr().out)
        return "".join(printed)

    def train() -> str:  # what a resumed controller (or Ray Train's recorder) appends meanwhile
        _report(store, 0, 2, 0.25)
        wait_until(
            lambda: (
                "run live attempt 1: RUNNING | rank 0 running, 2 report(s) loss=0.25" in output()
            ),
            timeout_s=60,
            what="a progress line",
        )
        _report(store, 1, 2, 0.125)
        return "FINISHED"

    result, state = watch_run(store, "live", train, lines=True)
    assert result == "FINISHED"
    assert state is not None and (state.group_id, state.reports_total) == ("live-g1", 4)
    shown = output()
    table = shown.split("loss=0.25", 1)[1]  # after the progress line: the final table
    assert "worker group live-g1" in table
    assert "0.125" in table  # the report appended last, read after the run's call returned
