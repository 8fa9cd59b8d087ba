"""One run as labelled lines of text, in the order ``wgstore runs RUN`` shows them.

:func:`run_facts` turns :func:`~wgstore.projections.run_views.run_detail` into :class:`Fact`
rows (a label, a text and a :class:`Tone` for how loud it is), :func:`failures_text` and
:func:`budget_text` the failures used against their limits, :func:`state_parts` a run's status
with its controller's state. Pure, no styles: the CLI picks the colours.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from wgstore.projections.rows import FailedRank, RunDetail, RunInfo, RunSummary
from wgstore.projections.text import format_time, json_line
from wgstore.projections.views import first_line

__all__ = [
    "Fact",
    "Tone",
    "budget_text",
    "failures_text",
    "run_error_text",
    "run_facts",
    "sizes_note",
    "state_parts",
    "workers_size",
]


class Tone(enum.StrEnum):
    """How a fact is shown: plain, muted, a notice, an error, an alert (what needs acting on);
    ``STATE`` is a run status, shown in its status's own colour."""

    PLAIN = "plain"
    MUTED = "muted"
    NOTICE = "notice"
    ERROR = "error"
    ALERT = "alert"
    STATE = "state"


@dataclass(frozen=True)
class Fact:
    """One row of a run's facts: ``label`` (empty: it continues the row above), ``text``,
    its ``tone``, and a ``note`` shown muted after it."""

    label: str
    text: str
    tone: Tone = Tone.PLAIN
    note: str = ""


def budget_text(used: int | None, limit: int | None) -> str:
    """``1/3`` failures used against the limit (``1/∞`` when unlimited, ``1`` with no limit)."""
    if used is None:
        return ""
    if limit is None:
        return str(used)
    return f"{used}/{'∞' if limit < 0 else limit}"


def failures_text(summary: RunSummary) -> str:
    """Worker group failures against ``max_failures``, then start and preemption failures
    against their limits when there were any: ``2/1, start 1/3``."""
    text = budget_text(summary.worker_group_failures, summary.max_failures)
    extra = [
        f"{label} {budget_text(used, limit)}"
        for label, used, limit in (
            ("start", summary.start_failures, summary.controller_failure_limit),
            ("preempt", summary.preemption_failures, summary.max_preemption_failures),
        )
        if used
    ]
    return ", ".join([text, *extra]) if extra else text


def state_parts(summary: RunSummary) -> tuple[str, str]:
    """A run's status and, when its controller's state says more, `` (THAT_STATE)``."""
    status = summary.status
    controller = summary.controller_state
    return status, f" ({controller})" if controller and controller != status else ""


def _shown_rank(run: RunSummary) -> FailedRank | None:
    """The failed rank a run's error names: the lowest worker rank, else the controller's (-1)."""
    ranks = sorted(run.failed_ranks, key=lambda f: (f.world_rank < 0, f.world_rank))
    return ranks[0] if ranks else None


def run_error_text(run: RunSummary) -> str | None:
    """Why a run errored, in one line, as every view shows it (``wgstore runs RUN``, the run
    report, ``wgstore serve``'s runs and run pages): the user's error of its lowest failed rank,
    ``rank 1: ValueError: bad batch`` (`` (and 2 more ranks)`` when others failed), rather than
    the wrapper Ray Train raises around it (``WorkerGroupError: Training failed due to worker
    errors:`` and every rank's traceback); without failed ranks the first line of the run's
    error; None when it has none."""
    shown = _shown_rank(run)
    if shown is None:
        return first_line(run.error) if run.error else None
    where = f"rank {shown.world_rank}: " if shown.world_rank >= 0 else ""
    text = first_line(f"{shown.type}: {shown.message}")
    others = len(run.failed_ranks) - 1
    more = f" (and {others} more rank{'s' if others > 1 else ''})" if others else ""
    return f"{where}{text}{more}"


