"""``wgstore verify``: recompute the hash chains, and check the read models against the log."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.text import Text

from wgstore.cli.common import (
    DEFAULT_URL,
    CliError,
    UrlOption,
    group_stream,
    opened,
    out_console,
    resolve_group,
)
from wgstore.events import EventStore

__all__ = ["read_model_problems", "verify_command"]


def read_model_problems(store: EventStore) -> list[str] | None:
    """What differs between the read models and a fresh rebuild; None when there are none."""
    del store  # filled in when the read models land in wgstore.projections
    return None


def verify_command(
    url: UrlOption = DEFAULT_URL,
    group: Annotated[
        str | None, typer.Option("--group", "-g", help="Check only this worker group's stream.")
    ] = None,
    stream: Annotated[
        str | None, typer.Option("--stream", "-s", help="Check only this stream.")
    ] = None,
) -> None:
    """Recompute every hash chain and check the read models; exit 1 naming each problem."""
    console = out_console()
    with opened(url) as store:
        if group:
            stream = group_stream(resolve_group(store, group))
        report = store.verify(stream)
        problems = list(report.problems)
        streams = len(store.streams()) if stream is None else 1
        if report.ok:
            console.print(
                f"[green]ok[/]  hash chains: {report.checked} events in {streams} stream(s)"
            )
        model_problems = read_model_problems(store) if stream is None else None
        if model_problems is not None:
            problems += model_problems
            if not model_problems:
                console.print("[green]ok[/]  read models match a rebuild from the log")
    for problem in problems:
        console.print(Text(f"FAIL  {problem}", style="red"))
    if problems:
        raise CliError(f"verify found {len(problems)} problem(s); each is listed above")
