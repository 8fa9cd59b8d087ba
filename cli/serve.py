"""``wgstore serve``: the live web view of runs and groups, and ``/metrics`` (:mod:`wgstore.serve`).

Read-only: the store is opened read-only, and on PostgreSQL its sessions act as the store's
reader role, the one ``wgstore sql`` logs in as (``SELECT`` on the store and nothing else). Binds
127.0.0.1 by default; any other address needs a token (``--token`` or ``WGSTORE_SERVE_TOKEN``),
which every request must then carry.
"""

from __future__ import annotations

import ipaddress
from typing import Annotated

import typer

from wgstore.cli.common import (
    DEFAULT_URL,
    UrlOption,
    UsageProblem,
    check_url,
    err_console,
    open_store,
)
from wgstore.events.engine import mask_url, parse_url
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


def served_url(url: str) -> tuple[str, str]:
    """The URL the server reads with, and how it reads (for its start line).

    PostgreSQL: the store's reader role, switched to at every login
    (:func:`~wgstore.events.sql_reader.as_reader_session`); where the URL's user may not prepare
    it, the URL itself, with read-only transactions, and a warning. SQLite: the URL (the file is
    opened read-only).
    """
    if parse_url(url).get_backend_name() != "postgresql":
        return url, "read-only"
    from wgstore.events.sql_reader import ReaderUnavailableError, as_reader_session

    try:
        reader_url, reader = as_reader_session(url)
    except ReaderUnavailableError as error:
        err_console().print(
            f"[yellow]warning:[/] {error}\nserving with read-only transactions as the URL's user"
        )
        return url, "read-only"
    return reader_url, f"read-only as role {reader.name}"


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
    check_url(url)
    reader_url, how = served_url(url)  # an unreachable or unmigrated store fails here
    store = open_store(reader_url)
    try:
        loopback = ["127.0.0.1", "localhost", "::1", "[::1]"] if is_loopback(host) else None
        app = create_app(reader_url, token=token, store=store, allowed_hosts=loopback)
        shown = "localhost" if is_loopback(host) else host
        err_console().print(
            f"serving {mask_url(url)} {how} at http://{shown}:{port}/"
            + ("?token=..." if token else "")
            + " (Ctrl-C stops)"
        )
        uvicorn.run(app, host=host, port=port, log_level="warning")
    finally:
        store.close()
