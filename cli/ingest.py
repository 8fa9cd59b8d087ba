"""``wgstore ingest ray-export``: read Ray's export event files into the log, each line once.

Calls :class:`wgstore.orchestration.ray_export.Ingester`; ``--follow`` keeps reading as Ray
writes (a sidecar beside the head node, sharing Ray's session folder).
"""

from __future__ import annotations

import signal
import threading
from pathlib import Path
from typing import Annotated

import typer
from rich.text import Text

from wgstore.cli.common import (
    DEFAULT_URL,
    UrlOption,
    check_url,
    err_console,
    json_line,
    opened,
    out_console,
)

__all__ = ["ingest_app", "ray_export_command"]

ingest_app = typer.Typer(
    help="Record what other systems wrote: Ray's export events.", no_args_is_help=True
)

CLAIM_HELP = (
    "Seconds a run's lines wait, after Ray started the run, for wgstore's RecordingCallback "
    "to record it (a run recorded by the callback is the callback's: richer, resumable). "
    "0 when no run on the cluster uses the callback: runs then show within a second."
)


@ingest_app.command("ray-export")
def ray_export_command(
    paths: Annotated[
        list[Path] | None,
        typer.Argument(
            metavar="[PATH]...",
            help=(
                "Export folders (<session>/logs/export_events, one per node) or files; default: "
                "the newest local session's ($RAY_TMPDIR or /tmp)/ray/session_latest."
            ),
        ),
    ] = None,
    url: UrlOption = DEFAULT_URL,
    follow: Annotated[
        bool, typer.Option("--follow", help="Keep reading as Ray writes, until stopped.")
    ] = False,
    interval: Annotated[
        float,
        typer.Option(min=0.05, metavar="SECONDS", help="With --follow: seconds between reads."),
    ] = 0.5,
    claim_wait: Annotated[
        float, typer.Option("--claim-wait-s", min=0, metavar="SECONDS", help=CLAIM_HELP)
    ] = 45.0,
    batch_lines: Annotated[
        int, typer.Option(min=1, metavar="N", help="At most this many lines per transaction.")
    ] = 2000,
    as_json: Annotated[
        bool, typer.Option("--json", help="The summary as one JSON object.")
    ] = False,
) -> None:
    """Read Ray's export events (Train runs and attempts, nodes, driver jobs) into the log.

    Turn them on in Ray with RAY_enable_export_api_write=1 and
    RAY_TRAIN_ENABLE_STATE_TRACKING=1. Each run becomes the run and attempt streams the
    RecordingCallback writes (listed, watched and audited; not resumable: the export has no
    train loop), with ids in Ray's hex form. What was read of each file is kept in the log in
    the same transaction as what it produced: a killed ingester, a second one beside it, a
    rotated file or a torn last line never record a line twice or skip one. A line that is not
    an export event is reported with its file and line and skipped.
    """
    check_url(url)
    from wgstore.orchestration.ray_export.files import default_folder
    from wgstore.orchestration.ray_export.ingester import Ingester

    folders = list(paths or [default_folder()])
    missing = [str(p) for p in folders if not p.exists()]
    if missing and not follow:
        from wgstore.cli.errors import UsageProblem

        raise UsageProblem(
            f"no such export folder or file: {', '.join(missing)} (Ray writes them with "
            "RAY_enable_export_api_write=1 to <session>/logs/export_events)"
        )
    if missing:  # a sidecar may start before Ray made its session: read them once they exist
        err_console().print(
            Text(f"waiting for {', '.join(missing)} (Ray makes it when its session starts)"),
            highlight=False,
        )

    def report(text: str) -> None:  # (a line may hold [brackets]: no markup)
        err_console().print(Text.assemble(("skipped", "yellow"), " ", text), highlight=False)

    stop = threading.Event()
    previous = signal.signal(signal.SIGTERM, lambda _signum, _frame: stop.set())
    try:
        with opened(url, read_only=False) as store:
            ingester = Ingester(
                store, folders, claim_wait_s=claim_wait, batch_lines=batch_lines, report=report
            )
            try:
                stats = ingester.follow(stop, interval) if follow else ingester.run_once(stop)
            except KeyboardInterrupt:
                stats = ingester.stats
    finally:
        signal.signal(signal.SIGTERM, previous)
    if as_json:
        typer.echo(json_line(stats.as_dict()))
        return
    held = f", {stats.held} line(s) held for the callback's claim" if stats.held else ""
    out_console().print(
        f"{stats.files} file(s): {stats.lines} line(s) read, {stats.events} event(s) "
        f"recorded, {len(stats.bad_lines)} line(s) skipped{held}"
    )
