"""``wgstore gc``: end runs whose controller is gone and release their Ray resources.

Calls :func:`wgstore.orchestration.orphans.gc.collect_garbage` and shows what it found and did.
"""

from __future__ import annotations

from typing import Annotated

import typer
from rich.table import Table

from wgstore.cli.common import (
    DEFAULT_URL,
    CliError,
    UrlOption,
    check_url,
    format_time,
    json_line,
    opened,
    out_console,
)

__all__ = ["gc_command"]


def gc_command(
    url: UrlOption = DEFAULT_URL,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Only list the orphaned runs; change nothing.")
    ] = False,
    as_json: Annotated[bool, typer.Option("--json", help="One JSON object per run.")] = False,
    external_executor: Annotated[
        bool,
        typer.Option(
            "--external-executor",
            help="A standalone `wgstore executor` serves the store; do not run one here.",
        ),
    ] = False,
    timeout: Annotated[
        float,
        typer.Option(min=1, metavar="SECONDS", help="How long to wait for one run's group."),
    ] = 120.0,
    expiring: Annotated[
        float,
        typer.Option(
            min=0,
            metavar="SECONDS",
            help="With --dry-run: also list runs whose lease lapses within this many seconds.",
        ),
    ] = 60.0,
) -> None:
    """Abort runs whose controller is gone (no live lease) and release their worker groups.

    Each orphaned run's live group is aborted and released on Ray, then the run is recorded as
    aborted (reason "controller lost"). A run a live controller holds is never touched.
    """
    check_url(url)
    from wgstore.orchestration.orphans.gc import collect_garbage

    with opened(url, read_only=dry_run) as store:
        if not dry_run:
            from wgstore.orchestration.runtimes.quiet_ray import quiet_ray

            quiet_ray()
        outcomes = collect_garbage(
            store,
            dry_run=dry_run,
            executor="external" if external_executor else None,
            timeout_s=timeout,
            expiring_s=expiring,
        )
    if as_json:
        for outcome in outcomes:
            typer.echo(json_line(outcome.as_dict()))
    elif not outcomes:
        out_console().print("no orphaned runs" + (", none expiring" if dry_run else ""))
    else:
        table = Table("run", "controller", "group", "group status", "lease ends", "action")
        for outcome in outcomes:
            table.add_row(
                outcome.run_id,
                outcome.controller_state,
                outcome.group_id or "",
                outcome.group_status or "",
                format_time(outcome.lease_expired_at) if outcome.lease_expired_at else "no lease",
                outcome.action + (f" ({outcome.detail})" if outcome.detail else ""),
            )
        out_console().print(table)
    stuck = [o.run_id for o in outcomes if o.action == "not released"]
    if stuck:
        raise CliError(
            f"the worker group of run(s) {', '.join(stuck)} did not shut down in time; nothing "
            "was recorded for them: run `wgstore gc` again (is Ray reachable?)"
        )
