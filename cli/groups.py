"""``wgstore groups``: the worker groups as the log tells them.

Shows
:func:`wgstore.projections.views.group_summaries`: the SQL read model ``wg_worker_groups`` when it
is up to date with the log, the log folded otherwise (or with ``--from-log``).
"""

from __future__ import annotations

from datetime import datetime
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
    resolve_run,
)
from wgstore.projections import (
    WorkerGroupStatus,
)
from wgstore.projections.rows import UNREADABLE, GroupSummary
from wgstore.projections.views import first_line, group_summaries

__all__ = ["OUTCOME_STYLES", "STATUS_STYLES", "groups_command", "status_text"]

STATUS_STYLES = {
    "REQUESTED": "dim",
    "STARTING": "cyan",
    "RUNNING": "green",
    "SHUTTING_DOWN": "yellow",
    "SHUT_DOWN": "bold",
    "START_FAILED": "bold red",
}
OUTCOME_STYLES = {"finished": "green", "errored": "bold red", "aborted": "yellow"}


def _duration(summary: GroupSummary) -> str:
    end = summary.shut_down_at or summary.updated_at
    if end is None or summary.requested_at is None:
        return ""
    seconds = (end - summary.requested_at).total_seconds()
    if seconds < 120:
        return f"{seconds:.1f}s"
    if seconds < 7200:
        return f"{seconds / 60:.1f}m"
    return f"{seconds / 3600:.1f}h"


def status_text(status: str, outcome: str | None) -> Text:
    text = Text(status, style=STATUS_STYLES.get(status, ""))
    if outcome:
        text.append(f" ({outcome})", style=OUTCOME_STYLES.get(outcome, ""))
    return text


def groups_command(
    url: UrlOption = DEFAULT_URL,
    status: Annotated[
        list[str] | None,
        typer.Option(
            "--status", help="Only groups in this status, e.g. RUNNING (repeat for more)."
        ),
    ] = None,
    run: Annotated[
        str | None,
        typer.Option("--run", "-r", help="Only groups of this run (an id or a unique prefix)."),
    ] = None,
    since: Annotated[
        str | None, typer.Option(help="Only groups requested since: ISO time or 10m, 2h, 3d.")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="One JSON object per group.")] = False,
    from_log: Annotated[
        bool,
        typer.Option(
            "--from-log",
            help="Fold every group from the log even when the read models are current.",
        ),
    ] = False,
) -> None:
    """List the worker groups, oldest first, with status, outcome and error.

    Reads the SQL read models when they are up to date with the log, else folds the log.
    """
    known = [s.value for s in WorkerGroupStatus]
    wanted = {s.upper().replace("-", "_") for s in status or []}
    unknown = sorted(wanted - set(known))
    if unknown:
        raise UsageProblem(f"unknown status {', '.join(unknown)}; use one of {', '.join(known)}")
    start: datetime | None = parse_time(since) if since else None
    with opened(url) as store:
        run_id = None if run is None else resolve_run(store, run)
        summaries = group_summaries(store, from_log=from_log)
    filtered = wanted or run or start
    table = Table("group", "run", "try", "status", "workers", "requested", "took", "error")
    shown = 0
    for summary in summaries:
        readable = summary.status != UNREADABLE
        if filtered and not readable:
            continue
        if wanted and summary.status not in wanted:
            continue
        if run_id is not None and summary.run_id != run_id:
            continue
        if start and (summary.requested_at is None or summary.requested_at < start):
            continue
        shown += 1
        if as_json:
            typer.echo(json_line(summary.to_json()))
            continue
        running, workers = summary.running_workers, summary.num_workers
        table.add_row(
            summary.group_id,
            summary.run_id or Text("-", style="dim"),
            "" if summary.attempt is None or not summary.run_id else str(summary.attempt),
            status_text(summary.status, summary.outcome),
            ""
            if workers is None
            else (f"{workers}" if running is None else f"{running}/{workers} running"),
            format_time(summary.requested_at) if readable else "",
            _duration(summary),
            Text(first_line(summary.error or ""), style="red"),
        )
    if not as_json:
        if shown:
            out_console().print(table)
        else:
            out_console().print(
                "no worker groups match" if filtered else "no worker groups in the log"
            )
