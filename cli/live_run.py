"""A run driven from the terminal (``wgstore run``, ``wgstore resume``): Ray joined, a live
table, how it ended.

On a terminal the table of the current worker group is live (Rich); in a pipe or a log file a
progress line (:func:`wgstore.projections.progress.progress_line`) is printed every few seconds
instead, when it changed. At the end: how the group and the run ended
(:mod:`wgstore.orchestration.run_outcome`), and the exit code that says it.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, TypeVar

import typer
from rich.console import Console
from rich.live import Live
from rich.text import Text

from wgstore.cli.common import DEFAULT_URL, CliError, err_console, out_console
from wgstore.cli.group_view import inspect_hint, live_view
from wgstore.events import EventStore
from wgstore.orchestration.quiet_ray import quiet_ray
from wgstore.orchestration.run_outcome import (
    group_outcome_text,
    run_outcome_text,
    training_error_text,
)
from wgstore.projections import WorkerGroupState
from wgstore.projections.follow import follow_run
from wgstore.projections.progress import progress_line

if TYPE_CHECKING:
    from wgstore.orchestration.training import RunResult

__all__ = ["PROGRESS_EVERY_S", "drive", "join_ray", "show_result", "watch", "watch_run"]

PROGRESS_EVERY_S = 2.0
"""Seconds between progress lines when stdout is not a terminal (only when something changed)."""

OnUpdate = Callable[[WorkerGroupState], None]
T = TypeVar("T")


class _ProgressLines:
    """A progress line every ``every_s`` seconds when it changed: what a pipe or a log file
    gets instead of the live table (Rich draws that only on a terminal)."""

    def __init__(
        self, console: Console, every_s: float = PROGRESS_EVERY_S, prefix: str = ""
    ) -> None:
        self._console = console
        self._every_s = every_s
        self._prefix = prefix
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
        line = self._prefix + progress_line(state)
        with self._lock:
            self._latest = line

    def _loop(self) -> None:
        while not self._stop.wait(self._every_s):
            with self._lock:
                line = self._latest
            if line and line != self._printed:
                self._console.print(line, markup=False, highlight=False, soft_wrap=True)
                self._printed = line


class _Progress:
    """What a run shows while it trains: the live table of the current group on a terminal,
    progress lines (:class:`_ProgressLines`) in a pipe or a log file, or when ``lines``; then
    the group's final table (:meth:`finish`)."""

    def __init__(self, *, lines: bool = False, prefix: str = "") -> None:
        self._console = out_console()
        self._lines: _ProgressLines | None = None
        self._live: Live | None = None
        if lines or not self._console.is_terminal:
            self._lines = _ProgressLines(self._console, prefix=prefix)
        else:
            self._live = Live(console=self._console, refresh_per_second=4, transient=False)
        self._last = 0.0

    def __enter__(self) -> _Progress:
        if self._lines is not None:
            self._lines.__enter__()
        else:
            assert self._live is not None
            self._live.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._lines is not None:
            self._lines.__exit__(*exc)
        elif self._live is not None:
            self._live.__exit__(*exc)  # type: ignore[arg-type]

    def update(self, state: WorkerGroupState) -> None:
        """Show ``state`` (the table at most every 0.1 s, and its terminal state)."""
        if self._lines is not None:
            self._lines.update(state)
            return
        assert self._live is not None
        now = time.monotonic()
        if now - self._last >= 0.1 or state.is_terminal:
            self._live.update(live_view(state))
            self._last = now

    def finish(self, state: WorkerGroupState) -> None:
        """Show the group's final table: in place of the live one, or once after the lines."""
        if self._live is not None:
            self._live.update(live_view(state))
        else:
            self.__exit__(None, None, None)  # the last line first, then the table
            self._lines = None
            self._console.print(live_view(state))


def watch(url: str, call: Callable[[OnUpdate], RunResult]) -> RunResult:
    """Run ``call(on_update)`` under a live table of the current group (progress lines when
    stdout is not a terminal); returns its result."""
    with _Progress() as progress:
        result = call(progress.update)
        progress.finish(result.state)
    return result


def watch_run(
    store: EventStore, run_id: str, call: Callable[[], T], *, lines: bool = False
) -> tuple[T, WorkerGroupState | None]:
    """Run ``call()`` while showing run ``run_id``'s current attempt as ``wgstore run`` does
    (:func:`watch`), read from the log as whoever drives the run writes it
    (:func:`~wgstore.projections.follow.follow_run`, in a thread): what ``wgstore resume``
    shows, whether the run is continued by a controller in this process or by Ray Train's.
    ``lines``: progress lines even on a terminal (a supervisor's resumes share its terminal);
    each names the run (``run ID attempt 2: RUNNING | rank 0 ...``).

    Returns:
        What ``call`` returned, and the attempt's state at the end (None: it has no group).
    """
    done = threading.Event()
    latest: list[WorkerGroupState] = []

    def follow(progress: _Progress) -> None:
        for state in follow_run(store, run_id, stopped=done.is_set):
            latest[:] = [state]
            progress.update(state)

    with _Progress(lines=lines, prefix=f"run {run_id} ") as progress:
        follower = threading.Thread(
            target=follow, args=(progress,), name="wgstore-follow-run", daemon=True
        )
        follower.start()
        try:
            result = call()
        finally:
            done.set()
            follower.join(timeout=30)
        if latest:
            progress.finish(latest[0])
    return result, (latest[0] if latest else None)


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


def join_ray(store: EventStore, run_id: str, *, show_workers: bool) -> None:
    """Join Ray now, so what the resumed run's workers print reaches this terminal (as
    :func:`drive` does for ``wgstore run``) unless ``show_workers`` is off; not for a run that
    has ended or cannot be resumed (its refusal needs no cluster)."""
    from wgstore.orchestration.controller import read_run
    from wgstore.orchestration.ray_resources import ensure_ray
    from wgstore.projections.run_state import resume_problem

    run = read_run(store, run_id)
    if show_workers and not run.ended and resume_problem(run) is None:
        ensure_ray(log_to_driver=True)


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
