"""``wgstore serve``: the live web view of runs and groups, and ``/metrics`` (:mod:`wgstore.serve`).

Read-only: the store is opened read-only, and on PostgreSQL its sessions act as the store's
reader role, the one ``wgstore sql`` logs in as (``SELECT`` on the store and nothing else). Binds
127.0.0.1 by default; any other address needs a token (``--token`` or ``WGSTORE_SERVE_TOKEN``),
which every request must then carry.
"""

from __future__ import annotations

import errno
import ipaddress
import socket
from typing import Annotated

import typer

from wgstore.cli.common import (
    DEFAULT_URL,
    CliError,
    UrlOption,
    UsageProblem,
    check_url,
    err_console,
    open_store,
)
from wgstore.events.engine import mask_url, parse_url
from wgstore.serve import DEFAULT_PORT

__all__ = [
    "TOKEN_ENV",
    "allowed_hosts",
    "bind",
    "is_loopback",
    "serve_command",
    "served_at",
    "served_url",
]

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
        app = create_app(reader_url, token=token, store=store, allowed_hosts=allowed_hosts(host))
        sock = bind(host, port)
        try:
            err_console().print(
                f"serving {mask_url(url)} {how} at {served_at(host, port)}"
                + ("?token=..." if token else "")
                + " (Ctrl-C stops)"
            )
            uvicorn.Server(uvicorn.Config(app, log_level="warning")).run(sockets=[sock])
        finally:
            sock.close()
    finally:
        store.close()


def allowed_hosts(host: str) -> list[str] | None:
    """The ``Host`` names a server bound to ``host`` answers: on a loopback address the loopback
    names and the address itself (``127.0.0.2``), so a web page cannot reach it through a DNS
    name rebound to a loopback address; None (any) otherwise, where the token guards it."""
    if not is_loopback(host):
        return None
    bare = host.strip("[]")
    literal = f"[{bare}]" if ":" in bare else bare  # how an IPv6 address comes in a Host header
    return sorted({"127.0.0.1", "localhost", "[::1]", literal})


def served_at(host: str, port: int) -> str:
    """The URL a browser opens for a server bound to ``host``:``port`` (IPv6 in brackets)."""
    bare = host.strip("[]")
    return f"http://[{bare}]:{port}/" if ":" in bare else f"http://{bare}:{port}/"


def bind(host: str, port: int) -> socket.socket:
    """A listening socket on ``host``:``port``, bound before the server says where it serves.

    Raises:
        CliError: the address cannot be bound (in use, not an address of this machine, no such
            name), in one line (exit 1).
    """
    bare = host.strip("[]")
    try:
        family, kind, proto, _, address = socket.getaddrinfo(
            bare, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )[0]
    except socket.gaierror as error:
        raise CliError(f"cannot serve on {host}:{port}: {error.strerror}") from None
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
        sock.listen(2048)
    except OSError as error:
        sock.close()
        hint = "; choose another --port" if error.errno == errno.EADDRINUSE else ""
        raise CliError(f"cannot serve on {host}:{port}: {error.strerror}{hint}") from None
    return sock
