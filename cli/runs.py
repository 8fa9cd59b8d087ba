"""``wgstore runs``: the training runs as the log tells them; ``wgstore runs RUN`` one run.

The listing is :func:`wgstore.projections.run_views.run_summaries` (the read model ``wg_runs``
when it is up to date with the log, the log folded otherwise, or with ``--from-log``); one run is
:func:`~wgstore.projections.run_views.run_detail`, folded from the log. Orphaned joins each run
with its lease (``wg_run_leases``) now.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any

import typer
from rich.table import Table
from rich.text import Text

from wgstore.cli.common import (
    DEFAULT_URL,
    UrlOption,
    UsageProblem,
    format_time,
    json_line,
    opened,
    out_console,
    parse_time,
    resolve_run,
)
from wgstore.cli.groups import status_text
from wgstore.projections import ProjectionError, RunStatus, StreamNotFoundError
from wgstore.projections.run_rows import RUN_SOURCES
from wgstore.projections.run_views import run_detail, run_summaries
from wgstore.projections.views import first_line

__all__ = ["DECISION_STYLES", "RUN_STYLES", "budget_text", "print_run", "runs_command"]

RUN_STYLES = {
    "INITIALIZING": "dim",
    "SCHEDULING": "cyan",
    "RUNNING": "green",
    "RESTARTING": "yellow",
    "RESIZING": "yellow",
    "FINISHED": "bold",
    "ERRORED": "bold red",
    "ABORTED": "yellow",
    "UNREADABLE": "bold red",
}
DECISION_STYLES = {"RETRY": "yellow", "RAISE": "bold red"}


def budget_text(used: int | None, limit: int | None) -> str:
    """``1/3`` failures used against the limit (``1/∞`` when unlimited)."""
    if used is None:
        return ""
    if limit is None:
        return str(used)
    return f"{used}/{'∞' if limit < 0 else limit}"


def _failures(summary: dict[str, Any]) -> str:
    text = budget_text(summary["worker_group_failures"], summary["max_failures"])
    extra = [
        f"{label} {budget_text(summary[used], summary[limit])}"
        for label, used, limit in (
            ("start", "start_failures", "controller_failure_limit"),
            ("preempt", "preemption_failures", "max_preemption_failures"),
        )
        if summary[used]
    ]
    return ", ".join([text, *extra]) if extra else text


def _state_text(summary: dict[str, Any]) -> Text:
    status = summary["status"]
    text = Text(status, style=RUN_STYLES.get(status, ""))
    controller = summary.get("controller_state")
    if controller and controller != status:
        text.append(f" ({controller})", style="dim")
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
        typer.Option(help="Only runs of this source: wgstore, or ray_train (recorded runs)."),
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
) -> None:
    """List the training runs, oldest first: state, attempts, failures used / budget, checkpoint.

    With RUN, show that run with each attempt: its worker group, status, outcome, failure and
    the decision taken (RETRY / RAISE). Orphaned: not ended, and no controller holds a live lease.
    """
    if run is not None:
        if status or source or orphaned or since or from_log:
            raise UsageProblem(
                "--status, --source, --orphaned, --since and --from-log filter the listing; "
                "leave them out to show one run"
            )
        _show_run(url, run, as_json)
        return
    known = [s.value for s in RunStatus]
    wanted = {s.upper().replace("-", "_") for s in status or []}
    unknown = sorted(wanted - set(known))
    if unknown:
        raise UsageProblem(f"unknown status {', '.join(unknown)}; use one of {', '.join(known)}")
    if source is not None and source not in RUN_SOURCES:
        raise UsageProblem(f"unknown source {source!r}; use one of {', '.join(RUN_SOURCES)}")
    start: datetime | None = parse_time(since) if since else None
    with opened(url) as store:
        summaries = run_summaries(store, from_log=from_log)
    filtered = wanted or source or orphaned or start
    table = Table(
        "run", "name", "state", "attempts", "failures", "checkpoint", "orphaned", "updated"
    )
    shown = 0
    for summary in summaries:
        readable = summary["status"] != "UNREADABLE"
        if filtered and not readable:
            continue
        if wanted and summary["status"] not in wanted:
            continue
        if source and summary["source"] != source:
            continue
        if orphaned and not summary["orphaned"]:
            continue
        if start and (summary["created_at"] is None or summary["created_at"] < start):
            continue
        shown += 1
        if as_json:
            typer.echo(json_line(summary))
            continue
        if not readable:
            table.add_row(
                summary["run_id"],
                "",
                _state_text(summary),
                "",
                "",
                "",
                "",
                "",
            )
            table.add_row("", Text(first_line(summary["error"]), style="red"))
            continue
        table.add_row(
            summary["run_id"],
            summary["name"] or "",
            _state_text(summary),
            str(summary["attempts"]),
            _failures(summary),
            summary["latest_checkpoint"] or "",
            Text("ORPHANED", style="bold red") if summary["orphaned"] else "",
            format_time(summary["updated_at"]),
        )
        if summary["resumable"] is False:
            table.add_row(
                "",
                Text(f"not resumable: {first_line(summary['not_resumable_reason'] or '')}", "dim"),
            )
    if as_json:
        return
    if shown:
        out_console().print(table)
    else:
        out_console().print("no runs match" if filtered else "no runs in the log")


def _show_run(url: str, run: str, as_json: bool) -> None:
    with opened(url) as store:
        run_id = resolve_run(store, run)
        try:
            detail = run_detail(store, run_id)
        except (StreamNotFoundError, ProjectionError) as error:
            raise UsageProblem(f"run {run_id}: {error}") from None
    if as_json:
        typer.echo(json_line(detail))
    else:
        print_run(detail)


def print_run(detail: dict[str, Any]) -> None:
    """Print one run: its facts, then one row per attempt with its failure and decision."""
    console = out_console()
    run = detail["run"]
    facts = Table.grid(padding=(0, 2))
    facts.add_column(style="dim")
    facts.add_column()
    facts.add_row("run", f"{run['run_id']}" + (f" ({run['name']})" if run["name"] else ""))
    facts.add_row("source", run["source"])
    facts.add_row("state", _state_text(run))
    if run["train_fn"]:
        facts.add_row("train_fn", run["train_fn"])
    if run["num_workers"] is not None:
        resources = ", ".join(f"{k}={v:g}" for k, v in (run["resources_per_worker"] or {}).items())
        facts.add_row("workers", f"{run['num_workers']} x {{{resources}}}")
    facts.add_row("failures", _failures(run) + " (worker group failures used / max_failures)")
    facts.add_row("attempts", str(run["attempts"]))
    if run["latest_checkpoint"]:
        at = run["checkpoint_committed_at"]
        facts.add_row(
            "checkpoint",
            run["latest_checkpoint"] + (f" (committed {format_time(at)})" if at else ""),
        )
    reported = run["latest_reported_checkpoint"]
    if reported and reported != run["latest_checkpoint"]:
        facts.add_row(
            "reported",
            Text(f"{reported} (not by every rank: not committed, no retry starts from it)", "dim"),
        )
    if run["resumable"] is False:
        facts.add_row("resumable", Text(f"no: {run['not_resumable_reason']}", style="yellow"))
    facts.add_row("created", format_time(run["created_at"]))
    if run["ended_at"]:
        facts.add_row("ended", format_time(run["ended_at"]))
    if run["lease_holder"]:
        facts.add_row(
            "lease", f"{run['lease_holder']} until {format_time(run['lease_expires_at'])}"
        )
    if run["orphaned"]:
        facts.add_row(
            "orphaned",
            Text(
                "yes: no live process holds its lease (its driver or controller is gone); "
                f"resume it (`wgstore resume {run['run_id']}`) or end it and release its Ray "
                "resources (`wgstore gc`)",
                style="bold red",
            ),
        )
    if run["error"]:
        facts.add_row("error", Text(first_line(run["error"]), style="bold red"))
    for failed in run["failed_ranks"] or []:
        facts.add_row(
            "", Text(f"rank {failed['world_rank']}: {failed['type']}: {failed['message']}", "red")
        )
    for resumed in detail["resumes"]:
        facts.add_row(
            "resumed",
            Text(f"by {resumed['by']} at attempt {resumed['attempt']} ({resumed['reason']})"),
        )
    if run["abort_reason"]:
        facts.add_row("aborted", Text(run["abort_reason"], style="yellow"))
    if run["ray"]:
        facts.add_row("ray", json_line(run["ray"]))
    console.print(facts)
    if not detail["attempts"]:
        console.print("no attempts yet", style="dim")
        return
    table = Table("#", "group", "try", "status", "requested", "failure", "decision")
    for attempt in detail["attempts"]:
        decisions = Text()
        for decision in attempt["decisions"]:
            if decisions:
                decisions.append("; ")
            decisions.append(decision["decision"], style=DECISION_STYLES.get(decision["decision"]))
            decisions.append(
                f" {decision['failure_kind']} "
                f"{budget_text(decision['failures_so_far'], decision['limit'])}"
            )
        table.add_row(
            str(attempt["number"]),
            attempt["group_id"],
            "" if attempt["attempt"] is None else str(attempt["attempt"]),
            status_text(attempt["status"] or "NO EVENTS", attempt["outcome"]),
            format_time(attempt["requested_at"]),
            Text(first_line(attempt["error"] or ""), style="red"),
            decisions,
        )
    console.print(table)
