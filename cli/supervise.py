"""``wgstore supervise``: resume orphaned runs by themselves, until stopped.

Calls :func:`wgstore.orchestration.orphans.supervise.supervise` and prints each decision.
"""

from __future__ import annotations

import signal
import threading
from typing import Annotated

import typer

from wgstore.cli.common import DEFAULT_URL, UrlOption, check_url, json_line, opened, out_console

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
) -> None:
    """Watch the log and resume every orphaned, resumable run (its driver died).

    Each resume runs as its own `wgstore resume` process and is recorded on the run's stream
    (RunResumed, by this supervisor); its progress lines and what its train function prints
    show here, as `wgstore run` shows them. Two supervisors never resume one run twice. SIGTERM
    or Ctrl-C stops it cleanly; the resumed runs go on.
    """
    check_url(url)
    from wgstore.orchestration.orphans.supervise import Decision, supervise

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
