"""``wgstore run``: start a worker group on Ray and watch it.

Calls :func:`wgstore.orchestration.run_training` and draws its live table from the states that
function hands back (``wgstore executor`` is in :mod:`wgstore.cli.executor`). On a terminal the
table is live; in a pipe or a log file a progress line is printed every few seconds instead.
What the train function prints shows too, as Ray shows it: each line prefixed by its rank.
"""

from __future__ import annotations

import json
import os
import re
import threading
import time
from typing import Annotated, Any

import typer
from rich.live import Live
from rich.text import Text

from wgstore.cli.common import (
    DEFAULT_URL,
    CliError,
    UrlOption,
    UsageProblem,
    check_url,
    err_console,
    opened,
    out_console,
    resolve_run,
    store_label,
)
from wgstore.cli.group_view import inspect_hint, live_view
from wgstore.orchestration.quiet_ray import quiet_ray
from wgstore.projections import WorkerGroupState
from wgstore.projections.text import metrics_text
from wgstore.projections.views import first_line, worker_rows

__all__ = ["run_command"]

PROGRESS_EVERY_S = 2.0
"""Seconds between progress lines when stdout is not a terminal (only when something changed)."""


def _check_run_inputs(
    url: str, train_fn: str, config: str | None, *, external_executor: bool
) -> dict[str, Any]:
    """Everything ``run`` can check before Ray starts: URL, train_fn (its form, then that it
    imports), config, the store."""
    from wgstore.orchestration.errors import TrainFnError
    from wgstore.orchestration.loading import check_train_fn_imports, check_train_fn_path

    check_url(url)
    try:
        check_train_fn_path(train_fn)
    except TrainFnError as error:
        raise UsageProblem(str(error)) from None
    try:
        train_config = json.loads(config) if config else {}
    except (json.JSONDecodeError, RecursionError) as error:
        raise UsageProblem(f"--config is not valid JSON: {error}") from None
    if not isinstance(train_config, dict):
        raise UsageProblem("--config must be a JSON object, e.g. '{\"steps\": 50}'")
    # Workers add this folder to sys.path (the in-process executor's working folder); on a
    # cluster at RAY_ADDRESS, or with an executor elsewhere, a module missing here may be there.
    workers_may_differ = external_executor or bool(os.environ.get("RAY_ADDRESS"))
    try:
        check_train_fn_imports(train_fn, os.getcwd(), workers_may_differ=workers_may_differ)
    except TrainFnError as error:
        raise UsageProblem(str(error)) from None
    with opened(url, read_only=False):  # reachable and migrated, before Ray starts
        pass
    return train_config


def _start_ray(quiet_workers: bool) -> None:
    """Join Ray now (before ``run_training`` would) so the workers' output reaches this terminal
    unless ``--quiet-workers``."""
    from wgstore.orchestration.ray_resources import ensure_ray

    ensure_ray(log_to_driver=not quiet_workers)


