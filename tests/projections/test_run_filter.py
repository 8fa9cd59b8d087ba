"""RunFilter: which run summaries ``wgstore runs`` lists; no store, summaries built by hand."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from wgstore.events import InvalidArgumentError
from wgstore.projections.rows import RunSummary
from wgstore.projections.run_filter import UNREADABLE, RunFilter

T0 = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)


def summary(run_id: str, **fields: Any) -> RunSummary:
    given: dict[str, Any] = {"status": "RUNNING", "source": "wgstore", "created_at": T0}
    return RunSummary(run_id=run_id, **{**given, **fields})


RUNS = [
    summary("live"),
    summary("err", status="ERRORED"),
    summary("ray", status="FINISHED", source="ray_train"),
    summary("orph", orphaned=True),
    summary("old", status="FINISHED", created_at=T0 - timedelta(days=2)),
    summary("undated", created_at=None),
    summary("bad", status=UNREADABLE, error="cannot fold", orphaned=False, created_at=None),
]


def kept(wanted: RunFilter) -> list[str]:
    return [run.run_id for run in RUNS if wanted.matches(run)]


def test_an_empty_filter_keeps_every_run_even_an_unreadable_one() -> None:
    for wanted in (RunFilter.of(), RunFilter()):  # serve/views.py builds RunFilter() itself
        assert not wanted.active
        assert kept(wanted) == [run.run_id for run in RUNS]


def test_unreadable_is_the_status_run_views_writes() -> None:
    assert UNREADABLE == "UNREADABLE"  # rows.UNREADABLE: what run_views.py and views.py write
    assert RunFilter.of(["ERRORED"]).matches(summary("b", status="UNREADABLE")) is False


def test_matches_answers_a_bool() -> None:
    run = RUNS[0]  # live: RUNNING, wgstore, not orphaned, created at T0
    for wanted in (
        RunFilter.of(["ERRORED"]),
        RunFilter.of(source="ray_train"),
        RunFilter.of(orphaned=True),
        RunFilter.of(since=T0 + timedelta(seconds=1)),
    ):
        assert wanted.matches(run) is False
    assert RunFilter.of(["RUNNING"]).matches(run) is True


def test_a_filter_is_a_frozen_value() -> None:
    wanted = RunFilter.of(["RUNNING"])
    with pytest.raises(dataclasses.FrozenInstanceError):
        wanted.orphaned = True  # type: ignore[misc]
    assert {wanted, RunFilter.of(["running"])} == {wanted}


def test_statuses_are_read_in_any_case_with_dashes_for_underscores() -> None:
    assert kept(RunFilter.of(["running"])) == ["live", "orph", "undated"]
    assert kept(RunFilter.of(["Errored", "finished"])) == ["err", "ray", "old"]
    assert RunFilter.of(["in-it-ial-izing".replace("-", "")]).statuses == {"INITIALIZING"}
    # no RunStatus has an underscore today, so the dash rule shows in what is refused
    with pytest.raises(InvalidArgumentError, match="unknown status SHUTTING_DOWN; use one of"):
        RunFilter.of(["shutting-down"])


def test_source_orphaned_and_since_each_narrow_the_listing() -> None:
    assert kept(RunFilter.of(source="ray_train")) == ["ray"]
    assert kept(RunFilter.of(orphaned=True)) == ["orph"]
    since = RunFilter.of(since=T0 - timedelta(hours=1))
    assert kept(since) == ["live", "err", "ray", "orph"]  # "undated" has no creation time
    assert kept(RunFilter.of(since=T0)) == ["live", "err", "ray", "orph"]  # at the moment: kept
    assert kept(RunFilter.of(["RUNNING"], "wgstore", orphaned=True, since=T0)) == ["orph"]


def test_any_criterion_leaves_unreadable_runs_out() -> None:
    for wanted in (
        RunFilter.of(["ERRORED"]),
        RunFilter.of(source="wgstore"),
        RunFilter.of(since=T0 - timedelta(days=30)),
    ):
        assert wanted.active
        assert "bad" not in kept(wanted)


def test_an_unknown_status_is_refused_naming_every_valid_one() -> None:
    with pytest.raises(InvalidArgumentError) as raised:
        RunFilter.of(["DONE", "running", "nope"])
    message = str(raised.value)
    assert message.startswith("unknown status DONE, NOPE; use one of INITIALIZING, SCHEDULING")
    assert "ERRORED" in message and "ABORTED" in message


@pytest.mark.parametrize("source", ["slurm", ""])
def test_an_unknown_source_is_refused_naming_the_valid_ones(source: str) -> None:
    with pytest.raises(InvalidArgumentError, match="use one of wgstore, ray_train"):
        RunFilter.of(source=source)
