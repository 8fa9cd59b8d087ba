"""``wgstore resume RUN``: continue a run whose driver or controller is gone.

Calls :func:`wgstore.orchestration.orphans.resume.resume_orphan` under ``wgstore run``'s live table
(:func:`~wgstore.cli.live_run.watch_run`) and prints how the run ended.
"""

from __future__ import annotations

from typing import Annotated

import typer
from rich.text import Text

from wgstore.cli.common import (
    DEFAULT_URL,
    CliError,
    UrlOption,
    check_url,
    err_console,
    opened,
    out_console,
    resolve_run,
    store_label,
)
from wgstore.cli.live_run import join_ray, watch_run
from wgstore.events.records import Fence

__all__ = ["resume_command"]


def resume_command(
    run: Annotated[str, typer.Argument(help="The run id, or a unique prefix of it.")],
    url: UrlOption = DEFAULT_URL,
    wait: Annotated[
        bool,
        typer.Option(
            "--wait",
            help="If a live process holds the run, wait for its lease to lapse instead of "
            "refusing.",
        ),
    ] = False,
    lease_from: Annotated[
        str | None,
        typer.Option(
            "--lease-from",
            metavar="HOLDER:EPOCH",
            help="Take the run's lease over from this grant (how `wgstore supervise` starts a "
            "resume it took the run for).",
        ),
    ] = None,
    by: Annotated[
        str, typer.Option("--by", help="Who resumes, as recorded in RunResumed.")
    ] = "wgstore resume",
    ray_address: Annotated[
        str | None,
        typer.Option(
            "--ray-address",
            envvar="RAY_ADDRESS",
            help="The Ray cluster to resume on (default: RAY_ADDRESS, else a local one).",
        ),
    ] = None,
    quiet_workers: Annotated[
        bool,
        typer.Option(
            "--quiet-workers",
            help="Do not show what the train function prints (shown by default, as `wgstore "
            "run` shows it; Ray's worker log files keep it either way).",
        ),
    ] = False,
) -> None:
    """Resume a run whose driver died: a `wgstore run` run, or a Ray Train run recorded with
    RecordingCallback, on the Ray cluster reachable now.

    A Ray Train run is built again from the log (trainer, train loop, configs), with the same
    name and storage path, so it continues from its latest committed checkpoint, as a new
    attempt of the same run. Refused with one line when the run has ended, is live, or cannot be
    resumed (and why).

    While it trains it shows what `wgstore run` shows: the live table of the current attempt
    (progress lines when stdout is not a terminal, or when a supervisor started it) and what
    the train function prints.
    """
    check_url(url)
    from wgstore.orchestration.errors import RunNotResumableError
    from wgstore.orchestration.orphans.resume import resume_orphan
    from wgstore.orchestration.runtimes.quiet_ray import quiet_ray

    with opened(url, read_only=False) as store:
        run_id = resolve_run(store, run)
        if ray_address:
            import os

            os.environ["RAY_ADDRESS"] = ray_address
        quiet_ray()
        handed = _handed(run_id, lease_from)
        join_ray(store, run_id, show_workers=not quiet_workers)
        err_console().print(Text(f"resuming run {run_id} from {store_label(url)}", style="dim"))
        try:
            final, _ = watch_run(
                store,
                run_id,
                lambda: resume_orphan(
                    store,
                    run_id,
                    wait_s=float("inf") if wait else 0.0,
                    by=by,
                    take_lease_from=handed,
                ),
                lines=lease_from is not None,  # a supervisor's: its resumes share its terminal
            )
        except RunNotResumableError as error:
            raise CliError(str(error)) from None
    out_console().print(f"run {run_id}: {final.status.value}")
    if final.status.value in ("ERRORED", "ABORTED"):
        raise typer.Exit(1)


def _handed(run_id: str, lease_from: str | None) -> Fence | None:
    if lease_from is None:
        return None
    holder, _, epoch = lease_from.rpartition(":")
    if not holder or not epoch.isdigit():
        raise CliError(f"--lease-from takes HOLDER:EPOCH, got {lease_from!r}", exit_code=2)
    return Fence(lease=run_id, holder=holder, epoch=int(epoch))
