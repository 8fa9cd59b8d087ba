"""A run driven from the terminal (``wgstore run``): Ray joined, a live table, how it ended.

On a terminal the table of the current worker group is live (Rich); in a pipe or a log file a
progress line (:func:`wgstore.projections.progress.progress_line`) is printed every few seconds
instead, when it changed. At the end: how the group and the run ended
(:mod:`wgstore.orchestration.run_outcome`), and the exit code that says it.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

import typer
from rich.console import Console
from rich.live import Live
from rich.text import Text

from wgstore.cli.common import DEFAULT_URL, CliError, err_console, out_console
from wgstore.cli.group_view import inspect_hint, live_view
from wgstore.orchestration.quiet_ray import quiet_ray
from wgstore.orchestration.run_outcome import (
    group_outcome_text,
    run_outcome_text,
    training_error_text,
)
from wgstore.projections import WorkerGroupState
from wgstore.projections.progress import progress_line

if TYPE_CHECKING:
    from wgstore.orchestration.training import RunResult

__all__ = ["PROGRESS_EVERY_S", "drive", "show_result", "watch"]

PROGRESS_EVERY_S = 2.0
"""Seconds between progress lines when stdout is not a terminal (only when something changed)."""

OnUpdate = Callable[[WorkerGroupState], None]


class _ProgressLines:
    """A progress line every ``every_s`` seconds when it changed: what a pipe or a log file
    gets instead of the live table (Rich draws that only on a terminal)."""

    def __init__(self, console: Console, every_s: float = PROGRESS_EVERY_S) -> None:
        self._console = console
        self._every_s = every_s
        self._lock = threading.Lock()
        self._latest = ""
        self._printed = ""
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="wgstore-progress", daemon=True)

    def __enter__(self) -> _ProgressLines:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def update(self, state: WorkerGroupState) -> None:
        line = progress_line(state)
        with self._lock:
            self._latest = line

    def _loop(self) -> None:
        while not self._stop.wait(self._every_s):
            with self._lock:
                line = self._latest
            if line and line != self._printed:
                self._console.print(line, markup=False, highlight=False, soft_wrap=True)
                self._printed = line


def watch(url: str, call: Callable[[OnUpdate], RunResult]) -> RunResult:
    """Run ``call(on_update)`` under a live table of the current group (progress lines when
    stdout is not a terminal); returns its result."""
    console = out_console()
    if not console.is_terminal:
        with _ProgressLines(console) as progress:
            result = call(progress.update)
        console.print(live_view(result.state))
        return result
    with Live(console=console, refresh_per_second=4, transient=False) as live:
        last = [0.0]

        def on_update(state: WorkerGroupState) -> None:
            now = time.monotonic()
            if now - last[0] >= 0.1 or state.is_terminal:
                live.update(live_view(state))
                last[0] = now

        result = call(on_update)
        live.update(live_view(result.state))
    return result


def show_result(result: RunResult, url: str) -> None:
    """Say how the group and the run ended, with the commands that show more.

    Raises:
        typer.Exit: 130 when interrupted (Ctrl-C).
        CliError: the training errored (exit 1), naming the rank and the first line.
    """
    console = out_console()
    console.print(f"worker group [bold]{result.group_id}[/] {group_outcome_text(result)}")
    console.print(inspect_hint(result.group_id, url), highlight=False, markup=False)
    run_line = run_outcome_text(result)
    if run_line is not None:
        console.print(run_line, highlight=False, markup=False)
    if result.interrupted:
        raise typer.Exit(130)
    error = training_error_text(result)
    if error is not None:
        raise CliError(
            f"{error} (the whole error: wgstore state {result.group_id[:8]} --errors"
            f"{'' if url == DEFAULT_URL else ' --url ...'})"
        )


def drive(
    url: str,
    call: Callable[[OnUpdate], RunResult],
    *,
    start_ray: bool,
    quiet_workers: bool,
    message: str,
) -> None:
    """Join Ray now if ``start_ray`` (before ``call`` would, so the workers' output reaches this
    terminal unless ``quiet_workers``), print ``message``, :func:`watch` ``call`` to its end and
    :func:`show_result`.

    Raises:
        WorkerGroupStartError: as ``call`` raised it, after printing the commands that show why.
    """
    from wgstore.orchestration import WorkerGroupStartError
    from wgstore.orchestration.ray_resources import ensure_ray

    quiet_ray()
    if start_ray:
        ensure_ray(log_to_driver=not quiet_workers)
    err_console().print(Text(message, style="dim"))
    try:
        result = watch(url, call)
    except WorkerGroupStartError as error:
        group_id = getattr(error, "group_id", None)
        if group_id:
            err_console().print(inspect_hint(group_id, url))
        raise
    show_result(result, url)