def run_command(
    ctx: typer.Context,
    train_fn: Annotated[
        str | None,
        typer.Argument(help='The train function, "package.module:function" (not with --resume).'),
    ] = None,
    url: UrlOption = DEFAULT_URL,
    workers: Annotated[
        int, typer.Option("--workers", "-n", min=1, metavar="N", help="How many workers.")
    ] = 4,
    config: Annotated[
        str | None,
        typer.Option(
            metavar="JSON", help="JSON config for the train function, e.g. '{\"steps\": 50}'."
        ),
    ] = None,
    cpus_per_worker: Annotated[
        float | None,
        typer.Option(
            min=0, metavar="N", help="CPUs per worker (default: min(1, cluster CPUs / workers))."
        ),
    ] = None,
    gpus_per_worker: Annotated[
        float, typer.Option(min=0, metavar="N", help="GPUs per worker.")
    ] = 0,
    poll_interval: Annotated[
        float, typer.Option(min=0.01, metavar="SECONDS", help="Seconds between polls.")
    ] = 1.0,
    run_id: Annotated[
        str | None, typer.Option(metavar="ID", help="The run id (default: a new random id).")
    ] = None,
    max_failures: Annotated[
        int | None,
        typer.Option(
            min=-1,
            metavar="N",
            help="Retry a failed attempt from the latest checkpoint up to N times (-1: no limit; "
            "default: no retry).",
        ),
    ] = None,
    resume: Annotated[
        str | None,
        typer.Option(
            metavar="RUN_ID",
            help="Continue this run from its log (its controller died); takes no TRAIN_FN.",
        ),
    ] = None,
    external_executor: Annotated[
        bool,
        typer.Option(
            "--external-executor",
            help="A standalone `wgstore executor` serves the store; do not run one here.",
        ),
    ] = False,
    quiet_workers: Annotated[
        bool,
        typer.Option(
            "--quiet-workers",
            help="Do not show what the train function prints (shown by default, each line "
            "prefixed by its rank; Ray's worker log files keep it either way).",
        ),
    ] = False,
) -> None:
    """Start TRAIN_FN on a worker group on Ray (RAY_ADDRESS, or a local Ray), record every step, and watch it.

    With --max-failures N a failed attempt is retried on a new group from the latest checkpoint
    (Ray Train's FailureConfig); --resume RUN_ID continues a run whose controller died.
    """
    if resume is not None and train_fn is not None:
        raise UsageProblem(
            f"--resume continues run {resume} with its own train function; drop TRAIN_FN"
        )
    if resume is None and train_fn is None:
        raise UsageProblem(
            "missing TRAIN_FN, e.g. `wgstore run examples.train:train_fn` (or --resume RUN_ID)"
        )
    if resume is not None:
        _refuse_new_run_options(ctx, resume)
        check_url(url)
        with opened(url) as store:  # a run id may be shortened, as everywhere
            resume = resolve_run(store, resume)
        _resume(url, resume, quiet_workers, external_executor)
        return
    assert train_fn is not None
    train_config = _check_run_inputs(url, train_fn, config, external_executor=external_executor)
    if run_id is not None:
        _check_new_run_id(url, run_id)
    from wgstore.orchestration import FailureConfig, WorkerGroupStartError, run_training
    from wgstore.orchestration.training import worker_resources

    quiet_ray()
    if not external_executor:  # with one, its job starts the workers and gets their output
        _start_ray(quiet_workers)
    resources = worker_resources(cpus_per_worker, gpus_per_worker)
    err_console().print(
        Text(
            f"starting {workers} worker(s) of {train_fn}, recording into {store_label(url)}",
            style="dim",
        )
    )
    failure_config = None if max_failures is None else FailureConfig(max_failures=max_failures)
    try:
        result = _follow(
            url,
            lambda on_update: run_training(
                url,
                train_fn,
                workers=workers,
                config=train_config,
                resources_per_worker=resources,
                poll_interval_s=poll_interval,
                run_id=run_id,
                external_executor=external_executor,
                on_update=on_update,
                failure_config=failure_config,
            ),
        )
    except WorkerGroupStartError as error:
        group_id = getattr(error, "group_id", None)
        if group_id:
            err_console().print(inspect_hint(group_id, url))
        raise
    _show_result(result, url, out_console())


def _check_new_run_id(url: str, run_id: str) -> None:
    from wgstore.events.streams import run_stream

    if not re.match(r"^[A-Za-z0-9_.-]{1,128}$", run_id):
        raise UsageProblem(
            f"--run-id must be 1-128 letters, digits, '_', '.' or '-', got {run_id!r}"
        )
    with opened(url) as store:
        if store.stream_version(run_stream(run_id)):
            raise UsageProblem(
                f"run {run_id} exists already; continue it with `wgstore run --resume {run_id}`, "
                "or choose another --run-id"
            )


