"""One run in the terminal (``wgstore runs RUN``): its facts, its attempts, its sizes.

Renders :class:`~wgstore.projections.rows.RunDetail` (from
:func:`~wgstore.projections.run_views.run_detail`); the facts are
:func:`~wgstore.projections.run_facts.run_facts`, shared with the HTML report and serve.
"""

from __future__ import annotations

from typing import Any

from rich.table import Table
from rich.text import Text

from wgstore.cli.common import format_time, out_console
from wgstore.cli.groups import status_text
from wgstore.projections.rows import RunDetail
from wgstore.projections.run_facts import Tone, budget_text, run_facts
from wgstore.projections.views import first_line

__all__ = ["DECISION_STYLES", "RUN_STYLES", "TONE_STYLES", "print_run"]

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
TONE_STYLES = {Tone.MUTED: "dim", Tone.NOTICE: "yellow", Tone.ERROR: "red", Tone.ALERT: "bold red"}


def print_run(detail: RunDetail) -> None:
    """Print one run: its facts, then one row per attempt with its failure and decision."""
    console = out_console()
    facts = Table.grid(padding=(0, 2))
    facts.add_column(style="dim")
    facts.add_column()
    for fact in run_facts(detail):
        style = RUN_STYLES.get(fact.text, "") if fact.tone is Tone.STATE else ""
        text = Text(fact.text, style=TONE_STYLES.get(fact.tone, style))
        if fact.note:
            text.append(fact.note, style="dim")
        facts.add_row(fact.label, text)
    console.print(facts)
    if not detail.attempts:
        console.print("no attempts yet", style="dim")
        return
    table = Table("#", "group", "try", "workers", "status", "requested", "failure", "decision")
    for attempt in detail.attempts:
        decisions = Text()
        for decision in attempt.decisions:
            if decisions:
                decisions.append("; ")
            decisions.append(decision.decision, style=DECISION_STYLES.get(decision.decision))
            decisions.append(
                f" {decision.failure_kind} {budget_text(decision.failures_so_far, decision.limit)}"
            )
        table.add_row(
            str(attempt.number),
            attempt.group_id,
            "" if attempt.attempt is None else str(attempt.attempt),
            "" if attempt.num_workers is None else str(attempt.num_workers),
            status_text(attempt.status or "NO EVENTS", attempt.outcome),
            format_time(attempt.requested_at),
            Text(first_line(attempt.error or ""), style="red"),
            decisions,
        )
    console.print(table)
    _print_sizes(console, detail)
    _print_nodes_lost(console, detail)


def _print_nodes_lost(console: Any, detail: RunDetail) -> None:
    """The nodes under the run's workers that Ray reported dead, beside the attempts they ended."""
    if not detail.nodes_lost:
        return
    numbers = {a.group_id: str(a.number) for a in detail.attempts}
    table = Table("at", "node", "attempts", "why", title="nodes lost", title_justify="left")
    for loss in detail.nodes_lost:
        why = loss.reason + (f": {loss.message}" if loss.message else "")
        table.add_row(
            format_time(loss.at),
            f"{loss.node_ip} {loss.node_id[:12]}".strip(),
            ", ".join(numbers.get(g, g) for g in loss.group_ids),
            Text(why, style="yellow"),
        )
    console.print(table)


def _print_sizes(console: Any, detail: RunDetail) -> None:
    """An elastic run's size over time: every size its scaling policy chose and why, and every
    preemption notice."""
    if not detail.resizes and not detail.preemptions:
        return
    table = Table("at", "workers", "cause", "why", title="sizes", title_justify="left")
    for resize in detail.resizes:
        size = str(resize.num_workers)
        if resize.previous_workers is not None:
            size = f"{resize.previous_workers} -> {size}"
        table.add_row(format_time(resize.at), size, resize.cause, resize.reason)
    for notice in detail.preemptions:
        until = f", deadline {format_time(notice.deadline)}" if notice.deadline else ""
        ranks = ", ".join(str(rank) for rank in notice.ranks)
        table.add_row(
            format_time(notice.at),
            "",
            Text("preemption", style="yellow"),
            f"node {', '.join(notice.nodes)} going (ranks {ranks}){until}",
        )
    console.print(table)
