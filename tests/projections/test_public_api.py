"""The public surface of wgstore.projections: a sorted ``__all__`` with the contract names."""

from __future__ import annotations

import subprocess
import sys

import wgstore.projections as projections


def _isort_style(name: str) -> tuple[int, str]:
    return (0 if name.isupper() else 1 if name[0].isupper() else 2, name)


def test_all_is_sorted_and_every_name_exists() -> None:
    assert projections.__all__ == sorted(projections.__all__, key=_isort_style)
    assert [name for name in projections.__all__ if not hasattr(projections, name)] == []


def test_the_contract_names_are_exported() -> None:
    contract = {
        "project_worker_group",
        "evolve",
        "WorkerGroupState",
        "WorkerGroupStatus",
        "TrainingOutcome",
        "WorkerStatus",
        "WorkerGroupPollStatus",
        "worker_group_state",
        "poll_history",
        "catch_up_read_models",
        "rebuild_read_models",
        "ProjectionError",
    }
    assert contract <= set(projections.__all__)


def test_the_statuses_are_string_enums_with_terminal_states() -> None:
    status = projections.WorkerGroupStatus
    assert [s.name for s in status] == [
        "REQUESTED",
        "STARTING",
        "RUNNING",
        "SHUTTING_DOWN",
        "SHUT_DOWN",
        "START_FAILED",
    ]
    assert {s for s in status if s.is_terminal} == {status.SHUT_DOWN, status.START_FAILED}
    assert isinstance(status.RUNNING, str)
    assert [o.value for o in projections.TrainingOutcome] == [
        "finished",
        "errored",
        "aborted",
        "resized",
    ]


def test_projections_import_and_fold_with_ray_unavailable() -> None:
    code = (
        "import sys; sys.modules['ray'] = None\n"
        "import wgstore.projections as p\n"
        "print(p.WorkerGroupStatus.RUNNING.is_terminal)"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "False"
