"""A run driven from the terminal (``wgstore run``, ``wgstore resume``): Ray joined, a live
table, how it ended.

On a terminal the table of the current worker group is live (Rich); in a pipe or a log file a
progress line (:func:`wgstore.projections.progress.progress_line`) is printed every few seconds
instead, when it changed. At the end: how the group and the run ended
(:mod:`wgstore.orchestration.run.outcome`), and the exit code that says it.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, TypeVar

import typer
from rich.text import Text

from wgstore.cli.common import DEFAULT_URL, CliError, err_console, out_console
from wgstore.cli.group_view import inspect_hint
from wgstore.cli.progress_view import Progress
from wgstore.events import EventStore
from wgstore.orchestration.run.outcome import (
    group_outcome_text,
    run_outcome_text,
    training_error_text,
)
from wgstore.orchestration.runtimes.quiet_ray import quiet_ray
from wgstore.projections import WorkerGroupState
from wgstore.projections.follow import follow_run

if TYPE_CHECKING:
    from wgstore.orchestration.run.training import RunResult

__all__ = ["drive", "join_ray", "show_result", "watch", "watch_run"]

OnUpdate = Callable[[WorkerGroupState], None]
T = TypeVar("T")


def watch(url: str, call: Callable[[OnUpdate], RunResult]) -> RunResult:
    """Run ``call(on_update)`` under a live table of the current group (progress lines when
    stdout is not a terminal); returns its result."""
    with Progress() as progress:
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

    def follow(progress: Progress) -> None:
        for state in follow_run(store, run_id, stopped=done.is_set):
            latest[:] = [state]
            progress.update(state)

    with Progress(lines=lines, prefix=f"run {run_id} ") as progress:
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
    from wgstore.orchestration.run.controller import read_run
    from wgstore.orchestration.runtimes.ray_resources import ensure_ray
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
    from wgstore.orchestration.runtimes.ray_resources import ensure_ray

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
