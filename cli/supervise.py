"""``wgstore supervise``: resume orphaned runs by themselves, until stopped.

Calls :func:`wgstore.orchestration.orphans.supervise.supervise` and prints each decision.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from wgstore.cli.archive_schedule import archive_while_supervising, supervise_archive
from wgstore.cli.common import DEFAULT_URL, UrlOption, check_url, json_line, opened, out_console

if TYPE_CHECKING:
    from wgstore.orchestration.orphans.supervise import Decision

__all__ = ["supervise_command"]


def supervise_command(
    url: UrlOption = DEFAULT_URL,
    max_resumes: Annotated[
        int, typer.Option("--max-resumes", min=0, help="At most this many resumes per run.")
    ] = 3,
    runs: Annotated[
        str | None,
        typer.Option("--runs", metavar="NAME_GLOB", help="Only runs whose name matches."),
    ] = None,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Only say what would be resumed.")
    ] = False,
    interval: Annotated[
        float, typer.Option(min=0.1, metavar="SECONDS", help="Seconds between passes.")
    ] = 5.0,
    once: Annotated[bool, typer.Option("--once", help="One pass, then exit.")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="One JSON object per decision.")] = False,
    ingest: Annotated[
        list[Path] | None,
        typer.Option(
            "--ingest",
            metavar="PATH",
            help=(
                "Also read Ray's export events under PATH into the log, as `wgstore ingest "
                "ray-export PATH --follow` does (repeat for several folders)."
            ),
        ),
    ] = None,
    ingest_claim_wait: Annotated[
        float,
        typer.Option(
            "--ingest-claim-wait-s",
            min=0,
            metavar="SECONDS",
            help="With --ingest: as `wgstore ingest ray-export --claim-wait-s`.",
        ),
    ] = 45.0,
    archive_to: Annotated[
        str | None,
        typer.Option(
            "--archive-to",
            metavar="LOCATION",
            help="Also archive ended runs there, as `wgstore archive --to LOCATION` does.",
        ),
    ] = None,
    archive_after: Annotated[
        str | None,
        typer.Option(
            "--archive-after",
            metavar="DURATION",
            help="With --archive-to: archive runs that ended this long ago (default: 30d).",
        ),
    ] = None,
    archive_every: Annotated[
        str | None,
        typer.Option(
            "--archive-every",
            metavar="DURATION",
            help="With --archive-to: archive at most this often (default: 1h).",
        ),
    ] = None,
) -> None:
    """Watch the log and resume every orphaned, resumable run (its driver died).

    Each resume runs as its own `wgstore resume` process and is recorded on the run's stream
    (RunResumed, by this supervisor); its progress lines and what its train function prints
    show here, as `wgstore run` shows them. Two supervisors never resume one run twice. SIGTERM
    or Ctrl-C stops it cleanly; the resumed runs go on. With --archive-to it also archives the
    runs that ended --archive-after ago, at most every --archive-every (a failure is printed and
    tried again then; it never stops the supervisor).
    """
    check_url(url)
    archiving = supervise_archive(archive_to, archive_after, archive_every, dry_run=dry_run)
    stop = threading.Event()

    def show(decision: Decision) -> None:
        if as_json:
            typer.echo(
                json_line(
                    {
                        "run_id": decision.run_id,
                        "action": decision.action,
                        "reason": decision.reason,
                    }
                )
            )
        else:
            out_console().print(f"{decision.action:8} {decision.run_id}  {decision.reason}")
        if once:
            stop.set()

    def stop_on_signal(_signum: int, _frame: object) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, stop_on_signal)
    ingesting = None
    if ingest and not dry_run:
        if once:  # one read of every file
            _ingest(url, ingest, ingest_claim_wait, None)
        else:
            ingesting = threading.Thread(
                target=_ingest, args=(url, ingest, ingest_claim_wait, stop), daemon=True
            )
            ingesting.start()
    archiver = None
    if archiving is not None and not once:
        archiver = threading.Thread(
            target=archive_while_supervising,
            args=(url, archiving, interval, stop, as_json),
            daemon=True,
        )
        archiver.start()
    try:
        _supervise(url, max_resumes, runs, dry_run, interval, once, as_json, show, stop)
        if archiving is not None and once:  # one archive, after the pass
            archive_while_supervising(url, archiving, interval, None, as_json)
    finally:
        stop.set()
        for thread in (ingesting, archiver):
            if thread is not None:
                thread.join(30)


def _ingest(url: str, paths: list[Path], claim_wait_s: float, stop: threading.Event | None) -> None:
    """``wgstore ingest ray-export --follow`` in this process, on a store of its own, until
    ``stop`` is set (``None``: one read of every file)."""
    from wgstore.cli.common import err_console
    from wgstore.orchestration.ray_export.ingester import Ingester

    def report(text: str) -> None:
        err_console().print(f"ingest: skipped {text}", highlight=False, markup=False)

    with opened(url, read_only=False) as store:
        ingester = Ingester(store, paths, claim_wait_s=claim_wait_s, report=report)
        if stop is None:
            ingester.run_once()
        else:
            ingester.follow(stop, 0.5)


def _supervise(
    url: str,
    max_resumes: int,
    runs: str | None,
    dry_run: bool,
    interval: float,
    once: bool,
    as_json: bool,
    show: Callable[[Decision], None],
    stop: threading.Event,
) -> None:
    from wgstore.orchestration.orphans.supervise import supervise

    with opened(url, read_only=dry_run) as store:
        if once:
            from wgstore.orchestration.orphans.supervise import plan

            decisions = plan(store, max_resumes=max_resumes, runs=runs)
            if dry_run or not decisions:
                for decision in decisions:
                    show(decision)
                if not decisions and not as_json:
                    out_console().print("no orphaned runs")
                return
        try:
            supervise(
                store,
                stop=stop,
                max_resumes=max_resumes,
                runs=runs,
                dry_run=dry_run,
                interval_s=interval,
                on_decision=show,
            )
        except KeyboardInterrupt:
            stop.set()
