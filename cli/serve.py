"""``wgstore serve``: the live web view of runs and groups, and ``/metrics`` (:mod:`wgstore.serve`).

Read-only: the store is opened read-only. Binds 127.0.0.1 by default; any other address needs a
token (``--token`` or ``WGSTORE_SERVE_TOKEN``), which every request must then carry.
"""

from __future__ import annotations

import ipaddress
from typing import Annotated

import typer

from wgstore.cli.common import DEFAULT_URL, UrlOption, UsageProblem, err_console, open_store
from wgstore.events.engine import mask_url
from wgstore.serve import DEFAULT_PORT

__all__ = ["TOKEN_ENV", "is_loopback", "serve_command"]

TOKEN_ENV = "WGSTORE_SERVE_TOKEN"
MIN_TOKEN = 16


def is_loopback(host: str) -> bool:
    """True for ``localhost`` and loopback addresses (127.0.0.0/8, ::1)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def serve_command(
    url: UrlOption = DEFAULT_URL,
    host: Annotated[
        str, typer.Option(help="The address to bind; anything but loopback needs --token.")
    ] = "127.0.0.1",
    port: Annotated[
        int,
        typer.Option(
            min=1, max=65535, help="The port (default 8275: next to Ray's dashboard on 8265)."
        ),
    ] = DEFAULT_PORT,
    token: Annotated[
        str | None,
        typer.Option(
            envvar=TOKEN_ENV,
            show_envvar=True,
            help="Require this token on every request (?token=... once in a browser, or "
            "Authorization: Bearer ...). Needed to bind a non-loopback address.",
        ),
    ] = None,
) -> None:
    """Serve a live, read-only web view of the runs, groups and log, and Prometheus /metrics.

    Pages update as events are appended (server-sent events); the same data is JSON under /api.
    """
    if token is not None and len(token) < MIN_TOKEN:
        raise UsageProblem(
            f"--token is {len(token)} characters; use at least {MIN_TOKEN} "
            "(e.g. `python -c 'import secrets; print(secrets.token_urlsafe(24))'`)"
        )
    if not is_loopback(host) and not token:
        raise UsageProblem(
            f"binding {host} exposes the log beyond this machine: give --token (or "
            f"{TOKEN_ENV}), or bind 127.0.0.1 and reach it through an SSH tunnel"
        )
    try:
        import uvicorn

        from wgstore.serve.app import create_app
    except ImportError as error:
        raise UsageProblem(
            f"wgstore serve needs the serve extra ({error.name} is missing): "
            "pip install 'wgstore[serve]'"
        ) from None
    store = open_store(url)  # read-only; a bad URL or an unreachable store fails here
    try:
        loopback = ["127.0.0.1", "localhost", "::1", "[::1]"] if is_loopback(host) else None
        app = create_app(url, token=token, store=store, allowed_hosts=loopback)
        shown = "localhost" if is_loopback(host) else host
        err_console().print(
            f"serving {mask_url(url)} read-only at http://{shown}:{port}/"
            + ("?token=..." if token else "")
            + " (Ctrl-C stops)"
        )
        uvicorn.run(app, host=host, port=port, log_level="warning")
    finally:
        store.close()
