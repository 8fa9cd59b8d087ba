"""run_facts and the failure budgets: one run as labelled text; run details built by hand."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime
from typing import Any

import pytest

from wgstore.projections.rows import FailedRank, ResumeRow, RunDetail, RunInfo, RunSummary
from wgstore.projections.run_facts import (
    Fact,
    Tone,
    budget_text,
    failures_text,
    run_error_text,
    run_facts,
    state_parts,
)

T0 = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)


def detail(resumes: tuple[ResumeRow, ...] = (), **run: Any) -> RunDetail:
    """A ``run_detail`` as a finished wgstore run has it, with ``run`` fields replaced."""
    fields: dict[str, Any] = {}
    fields.update(
        run_id="r1",
        name=None,
        source="wgstore",
        status="FINISHED",
        controller_state="FINISHED",
        attempts=1,
        worker_group_failures=0,
        max_failures=0,
        start_failures=0,
        controller_failure_limit=-1,
        preemption_failures=0,
        max_preemption_failures=-1,
        resumable=True,
        orphaned=False,
        created_at=T0,
        num_workers=None,
        resources_per_worker=None,
        train_fn=None,
        failed_ranks=(),
        ray={},
        version=1,
    )
    fields.update(run)
    return RunDetail(
        run=RunInfo(**fields),
        attempts=(),
        decisions=(),
        transitions=(),
        controllers=(),
        resumes=resumes,
    )


def labels(facts: list[Fact]) -> list[str]:
    return [fact.label for fact in facts]


@pytest.mark.parametrize(
    ("used", "limit", "text"),
    [(None, 3, ""), (1, None, "1"), (1, 3, "1/3"), (2, -1, "2/∞"), (0, 0, "0/0")],
)
def test_a_budget_is_used_against_its_limit(used: int | None, limit: int | None, text: str) -> None:
    assert budget_text(used, limit) == text


def test_start_and_preemption_failures_show_only_once_there_were_some() -> None:
    run = detail(worker_group_failures=2, max_failures=1).run
    assert failures_text(run) == "2/1"
    run = dataclasses.replace(
        run, start_failures=1, controller_failure_limit=3, preemption_failures=4
    )
    assert failures_text(run) == "2/1, start 1/3, preempt 4/∞"


def test_the_state_names_the_controller_state_only_when_it_says_more() -> None:
    def parts(status: str, controller_state: str | None = None) -> tuple[str, str]:
        return state_parts(
            RunSummary(run_id="r1", status=status, controller_state=controller_state)
        )

    assert parts("RUNNING", "RUNNING") == ("RUNNING", "")
    assert parts("SCHEDULING", "RESCHEDULING") == ("SCHEDULING", " (RESCHEDULING)")
    assert parts("UNREADABLE") == ("UNREADABLE", "")


def test_a_plain_finished_run_has_only_the_facts_every_run_has() -> None:
    facts = run_facts(detail(controller_state="SHUTTING_DOWN"))
    assert facts == [
        Fact("run", "r1"),
        Fact("source", "wgstore"),
        Fact("state", "FINISHED", Tone.STATE, " (SHUTTING_DOWN)"),
        Fact("failures", "0/0 (worker group failures used / max_failures)"),
        Fact("attempts", "1"),
        Fact("created", "2026-01-01 12:00:00.000Z"),
    ]


def test_a_run_without_a_source_shows_an_empty_source_not_none() -> None:
    assert run_facts(detail(source=None))[1] == Fact("source", "")


def test_every_optional_fact_in_order_with_its_tone() -> None:
    facts = run_facts(
        detail(
            resumes=(ResumeRow(by="wgstore supervise", attempt=2, reason="orphaned"),),
            name="demo",
            status="ERRORED",
            train_fn="examples.train:train_fn",
            num_workers=2,
            resources_per_worker={"CPU": 0.5, "GPU": 1.0},
            latest_checkpoint="/ckpt/1",
            checkpoint_committed_at=T0,
            latest_reported_checkpoint="/ckpt/2",
            resumable=False,
            not_resumable_reason="the train loop cannot be pickled",
            ended_at=T0,
            lease_holder="c1",  # an ended run's lease row: not shown (test_a_lease_shows_...)
            lease_expires_at=T0,
            orphaned=True,
            error="WorkerGroupError: failed\nTraceback ...",
            failed_ranks=(FailedRank(world_rank=1, type="RuntimeError", message="died"),),
            abort_reason="controller lost",
            ray={"job_id": "02"},
        )
    )
    assert labels(facts) == [
        "run", "source", "state", "train_fn", "workers", "failures", "attempts", "checkpoint",
        "reported", "resumable", "created", "ended", "orphaned", "error", "resumed",
        "aborted", "ray",
    ]  # fmt: skip
    by_label = {fact.label: fact for fact in facts}
    assert by_label["run"].text == "r1 (demo)"
    assert by_label["workers"].text == "2 x {CPU=0.5, GPU=1}"
    assert by_label["checkpoint"].text == "/ckpt/1 (committed 2026-01-01 12:00:00.000Z)"
    assert by_label["reported"] == Fact(
        "reported",
        "/ckpt/2 (not by every rank: not committed, no retry starts from it)",
        Tone.MUTED,
    )
    assert by_label["resumable"] == Fact(
        "resumable", "no: the train loop cannot be pickled", Tone.NOTICE
    )
    assert by_label["orphaned"].tone is Tone.ALERT
    assert "`wgstore resume r1`" in by_label["orphaned"].text
    assert "`wgstore gc`" in by_label["orphaned"].text
    assert by_label["error"] == Fact("error", "rank 1: RuntimeError: died", Tone.ALERT)
    assert by_label["resumed"].text == "by wgstore supervise at attempt 2 (orphaned)"
    assert by_label["aborted"] == Fact("aborted", "controller lost", Tone.NOTICE)
    assert by_label["ray"].text == '{"job_id": "02"}'


def test_a_reported_checkpoint_that_was_committed_is_not_repeated() -> None:
    facts = run_facts(detail(latest_checkpoint="/c", latest_reported_checkpoint="/c"))
    assert [f.text for f in facts if f.label in ("checkpoint", "reported")] == ["/c"]
    uncommitted = run_facts(detail(latest_reported_checkpoint="/c"))
    assert [f.label for f in uncommitted if f.label in ("checkpoint", "reported")] == ["reported"]


def test_a_fact_is_a_frozen_value_with_no_note_and_a_plain_tone_unless_given() -> None:
    fact = Fact("source", "wgstore")
    assert (fact.tone, fact.note) == (Tone.PLAIN, "")  # the CLI shows a non-empty note
    with pytest.raises(dataclasses.FrozenInstanceError):
        fact.note = "x"  # type: ignore[misc]
    assert len({fact, Fact("source", "wgstore")}) == 1


def test_a_tone_reads_as_its_name_in_lower_case() -> None:
    # Tone is a StrEnum: its text is what str() and a JSON encoder show of it
    assert [str(tone) for tone in Tone] == ["plain", "muted", "notice", "error", "alert", "state"]


def test_a_lease_shows_while_the_run_goes_on_and_not_once_it_ended() -> None:
    live = run_facts(detail(lease_holder="c1", lease_expires_at=T0))
    assert Fact("lease", "c1 until 2026-01-01 12:00:00.000Z") in live
    ended = run_facts(detail(lease_holder="c1", lease_expires_at=T0, ended_at=T0))
    assert "lease" not in labels(ended)


def test_the_error_is_the_users_of_the_lowest_failed_rank_and_the_others_follow() -> None:
    """Ray Train's run error is its WorkerGroupError wrapper; the user's errors are the ranks'
    (issue 41, item 10): the error line is the lowest rank's, each other rank on a line below."""
    wrapper = "WorkerGroupError: Training failed due to worker errors:\nTraceback (most recent"
    failed = (
        FailedRank(world_rank=2, type="ValueError", message="bad batch\nmore"),
        FailedRank(world_rank=0, type="ValueError", message="bad batch"),
    )
    run = detail(status="ERRORED", error=wrapper, failed_ranks=failed)
    assert run_error_text(run.run) == "rank 0: ValueError: bad batch (and 1 more rank)"
    facts = run_facts(run)
    errors = facts[labels(facts).index("error") :]
    assert errors[:2] == [
        Fact("error", "rank 0: ValueError: bad batch (and 1 more rank)", Tone.ALERT),
        Fact("", "rank 2: ValueError: bad batch ...", Tone.ERROR),
    ]
    assert run_error_text(detail(error=wrapper).run) == (
        "WorkerGroupError: Training failed due to worker errors: ..."
    )  # no failed ranks recorded: the run's error, its first line
    controller = (FailedRank(world_rank=-1, type="TimeoutError", message="no room"),)
    assert run_error_text(detail(error="x", failed_ranks=controller).run) == "TimeoutError: no room"
    assert run_error_text(detail().run) is None
