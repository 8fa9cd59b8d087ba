"""``wgstore executor``: a standalone executor serving the store until SIGINT or SIGTERM.

Calls :func:`wgstore.orchestration.run_executor` in a thread and stops it on a signal or after
``--stop-after``.
"""

from __future__ import annotations

import signal
import threading
import time
from typing import Annotated, Any

import typer

from wgstore.cli.common import (
    DEFAULT_URL,
    UrlOption,
    check_url,
    err_console,
    parse_duration,
    store_label,
)
from wgstore.orchestration.runtimes.quiet_ray import quiet_ray

__all__ = ["executor_command"]


def executor_command(
    url: UrlOption = DEFAULT_URL,
    ray_address: Annotated[
        str | None,
        typer.Option(
            envvar="RAY_ADDRESS",
            metavar="ADDRESS",
            help="The Ray cluster to join (default: a local Ray).",
        ),
    ] = None,
    release_orphans: Annotated[
        bool, typer.Option(help="Release wgstore-* Ray resources that no live group owns.")
    ] = True,
    stop_after: Annotated[
        str | None,
        typer.Option(
            metavar="DURATION", help="Stop after this long (e.g. 10m); default: SIGINT/SIGTERM."
        ),
    ] = None,
) -> None:
    """Run a standalone executor: carry out the commands the log asks for, on Ray, until stopped."""
    from wgstore.orchestration import run_executor
    from wgstore.orchestration.runtimes.ray_resources import ensure_ray

    check_url(url)
    quiet_ray()
    # Join Ray here, in the main thread, before our signal handlers go in. Ray's core worker
    # installs a native (absl) failure handler for SIGTERM; installed after ours, it takes the
    # signal first and symbolizes a stack trace inside the handler, which aborted the process
    # ("corrupted size vs. prev_size") instead of letting the executor stop cleanly.
    ensure_ray(ray_address)
    limit = parse_duration(stop_after).total_seconds() if stop_after else None
    stop = threading.Event()
    outcome: dict[str, Any] = {}

    def serve() -> None:
        try:
            run_executor(url, stop, ray_address=ray_address, release_orphans=release_orphans)
        except BaseException as error:  # noqa: BLE001 - reported by the main thread
            outcome["error"] = error
        finally:
            stop.set()

    previous = {}
    if threading.current_thread() is threading.main_thread():
        for signum in (signal.SIGINT, signal.SIGTERM):
            previous[signum] = signal.signal(signum, lambda *_: stop.set())
    thread = threading.Thread(target=serve, name="wgstore-executor", daemon=True)
    err_console().print(f"executor serving {store_label(url)}; Ctrl-C or SIGTERM stops it")
    deadline = None if limit is None else time.monotonic() + limit
    try:
        thread.start()
        while not stop.wait(0.2):
            if deadline is not None and time.monotonic() >= deadline:
                stop.set()
        thread.join(timeout=60)
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
    if "error" in outcome:
        raise outcome["error"]
    err_console().print("executor stopped")