def progress_line(state: WorkerGroupState) -> str:
    """One line of a running group: attempt, status, and per rank its reports and metrics."""
    head = f"attempt {state.attempt}: {state.status.value}" if state.attempt else state.status.value
    ranks = [
        f"rank {row['rank']} {row['status']}, {row['reports']} report(s)"
        + (f" {metrics_text(row['metrics'])}" if row["metrics"] else "")
        for row in worker_rows(state)
    ]
    return " | ".join([head, *ranks])


class _ProgressLines:
    """A progress line every ``every_s`` seconds when it changed: what a pipe or a log file
    gets instead of the live table (Rich draws that only on a terminal)."""

    def __init__(self, console: Any, every_s: float = PROGRESS_EVERY_S) -> None:
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


def _follow(url: str, call: Any) -> Any:
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


_NEW_RUN_OPTIONS = {
    "workers": "--workers",
    "config": "--config",
    "cpus_per_worker": "--cpus-per-worker",
    "gpus_per_worker": "--gpus-per-worker",
    "poll_interval": "--poll-interval",
    "run_id": "--run-id",
    "max_failures": "--max-failures",
}


def _refuse_new_run_options(ctx: typer.Context, resume: str) -> None:
    """A resumed run goes on as its log says (RunCreated): options that would shape a new run
    are refused, never silently ignored."""
    given = [
        flag
        for name, flag in _NEW_RUN_OPTIONS.items()
        if getattr(ctx.get_parameter_source(name), "name", "DEFAULT") != "DEFAULT"
    ]
    if given:
        raise UsageProblem(
            f"{', '.join(given)} cannot change run {resume}: a resumed run keeps the workers, "
            "config and failure policy its log recorded (RunCreated); drop "
            + ("it" if len(given) == 1 else "them")
        )


def _resume(url: str, run_id: str, quiet_workers: bool, external_executor: bool) -> None:
    from wgstore.orchestration import resume_run
    from wgstore.orchestration.controller import read_run
    from wgstore.orchestration.errors import RunLeaseHeldError, RunNotFoundError

    quiet_ray()
    with opened(url) as store:
        try:
            ended = read_run(store, run_id).ended
        except RunNotFoundError as error:
            raise CliError(str(error)) from None
    if not ended and not external_executor:  # an ended run is shown from the log alone
        _start_ray(quiet_workers)
    err_console().print(Text(f"resuming run {run_id} from {store_label(url)}", style="dim"))
    try:
        result = _follow(
            url,
            lambda on_update: resume_run(
                url,
                run_id,
                executor="external" if external_executor else None,
                on_update=on_update,
            ),
        )
    except (RunNotFoundError, RunLeaseHeldError) as error:
        raise CliError(str(error)) from None
    _show_result(result, url, out_console())


def _show_result(result: Any, url: str, console: Any) -> None:
    outcome = result.outcome
    console.print(
        f"worker group [bold]{result.group_id}[/] "
        f"{'was interrupted and shut down' if result.interrupted else 'ended'}: "
        f"{outcome.value if outcome else result.state.status.value}"
    )
    console.print(inspect_hint(result.group_id, url), highlight=False, markup=False)
    if result.run_id:
        run = result.run_state
        attempts = len(result.attempts)
        used = f", {run.failures} failure(s) retried or raised" if run and run.failures else ""
        console.print(
            f"run {result.run_id}: {run.status.value if run else ''}, {attempts} attempt(s){used}",
            highlight=False,
            markup=False,
        )
    if result.interrupted:
        raise typer.Exit(130)
    if result.state.error is not None:
        errors = result.state.errors
        where = f" on rank {min(errors)}" if errors else ""
        raise CliError(
            f"training errored{where}: {first_line(result.state.error)} "
            f"(the whole error: wgstore state {result.group_id[:8]} --errors"
            f"{'' if url == DEFAULT_URL else ' --url ...'})"
        )
