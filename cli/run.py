"""``wgstore run``: start a worker group on Ray and watch it.

Calls :func:`wgstore.orchestration.run_training` (or, with ``--resume``,
:func:`~wgstore.orchestration.resume_run`) after the checks of
:mod:`wgstore.orchestration.run.inputs`, and draws its live table from the states that function
hands back (:mod:`wgstore.cli.live_run`; ``wgstore executor`` is in :mod:`wgstore.cli.executor`).
What the train function prints shows too, as Ray shows it: each line prefixed by its rank.
"""

from __future__ import annotations

import os
from typing import Annotated, Any

import typer

from wgstore.cli.common import (
    DEFAULT_URL,
    UrlOption,
    UsageProblem,
    check_url,
    opened,
    resolve_run,
    store_label,
)
from wgstore.cli.live_run import drive
from wgstore.cli.run_resume import refuse_new_run_options, resume_watched

__all__ = ["run_command"]


def _check_run_inputs(
    url: str, train_fn: str, config: str | None, run_id: str | None, *, external_executor: bool
) -> dict[str, Any]:
    """Everything ``run`` can check before Ray starts: URL, train_fn (its form, then that it
    imports), config, the store, a new run's id; returns the train function's config."""
    from wgstore.orchestration.errors import TrainFnError
    from wgstore.orchestration.run.inputs import check_new_run_id, check_run_inputs

    check_url(url)
    try:
        train_config = check_run_inputs(
            train_fn, config, folder=os.getcwd(), external_executor=external_executor
        )
    except TrainFnError as error:
        raise UsageProblem(str(error)) from None
    with opened(url, read_only=False, migrate=True) as store:  # migrated before Ray starts
        if run_id is not None:
            check_new_run_id(store, run_id)
    return train_config


def run_command(
    ctx: typer.Context,
    train_fn: Annotated[
        str | None,
        typer.Argument(help='The train function, "package.module:function" (not with --resume).'),
    ] = None,
    url: UrlOption = DEFAULT_URL,
    workers: Annotated[
        str,
        typer.Option(
            "--workers",
            "-n",
            metavar="N|MIN..MAX",
            help="How many workers; MIN..MAX (2..4) for an elastic run, started at what fits and "
            "resized as the cluster changes.",
        ),
    ] = "4",
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
    resize_interval: Annotated[
        float,
        typer.Option(
            min=0,
            metavar="SECONDS",
            help="Elastic runs: look for a better size this often (Ray Train's "
            "elastic_resize_monitor_interval_s).",
        ),
    ] = 60.0,
    min_workers_timeout: Annotated[
        float,
        typer.Option(
            min=0,
            metavar="SECONDS",
            help="Elastic runs: wait this long for MIN workers to fit, then end the run errored.",
        ),
    ] = 600.0,
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
        refuse_new_run_options(ctx, resume)
        check_url(url)
        with opened(url) as store:  # a run id may be shortened, as everywhere
            resume = resolve_run(store, resume)
        resume_watched(url, resume, quiet_workers, external_executor)
        return
    assert train_fn is not None
    from wgstore.events import InvalidArgumentError
    from wgstore.orchestration.run.inputs import parse_workers

    try:
        sizes = parse_workers(workers)
    except InvalidArgumentError as error:
        raise UsageProblem(str(error)) from None
    train_config = _check_run_inputs(
        url, train_fn, config, run_id, external_executor=external_executor
    )
    from wgstore.orchestration import FailureConfig, run_training
    from wgstore.orchestration.run.training import worker_resources

    resources = worker_resources(cpus_per_worker, gpus_per_worker)
    failure_config = None if max_failures is None else FailureConfig(max_failures=max_failures)
    drive(
        url,
        lambda on_update: run_training(
            url,
            train_fn,
            workers=sizes,
            config=train_config,
            resources_per_worker=resources,
            poll_interval_s=poll_interval,
            run_id=run_id,
            external_executor=external_executor,
            on_update=on_update,
            failure_config=failure_config,
            resize_interval_s=resize_interval,
            min_workers_timeout_s=min_workers_timeout,
        ),
        start_ray=not external_executor,  # with one, its job starts the workers and gets output
        quiet_workers=quiet_workers,
        message=f"starting {workers} worker(s) of {train_fn}, recording into {store_label(url)}",
    )
