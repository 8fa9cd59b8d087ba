"""A run id may be shortened to any unique prefix wherever a run id is taken, as a group id may.

``runs RUN``, ``events --run``, ``export --run``, ``report --run``, ``groups --run`` and
``run --resume`` all go through one resolver (:func:`wgstore.projections.views.resolve_id`, the
one group ids use): an unknown or ambiguous prefix is one red line and exit 2 everywhere.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from wgstore.events import EventStore
from wgstore.projections.run_views import resolve_run_id
from wgstore.projections.views import resolve_group_id

RUN = "1600c0ffee42"
OTHER_RUN = "16aa00000001"
GROUP = "ab90aa00bb11cc22"
OTHER_GROUP = "ab91aa00bb11cc22"


@pytest.fixture
def two_runs(store_url: str, history: Any) -> str:
    """Two runs whose ids share the prefix ``16``, each with an errored group."""
    with EventStore.open(store_url) as store:
        history.record_errored_group(store, group_id=GROUP, run_id=RUN)
        history.record_run(store, run_id=RUN)
        history.record_errored_group(store, group_id=OTHER_GROUP, run_id=OTHER_RUN)
        history.record_run(store, run_id=OTHER_RUN)
    return store_url


def _commands(tmp_path: Path, prefix: str) -> dict[str, list[str]]:
    return {
        "runs": ["runs", prefix, "--json"],
        "events --run": ["events", "--run", prefix, "--json"],
        "export --run": ["export", "--run", prefix, "-o", str(tmp_path / "run.jsonl")],
        "report --run": ["report", "--run", prefix, "-o", str(tmp_path / "run.html")],
        "groups --run": ["groups", "--run", prefix, "--json"],
    }


def test_a_unique_run_prefix_selects_that_run_in_every_command(
    two_runs: str, cli: Callable[..., Any], tmp_path: Path
) -> None:
    for name, args in _commands(tmp_path, RUN[:4]).items():
        result = cli(*args, "--url", two_runs)
        assert result.exit_code == 0, f"{name}: {result.output}"
    runs = json.loads(cli("runs", RUN[:4], "--json", "--url", two_runs).stdout)
    assert runs["run"]["run_id"] == RUN
    events = cli("events", "--run", RUN[:4], "--json", "--url", two_runs).stdout.splitlines()
    streams = {json.loads(line)["stream_id"] for line in events}
    assert streams == {f"run-{RUN}", f"worker-group-{GROUP}"}
    exported = (tmp_path / "run.jsonl").read_text().splitlines()
    assert {json.loads(line)["stream_id"] for line in exported} == streams
    assert RUN in (tmp_path / "run.html").read_text()
    groups = cli("groups", "--run", RUN[:4], "--json", "--url", two_runs).stdout.splitlines()
    assert [json.loads(line)["group_id"] for line in groups] == [GROUP]


@pytest.mark.parametrize(
    ("prefix", "message"),
    [
        ("16", "'16' matches 2 runs (1600c0ffee42, 16aa00000001); give more of the id"),
        ("zzz", "no run id starts with 'zzz'"),
    ],
)
def test_an_ambiguous_or_unknown_run_prefix_is_one_line_and_exit_2_everywhere(
    two_runs: str, cli: Callable[..., Any], tmp_path: Path, prefix: str, message: str
) -> None:
    commands = _commands(tmp_path, prefix)
    commands["run --resume"] = ["run", "--resume", prefix]
    for name, args in commands.items():
        result = cli(*args, "--url", two_runs)
        assert result.exit_code == 2, f"{name}: {result.output}"
        assert message in result.stderr, f"{name}: {result.stderr}"
        assert "Traceback" not in result.output
        assert len(result.stderr.strip().splitlines()) == 1, f"{name}: {result.stderr}"


def test_run_resume_takes_a_prefix(two_runs: str, cli: Callable[..., Any]) -> None:
    """The run ended (errored) before its controller recorded an attempt, so resuming it says
    so without starting Ray: the prefix was resolved to the whole id first."""
    result = cli("run", "--resume", RUN[:4], "--url", two_runs)
    assert f"resuming run {RUN}" in result.stderr
    assert f"run {RUN} is ERRORED" in result.stderr
    assert result.exit_code == 1


def test_groups_and_runs_share_one_resolver(two_runs: str) -> None:
    """The same rules: the whole id, a unique prefix, the stream id; the same messages."""
    with EventStore.open(two_runs, read_only=True) as store:
        assert resolve_run_id(store, f"run-{RUN[:3]}") == RUN
        assert resolve_group_id(store, f"worker-group-{GROUP[:5]}") == GROUP
        for resolve, given, kind in (
            (resolve_run_id, "16", "runs"),
            (resolve_group_id, "ab9", "worker groups"),
        ):
            with pytest.raises(ValueError, match=f"matches 2 {kind}"):
                resolve(store, given)
