"""``wgstore run --resume RUN_ID``: continue a run whose controller died, watched as a new run is.

A resumed run goes on as its log says (``RunCreated``): the options that would shape a new run
are refused, never silently ignored.
"""

from __future__ import annotations

from typing import Literal

import typer

from wgstore.cli.common import UsageProblem, opened, store_label
from wgstore.cli.live_run import drive

__all__ = ["refuse_new_run_options", "resume_watched"]

_KEPT_ON_RESUME = {"train_fn", "url", "resume", "external_executor", "quiet_workers"}
"""The options a resumed run takes; the others (``--workers`` ...) would shape a new run."""


def refuse_new_run_options(ctx: typer.Context, resume: str) -> None:
    """A resumed run goes on as its log says (RunCreated): options that would shape a new run
    are refused, never silently ignored."""
    given = [
        "--" + name.replace("_", "-")
        for name in (param.name or "" for param in ctx.command.params)  # in declared order
        if name not in _KEPT_ON_RESUME
        and getattr(ctx.get_parameter_source(name), "name", "DEFAULT") != "DEFAULT"
    ]
    if given:
        raise UsageProblem(
            f"{', '.join(given)} cannot change run {resume}: a resumed run keeps the workers, "
            "config and failure policy its log recorded (RunCreated); drop "
            + ("it" if len(given) == 1 else "them")
        )


def resume_watched(url: str, run_id: str, quiet_workers: bool, external_executor: bool) -> None:
    """Continue ``run_id`` (its controller died), watched as a new run is."""
    from wgstore.orchestration import resume_run
    from wgstore.orchestration.run.controller import read_run

    with opened(url) as store:
        ended = read_run(store, run_id).ended  # RunNotFoundError: one line, exit 1
    executor: Literal["external"] | None = "external" if external_executor else None
    drive(
        url,
        lambda on_update: resume_run(url, run_id, executor=executor, on_update=on_update),
        start_ray=not ended and not external_executor,  # an ended run is shown from the log
        quiet_workers=quiet_workers,
        message=f"resuming run {run_id} from {store_label(url)}",
    )
