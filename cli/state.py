"""``wgstore state``: a worker group's state as the log tells it, now or back then (time travel).

Folds the log through :func:`wgstore.projections.worker_group_state`; renders it with
:mod:`wgstore.cli.group_view`.
"""

from __future__ import annotations

from typing import Annotated

import typer

from wgstore.cli.common import (
    DEFAULT_URL,
    UrlOption,
    UsageProblem,
    json_line,
    opened,
    out_console,
    parse_time,
    resolve_live_or_archived_group,
)
from wgstore.cli.group_view import print_errors, print_state
from wgstore.events.streams import run_stream
from wgstore.projections import StreamNotFoundError, worker_group_state
from wgstore.projections.archiving import archived_group_state
from wgstore.projections.views import state_json

__all__ = ["state_command"]


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
        group_id, archived = resolve_live_or_archived_group(store, group)
        try:
            if archived:
                state = archived_group_state(store, group_id, version=version, at=moment)
            else:
                state = worker_group_state(store, group_id, version=version, at=moment)
        except (StreamNotFoundError, ValueError) as error:
            raise UsageProblem(str(error)) from None
        in_run = archived or store.stream_version(run_stream(state.run_id)) > 0
    if as_json:
        typer.echo(json_line({**state_json(state), "archived": archived}))
    elif errors:
        print_errors(state)
    else:
        print_state(state, in_run=in_run)
        if archived:
            out_console().print(
                f"[dim]archived (read from the archive's file; `wgstore restore "
                f"{state.run_id}` puts its run back in the live log)[/dim]"
            )
