"""``wgstore state``: a worker group's state as the log tells it, now or back then (time travel).

Folds the log through :func:`wgstore.projections.worker_group_state`; renders it here.
"""

from __future__ import annotations

from typing import Annotated

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
    resolve_group,
)
from wgstore.cli.groups import status_text
from wgstore.cli.render import metrics_text
from wgstore.projections import StreamNotFoundError, WorkerGroupState, worker_group_state
from wgstore.projections.views import state_json, worker_rows

__all__ = ["WORKER_STYLES", "print_errors", "print_state", "state_command", "workers_table"]


def workers_table(state: WorkerGroupState) -> Table:
    """One row per worker: rank, node, pid, status, reports, latest metrics, error."""
    table = Table(
        "rank", "node rank", "node ip", "pid", "status", "reports", "latest metrics", "error"
    )
    for row in worker_rows(state):
        table.add_row(
            str(row["rank"]),
            str(row["node_rank"]),
            row["node_ip"],
            str(row["pid"]),
            Text(row["status"], style=WORKER_STYLES.get(row["status"], "")),
            str(row["reports"]),
            metrics_text(row["metrics"]),
            Text(row["error"], style="red"),
        )
    return table


def print_errors(state: WorkerGroupState) -> None:
    """Every error of the group, whole: the start failure and each worker's, with tracebacks."""
    console = out_console()
    found = False
    if state.start_failure is not None:
        found = True
        failure = state.start_failure
        console.print(Text(f"start failed at stage {failure.stage}", style="bold red"))
        console.print(str(failure.error), markup=False, highlight=False)
        if failure.error.traceback:
            console.print(failure.error.traceback.rstrip(), markup=False, highlight=False)
    for rank, error in sorted(state.errors.items()):
        found = True
        console.print(Text(f"rank {rank}", style="bold red"))
        console.print(str(error), markup=False, highlight=False)
        if error.traceback:
            console.print(error.traceback.rstrip(), markup=False, highlight=False)
    if not found:
        console.print(f"worker group {state.group_id} has no errors", style="dim")


WORKER_STYLES = {"running": "green", "finished": "bold", "error": "bold red", "started": "cyan"}


def print_state(state: WorkerGroupState) -> None:
    """Print a worker group's state: a summary, then one line per worker."""
    console = out_console()
    outcome = state.outcome
    facts = Table.grid(padding=(0, 2))
    facts.add_column(style="dim")
    facts.add_column()
    ctx = state.context
    facts.add_row("group", state.group_id)
    facts.add_row("run", f"{state.run_id} (attempt {state.attempt})")
    facts.add_row(
        "status", status_text(state.status.value, None if outcome is None else outcome.value)
    )
    facts.add_row(
        "as of",
        f"version {state.version}, position {state.position}, {format_time(state.updated_at)}",
    )
    facts.add_row("train_fn", f"{ctx.train_fn} {json_line(dict(ctx.train_fn_config))}")
    resources = ", ".join(f"{k}={v:g}" for k, v in ctx.resources_per_worker.items())
    facts.add_row("workers", f"{state.num_workers} x {{{resources}}}, {ctx.placement_strategy}")
    facts.add_row("requested", format_time(state.requested_at))
    if state.started_at:
        facts.add_row(
            "started", f"{format_time(state.started_at)} (startup {state.startup_s or 0:.2f}s)"
        )
    if state.polls_total:
        facts.add_row(
            "polls",
            f"{state.polls_total} ({state.recorded_polls} recorded), last #{state.last_poll_seq} "
            f"at {format_time(state.last_polled_at)}",
        )
    if state.reports_total:
        facts.add_row("reports", str(state.reports_total))
    if state.latest_checkpoint:
        facts.add_row("checkpoint", state.latest_checkpoint)
    if state.start_failure is not None:
        failure = state.start_failure
        facts.add_row(
            "start failed", Text(f"at stage {failure.stage}: {failure.error}", style="bold red")
        )
    if state.shutdown_reason is not None:
        facts.add_row(
            "shutdown",
            f"{state.shutdown_reason} (asked {format_time(state.shutdown_requested_at)})",
        )
    if state.shut_down_at:
        facts.add_row(
            "shut down",
            f"{format_time(state.shut_down_at)} in {state.shutdown_duration_s or 0:.2f}s",
        )
    if state.released:
        facts.add_row("released", ", ".join(state.released))
    console.print(facts)
    if state.workers:
        console.print(workers_table(state))


def state_command(
    group: Annotated[str, typer.Argument(help="A worker group id or a unique prefix of one.")],
    url: UrlOption = DEFAULT_URL,
    version: Annotated[
        int | None, typer.Option(min=1, help="The state right after this version of the stream.")
    ] = None,
    at: Annotated[
        str | None, typer.Option(help="The state at this moment: ISO time, or 10m, 2h ago.")
    ] = None,
    as_json: Annotated[
        bool, typer.Option("--json", help="The whole state as one JSON object.")
    ] = False,
    errors: Annotated[
        bool,
        typer.Option(
            "--errors",
            help="Print every error whole, with its traceback (tables show the first line).",
        ),
    ] = False,
) -> None:
    """Show a worker group's state: now, after stream version N, or at a moment (time travel)."""
    if version is not None and at is not None:
        raise UsageProblem("give --version or --at, not both")
    moment = parse_time(at) if at else None
    with opened(url) as store:
        group_id = resolve_group(store, group)
        try:
            state = worker_group_state(store, group_id, version=version, at=moment)
        except StreamNotFoundError as error:
            raise UsageProblem(str(error)) from None
    if as_json:
        typer.echo(json_line(state_json(state)))
    elif errors:
        print_errors(state)
    else:
        print_state(state)
