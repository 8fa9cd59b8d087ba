"""``wgstore replay`` (event by event, what each changed) and ``wgstore polls`` (the poll history)."""

from __future__ import annotations

from typing import Annotated, Any

import msgspec
import typer
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from wgstore.cli.common import (
    DEFAULT_URL,
    UrlOption,
    format_time,
    json_line,
    opened,
    out_console,
    parse_time,
    resolve_group,
)
from wgstore.cli.render import event_line
from wgstore.events import UnknownEvent
from wgstore.events.streams import group_stream
from wgstore.projections import PollRecord, WorkerGroupState, evolve, poll_history
from wgstore.projections.diff import diff_states
from wgstore.projections.views import first_line

__all__ = ["polls_command", "replay_command"]


def replay_command(
    group: Annotated[str, typer.Argument(help="A worker group id or a unique prefix of one.")],
    url: UrlOption = DEFAULT_URL,
    as_json: Annotated[bool, typer.Option("--json", help="One JSON object per event.")] = False,
) -> None:
    """Replay a worker group event by event, showing what each event changed in its state."""
    console = None if as_json else out_console()
    with opened(url) as store:
        group_id = resolve_group(store, group)
        state: WorkerGroupState | None = None
        for record in store.read_stream(group_stream(group_id)):
            new = evolve(state, record)
            changes = diff_states(state, new)
            state = new
            if console is None:
                typer.echo(
                    json_line(
                        {
                            "position": record.position,
                            "version": record.version,
                            "type": record.type,
                            "recorded_at": record.recorded_at,
                            "status": new.status.value,
                            "changes": {name: {"from": a, "to": b} for name, a, b in changes},
                        }
                    )
                )
                continue
            console.print(event_line(record), soft_wrap=True)
            if isinstance(record.event, UnknownEvent):
                console.print(
                    "          [dim]stepped over: this wgstore does not know the type[/]",
                    soft_wrap=True,
                )
            for name, before, after in changes:
                console.print(
                    f"          [dim]{escape(name)}:[/] {escape(before)} [dim]->[/] [bold]{escape(after)}[/]",
                    soft_wrap=True,
                )


def _changes_text(record: PollRecord) -> str:
    parts = []
    for change in record.changes:
        if change.error is not None:
            parts.append(f"rank {change.world_rank} error ({first_line(change.error)})")
        else:
            parts.append(f"rank {change.world_rank} {'running' if change.running else 'finished'}")
    return "; ".join(parts) or "no change"


def _poll_json(record: PollRecord) -> dict[str, Any]:
    return {
        "poll_seq": record.poll_seq,
        "polled_at": record.polled_at,
        "polls": record.polls,
        "unchanged_since": record.unchanged_since,
        "running": record.status.num_running,
        "errors": {str(rank): str(error) for rank, error in record.status.errors.items()},
        "changes": msgspec.to_builtins(record.changes),
        "version": record.version,
        "position": record.position,
    }


def polls_command(
    group: Annotated[str, typer.Argument(help="A worker group id or a unique prefix of one.")],
    url: UrlOption = DEFAULT_URL,
    show_all: Annotated[
        bool,
        typer.Option("--all", help="Every recorded poll, not only those that changed something."),
    ] = False,
    since: Annotated[str | None, typer.Option(help="Polls from this time: ISO or 10m, 2h.")] = None,
    until: Annotated[str | None, typer.Option(help="Polls up to this time.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="One JSON object per poll.")] = False,
) -> None:
    """Show a worker group's poll history: each status change, with the polls and time between."""
    start = parse_time(since) if since else None
    end = parse_time(until) if until else None
    with opened(url) as store:
        group_id = resolve_group(store, group)
        history = poll_history(store, group_id, since=start, until=end)
    shown = [r for i, r in enumerate(history) if show_all or r.changes or i == 0]
    if as_json:
        for record in shown:
            typer.echo(json_line(_poll_json(record)))
        return
    console = out_console()
    if not shown:
        console.print("no recorded polls" + (" in that time" if start or end else ""))
        return
    table = Table("poll", "polled at", "polls", "quiet since", "running", "errors", "changes")
    for record in shown:
        errors = record.status.errors
        table.add_row(
            f"#{record.poll_seq}",
            format_time(record.polled_at),
            str(record.polls),
            format_time(record.unchanged_since) if record.unchanged_since else "",
            f"{record.status.num_running}/{len(record.status.worker_statuses)}",
            Text(str(len(errors)), style="bold red" if errors else "dim"),
            Text(
                _changes_text(record), style="red" if any(c.error for c in record.changes) else ""
            ),
        )
    console.print(table)
    total = sum(r.polls for r in history)
    console.print(
        Text(
            f"{len(shown)} of {len(history)} recorded polls shown, standing for {total} polls"
            + ("; --all shows every recorded poll" if len(shown) < len(history) else ""),
            style="dim",
        )
    )
