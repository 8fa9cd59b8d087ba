"""One worker group drawn with Rich: its facts, its workers' table, its errors, the live view.

The rows come from :mod:`wgstore.projections.views`; ``wgstore state`` and ``wgstore run`` draw
with these.
"""

from __future__ import annotations

from rich.console import Group
from rich.table import Table
from rich.text import Text

from wgstore.cli.common import DEFAULT_URL, format_time, json_line, out_console, store_label
from wgstore.cli.groups import STATUS_STYLES, status_text
from wgstore.cli.render import metrics_text
from wgstore.projections import WorkerGroupState
from wgstore.projections.views import worker_rows

__all__ = [
    "WORKER_STYLES",
    "inspect_hint",
    "live_view",
    "print_errors",
    "print_state",
    "workers_table",
]


def workers_table(state: WorkerGroupState) -> Table:
    """One row per worker: rank, node, pid, status, reports, latest metrics, error."""
    table = Table(
        "rank", "node rank", "node ip", "pid", "status", "reports", "latest metrics", "error"
    )
    for row in worker_rows(state):
        table.add_row(
            str(row.rank),
            str(row.node_rank),
            row.node_ip,
            str(row.pid),
            Text(row.status, style=WORKER_STYLES.get(row.status, "")),
            str(row.reports),
            metrics_text(row.metrics),
            Text(row.error, style="red"),
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


WORKER_STYLES = {
    "running": "green",
    "finished": "bold",
    "error": "bold red",
    "started": "cyan",
    "stopped": "bold",
    "killed": "yellow",
    "dead": "red",
    "shut down": "dim",
}


def print_state(state: WorkerGroupState, *, in_run: bool = True) -> None:
    """Print a worker group's state: a summary, then one line per worker.

    ``in_run``: False for a group on its own (no ``run-<id>`` stream: not a run).
    """
    console = out_console()
    outcome = state.outcome
    facts = Table.grid(padding=(0, 2))
    facts.add_column(style="dim")
    facts.add_column()
    ctx = state.context
    facts.add_row("group", state.group_id)
    if in_run:
        facts.add_row("run", f"{state.run_id} (attempt {state.attempt})")
    else:
        facts.add_row("run", Text("none (a group on its own, not part of a run)", style="dim"))
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
        at = state.checkpoint_committed_at
        facts.add_row(
            "checkpoint",
            f"{state.latest_checkpoint} (report {state.checkpoint_index}, committed "
            f"{format_time(at)})"
            if at is not None
            else state.latest_checkpoint,
        )
    reported = state.latest_reported_checkpoint
    if reported and reported != state.latest_checkpoint:
        facts.add_row(
            "reported",
            Text(f"{reported} (not by every rank: not committed)", style="dim"),
        )
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


def live_view(state: WorkerGroupState) -> Group:
    """The live picture of a group: its status line and one row per worker."""
    outcome = state.outcome
    head = Text()
    head.append("worker group ", style="dim")
    head.append(state.group_id, style="bold")
    head.append("  ")
    head.append(state.status.value, style=STATUS_STYLES.get(state.status.value, ""))
    if outcome is not None:
        head.append(f" ({outcome.value})")
    if state.attempt:
        head.append(f"  attempt {state.attempt}", style="dim")
    head.append(f"  polls {state.polls_total}  reports {state.reports_total}", style="dim")
    return Group(head, workers_table(state))


def inspect_hint(group_id: str, url: str) -> str:
    """The commands that show what happened to a group (with ``--url`` unless the default)."""
    flag = "" if url == DEFAULT_URL else f" --url '{store_label(url)}'"
    short = group_id[:8]
    return "\n".join(
        [
            "find out what happened:",
            f"  wgstore state {short}{flag}",
            f"  wgstore polls {short}{flag}",
            f"  wgstore events {short}{flag}",
            f"  wgstore report {short} -o timeline.html{flag}",
        ]
    )
