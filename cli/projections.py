"""``wgstore projections status | catch-up | rebuild``: the SQL read models and their checkpoint."""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable
from typing import Any

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table
from rich.text import Text

from wgstore.cli.common import DEFAULT_URL, UrlOption, opened, out_console
from wgstore.events import EventStore
from wgstore.projections import (
    READ_MODELS_SUBSCRIPTION,
    catch_up_read_models,
    rebuild_read_models,
)
from wgstore.projections.views import read_model_status

__all__ = ["projections_app"]

projections_app = typer.Typer(
    help="The SQL read models (wg_worker_groups, wg_workers, ...): status, catch up, rebuild.",
    no_args_is_help=True,
)


@projections_app.command("status")
def status_command(url: UrlOption = DEFAULT_URL) -> None:
    """Show how far the read models are behind the log, their row counts, and refused streams."""
    with opened(url) as store:
        status = read_model_status(store)
    console = out_console()
    if status.behind:
        console.print(
            f"[yellow]behind[/]: the read models are at position {status.checkpoint}, the log at "
            f"{status.head}: {status.behind} event(s) not applied yet "
            "(`wgstore projections catch-up` applies them)"
        )
    else:
        console.print(
            f"[green]up to date[/]: the read models have every event up to position {status.head}"
        )
    table = Table("read model", "rows")
    for name, count in status.rows.items():
        table.add_row(name, str(count))
    console.print(table)
    for group_id, error in status.broken:
        console.print(Text(f"refused: group {group_id}: {error}", style="red"))
    for run_id, error in status.broken_runs:
        console.print(Text(f"refused: run {run_id}: {error}", style="red"))


def _with_progress(store: EventStore, label: str, work: Callable[[], int]) -> int:
    """Run ``work`` in a thread while a progress bar follows the read models' checkpoint."""
    head = store.head()
    subscription = store.subscription(READ_MODELS_SUBSCRIPTION)
    outcome: dict[str, Any] = {}

    def target() -> None:
        try:
            outcome["handled"] = work()
        except BaseException as error:  # noqa: BLE001 - handed to the main thread below
            outcome["error"] = error

    thread = threading.Thread(target=target, name=f"wgstore-{label}", daemon=True)
    columns = (
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
    )
    with Progress(*columns, console=out_console(), transient=False) as progress:
        task = progress.add_task(label, total=max(head, 1))
        thread.start()
        while thread.is_alive():
            thread.join(timeout=0.2)
            progress.update(task, completed=min(subscription.checkpoint(), head))
        progress.update(task, completed=max(head, 1))
    if "error" in outcome:
        raise outcome["error"]
    return int(outcome["handled"])


FOLLOW_EVERY_S = 2.0
"""``catch-up --follow``: the least time between two catch-ups (an executor's own rhythm)."""


@projections_app.command("catch-up")
def catch_up_command(
    url: UrlOption = DEFAULT_URL,
    follow: bool = typer.Option(
        False,
        "--follow",
        help="Keep going: apply new events as they land (at most every --every seconds) until "
        "Ctrl-C or SIGTERM. For logs that no executor projects: recorded Ray Train runs "
        "watched with `wgstore serve`.",
    ),
    every: float = typer.Option(
        FOLLOW_EVERY_S, "--every", min=0.1, help="--follow: seconds between catch-ups, at least"
    ),
) -> None:
    """Apply the events the read models have not seen yet (and, with --follow, what comes)."""
    with opened(url, read_only=False) as store:
        handled = _with_progress(store, "catching up", lambda: catch_up_read_models(store))
        checkpoint = store.subscription(READ_MODELS_SUBSCRIPTION).checkpoint()
        out_console().print(
            f"applied {handled} worker-group and run event(s); the read models are up to date "
            f"(position {checkpoint}; other streams are not read)"
        )
        if follow:
            _follow(store, checkpoint, every)


def _follow(store: EventStore, checkpoint: int, every_s: float) -> None:
    """Catch the read models up whenever the log grows, until SIGINT or SIGTERM."""
    stop = threading.Event()

    def stop_on_signal(_signum: int, _frame: object) -> None:
        stop.set()
        store.wake_waiters()

    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, stop_on_signal)
    console = out_console()
    console.print(f"following the log (a catch-up at most every {every_s:g} s; Ctrl-C stops)")
    head = checkpoint
    while not stop.is_set():
        head = store.wait_for_new(head, timeout_s=60, stop=stop)
        if stop.is_set():
            break
        handled = catch_up_read_models(store)
        checkpoint = store.subscription(READ_MODELS_SUBSCRIPTION).checkpoint()
        head = max(head, checkpoint)
        if handled:
            console.print(f"applied {handled} event(s), up to position {checkpoint}")
        stop.wait(every_s)  # the rhythm between catch-ups, not a wait for a condition
    console.print(f"stopped; the read models are at position {checkpoint}")


@projections_app.command("rebuild")
def rebuild_command(url: UrlOption = DEFAULT_URL) -> None:
    """Rebuild the read models from the whole log, in one transaction (rolled back on failure)."""
    with opened(url, read_only=False) as store:
        handled = _with_progress(store, "rebuilding", lambda: rebuild_read_models(store))
        checkpoint = store.subscription(READ_MODELS_SUBSCRIPTION).checkpoint()
    out_console().print(
        f"rebuilt the read models from {handled} worker-group and run event(s), up to position "
        f"{checkpoint}"
    )
