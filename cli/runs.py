"""``wgstore runs``: the training runs as the log tells them; ``wgstore runs RUN`` one run.

The listing is :func:`wgstore.projections.run_views.run_summaries` (the read model ``wg_runs``
when it is up to date with the log, the log folded otherwise, or with ``--from-log``) kept by a
:class:`~wgstore.projections.run_filter.RunFilter`; one run is
:func:`~wgstore.projections.run_views.run_detail`, folded from the log, shown as
:func:`~wgstore.projections.run_facts.run_facts`. Orphaned joins each run with its lease
(``wg_run_leases``) now.

Archived runs (``wgstore archive``) are listed too, marked ARCHIVED, from the manifests the
database keeps (:func:`~wgstore.projections.archived_views.archived_summaries`: run id, batch,
archived at; no file is read); ``wgstore runs RUN`` of one reads its file and shows it as a live
run is shown (:func:`~wgstore.projections.archived_views.archived_run_detail`).
"""

from __future__ import annotations

import dataclasses
from typing import Annotated

import typer
from rich.table import Table
from rich.text import Text

from wgstore.cli.common import (
    DEFAULT_URL,
    CliError,
    UrlOption,
    UsageProblem,
    format_time,
    json_line,
    opened,
    out_console,
    parse_time,
)
from wgstore.cli.run_view import DECISION_STYLES, RUN_STYLES, print_run
from wgstore.events import InvalidArgumentError, StoreUnavailableError
from wgstore.events.streams import run_stream
from wgstore.projections import ProjectionError, StreamNotFoundError
from wgstore.projections.archived_views import (
    archived_run_detail,
    archived_summaries,
    restore_hint,
)
from wgstore.projections.rows import UNREADABLE, ArchivedRunInfo, ArchivedRunSummary, RunSummary
from wgstore.projections.run_facts import budget_text, failures_text, state_parts
from wgstore.projections.run_filter import RunFilter
from wgstore.projections.run_views import resolve_run_id, run_detail, run_summaries
from wgstore.projections.views import first_line

__all__ = ["DECISION_STYLES", "RUN_STYLES", "budget_text", "print_run", "runs_command"]


def _state_text(summary: RunSummary) -> Text:
    status, controller = state_parts(summary)
    text = Text(status, style=RUN_STYLES.get(status, ""))
    if controller:
        text.append(controller, style="dim")
    return text


def runs_command(
    run: Annotated[
        str | None,
        typer.Argument(help="Show this run (an id or a unique prefix) with its attempts."),
    ] = None,
    url: UrlOption = DEFAULT_URL,
    status: Annotated[
        list[str] | None,
        typer.Option(
            "--status", help="Only runs in this status, e.g. RUNNING or ERRORED (repeat for more)."
        ),
    ] = None,
    source: Annotated[
        str | None,
        typer.Option(
            help="Only runs of this source: wgstore, ray_train (the callback's) or ray_export (read from Ray's export events)."
        ),
    ] = None,
    orphaned: Annotated[
        bool, typer.Option("--orphaned", help="Only orphaned runs (no live controller lease).")
    ] = False,
    since: Annotated[
        str | None, typer.Option(help="Only runs created since: ISO time or 10m, 2h, 3d.")
    ] = None,
    as_json: Annotated[
        bool, typer.Option("--json", help="One JSON object per run (with RUN: the whole run).")
    ] = False,
    from_log: Annotated[
        bool,
        typer.Option(
            "--from-log", help="Fold every run from the log even when the read models are current."
        ),
    ] = False,
    live: Annotated[
        bool, typer.Option("--live", help="Only the live runs: leave the archived ones out.")
    ] = False,
    archived: Annotated[
        bool,
        typer.Option(
            "--archived",
            help="Only the archived runs (run id, batch, archived at: `wgstore runs RUN` shows one).",
        ),
    ] = False,
) -> None:
    """List the training runs, oldest first: state, attempts, failures used / budget, checkpoint,
    orphaned, resumable (or why not), updated (the run's latest event, reports included).

    With RUN, show that run with each attempt: its worker group, status, outcome, failure and
    the decision taken (RETRY / RAISE). Orphaned: not ended, and no controller holds a live lease.

    Archived runs (`wgstore archive`) come first, state ARCHIVED, with their batch and when it
    was archived: the listing reads the batches' manifests, not the archive's files, so it
    shows no status, attempts or error of them, and a filter (--status, --source, --orphaned,
    --since) leaves them out. `wgstore runs RUN` of an archived run reads its file and shows it
    as a live one, marked archived; --live hides them, --archived lists only them.
    """
    if run is not None:
        if status or source or orphaned or since or from_log or live or archived:
            raise UsageProblem(
                "--status, --source, --orphaned, --since, --from-log, --live and --archived "
                "filter the listing; leave them out to show one run"
            )
        _show_run(url, run, as_json)
        return
    if live and archived:
        raise UsageProblem("--live and --archived leave each other nothing; give one")
    wanted = RunFilter.of(status or [], source, orphaned=orphaned)
    if since:
        wanted = dataclasses.replace(wanted, since=parse_time(since))
    if archived and (wanted.active or from_log):
        raise UsageProblem(
            "--archived lists the runs from the archive's manifests, without their events: "
            "--status, --source, --orphaned, --since and --from-log do not apply to it"
        )
    with opened(url) as store:
        summaries: list[RunSummary] = []
        if not live and not wanted.active:
            summaries.extend(archived_summaries(store))
        if not archived:
            summaries += [s for s in run_summaries(store, from_log=from_log) if wanted.matches(s)]
    if as_json:
        for summary in summaries:
            typer.echo(json_line(summary.to_json()))
        return
    if not summaries:
        empty = "no archived runs" if archived else "no runs in the log"
        out_console().print("no runs match" if wanted.active else empty)
        return
    table = Table(
        "run",
        "name",
        "state",
        "attempts",
        "failures",
        "checkpoint",
        "orphaned",
        "resumable",
        "updated",
    )
    for summary in summaries:
        _add_summary(table, summary)
    out_console().print(table)