def _checkpoint_facts(run: RunInfo) -> list[Fact]:
    facts = []
    if run.latest_checkpoint:
        at = run.checkpoint_committed_at
        committed = f" (committed {format_time(at)})" if at else ""
        facts.append(Fact("checkpoint", run.latest_checkpoint + committed))
    reported = run.latest_reported_checkpoint
    if reported and reported != run.latest_checkpoint:
        text = f"{reported} (not by every rank: not committed, no retry starts from it)"
        facts.append(Fact("reported", text, Tone.MUTED))
    return facts


def _trouble_facts(detail: RunDetail) -> list[Fact]:
    run = detail.run
    facts = []
    if run.orphaned:
        text = (
            "yes: no live process holds its lease (its driver or controller is gone); "
            f"resume it (`wgstore resume {run.run_id}`) or end it and release its Ray "
            "resources (`wgstore gc`)"
        )
        facts.append(Fact("orphaned", text, Tone.ALERT))
    error = run_error_text(run)
    if error is not None:
        facts.append(Fact("error", error, Tone.ALERT))
    shown = _shown_rank(run)
    for failed in run.failed_ranks:
        if failed is not shown:
            text = f"rank {failed.world_rank}: {failed.type}: {first_line(failed.message)}"
            facts.append(Fact("", text, Tone.ERROR))
    for resumed in detail.resumes:
        text = f"by {resumed.by} at attempt {resumed.attempt} ({resumed.reason})"
        facts.append(Fact("resumed", text))
    if run.abort_reason:
        facts.append(Fact("aborted", run.abort_reason, Tone.NOTICE))
    return facts


def workers_size(run: RunInfo) -> str:
    """A run's size: ``4``, or an elastic run's range ``2..4``."""
    if run.min_workers is None:
        return str(run.num_workers)
    return f"{run.min_workers}..{run.num_workers}"


def sizes_note(run: RunInfo) -> str:
    """`` (now 2, wanted 3)`` for an elastic run: the workers holding resources, and the size
    the controller chose when it differs."""
    if run.min_workers is None:
        return ""
    note = f" (now {run.current_workers or 0}"
    if run.desired_workers is not None and run.desired_workers != run.current_workers:
        note += f", wanted {run.desired_workers}"
    return note + ")"


def run_facts(detail: RunDetail) -> list[Fact]:
    """The facts of one run (``detail`` from :func:`~wgstore.projections.run_views.run_detail`):
    id and name, source, state, train function, workers, failures, attempts, checkpoints,
    whether it can be resumed, times, lease, orphaned, errors, resumes, abort, Ray ids."""
    run = detail.run
    status, controller = state_parts(run)
    facts = [
        Fact("run", f"{run.run_id}" + (f" ({run.name})" if run.name else "")),
        Fact("source", run.source or ""),
        Fact("state", status, Tone.STATE, controller),
    ]
    if run.train_fn:
        facts.append(Fact("train_fn", run.train_fn))
    if run.num_workers is not None:
        resources = ", ".join(f"{k}={v:g}" for k, v in (run.resources_per_worker or {}).items())
        size = f"{workers_size(run)} x {{{resources}}}"
        facts.append(Fact("workers", size, note=sizes_note(run)))
    failures = failures_text(run) + " (worker group failures used / max_failures)"
    facts += [Fact("failures", failures), Fact("attempts", str(run.attempts))]
    facts += _checkpoint_facts(run)
    if run.resumable is False:
        facts.append(Fact("resumable", f"no: {run.not_resumable_reason}", Tone.NOTICE))
    facts.append(Fact("created", format_time(run.created_at)))
    if run.ended_at:
        facts.append(Fact("ended", format_time(run.ended_at)))
    if run.lease_holder and not run.ended_at:  # an ended run's lease row grants nothing
        until = format_time(run.lease_expires_at)
        facts.append(Fact("lease", f"{run.lease_holder} until {until}"))
    facts += _trouble_facts(detail)
    job = detail.ray_job
    if job is not None:
        driver = f"driver {job.driver_ip} pid {job.driver_pid}".strip()
        facts.append(Fact("ray job", f"{job.job_id} {job.entrypoint}".strip(), note=f" ({driver})"))
    if run.ray:
        facts.append(Fact("ray", json_line(run.ray)))
    return facts