def _add_summary(table: Table, summary: RunSummary) -> None:
    """One run's row of the listing (and a second for why it failed or cannot be resumed, or
    which batch holds it)."""
    if isinstance(summary, ArchivedRunSummary):
        state = summary.status + (f" ({summary.ended_as})" if summary.ended_as else "")
        ended = format_time(summary.ended_at) if summary.ended_at else ""
        table.add_row(
            summary.run_id, summary.name or "", Text(state, style="dim"), *[""] * 5, ended
        )
        table.add_row(
            "",
            Text(
                f"archived in batch {summary.archive_batch} at {format_time(summary.archived_at)}",
                style="dim",
            ),
        )
        return
    if summary.status == UNREADABLE:
        table.add_row(summary.run_id, "", _state_text(summary), "", "", "", "", "", "")
        table.add_row("", Text(first_line(summary.error), style="red"))
        return
    table.add_row(
        summary.run_id,
        summary.name or "",
        _state_text(summary),
        str(summary.attempts),
        failures_text(summary),
        summary.latest_checkpoint or "",
        Text("ORPHANED", style="bold red") if summary.orphaned else "",
        _resumable_text(summary),
        format_time(summary.updated_at),
    )
    if summary.resumable is False:
        reason = first_line(summary.not_resumable_reason or "")
        table.add_row("", Text(f"not resumable: {reason}", "dim"))


def _resumable_text(summary: RunSummary) -> Text | str:
    """Whether ``wgstore resume`` could continue a run that has not ended: ``yes``, or ``no``
    (why: the row below); nothing for an ended run."""
    if summary.ended_at is not None or summary.resumable is None:
        return ""
    return Text("yes", style="green") if summary.resumable else Text("no", style="yellow")


def _show_run(url: str, run: str, as_json: bool) -> None:
    with opened(url) as store:
        try:
            run_id = resolve_run_id(store, run, archived=True)
        except InvalidArgumentError as error:
            raise UsageProblem(str(error)) from None
        try:
            if store.stream_version(run_stream(run_id)):
                detail = run_detail(store, run_id)
            else:
                detail = archived_run_detail(store, run_id)
        except (StreamNotFoundError, ProjectionError) as error:  # the log, not the command (1)
            raise CliError(f"run {run_id}: {error}") from None
        except (ValueError, StoreUnavailableError) as error:  # the archive's file or manifest
            raise CliError(
                f"run {run_id} is archived, and its file cannot be read: {error}"
            ) from None
    if as_json:
        typer.echo(json_line(detail.to_json()))
        return
    info = detail.run
    if isinstance(info, ArchivedRunInfo):
        out_console().print(
            Text(restore_hint(run_id, info.archive_batch, info.archived_at), style="yellow")
        )
    print_run(detail)
