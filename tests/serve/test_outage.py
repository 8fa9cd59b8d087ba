"""A database that goes away: the open page shows a banner, the API answers 503, and both recover
when it is back. PostgreSQL reached through a TCP relay the test cuts and restores (the shared
server itself is never stopped)."""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from serve_scenarios import live_run, new_run
from serve_support import live_server, wait_for
from sqlalchemy.engine import make_url

from wgstore.events import EventStore
from wgstore.serve.app import create_app

WAIT_MS = 60_000


class Relay:
    """Forwards a loopback port to the Postgres server; :meth:`cut` drops every connection and
    refuses new ones, :meth:`restore` listens again on the same port."""

    def __init__(self, target: tuple[str, int]) -> None:
        self.target = target
        self.port = 0
        self._listener: socket.socket | None = None
        self._open: list[socket.socket] = []
        self._lock = threading.Lock()

    def restore(self) -> None:
        listener = socket.socket()
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", self.port))
        listener.listen(32)
        self.port = listener.getsockname()[1]
        self._listener = listener
        threading.Thread(target=self._accept, args=(listener,), daemon=True).start()

    def cut(self) -> None:
        if self._listener is not None:
            with contextlib.suppress(OSError):
                self._listener.shutdown(socket.SHUT_RDWR)
            self._listener.close()
            self._listener = None
        with self._lock:
            sockets, self._open = self._open, []
        for sock in sockets:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return
            try:
                server = socket.create_connection(self.target)
            except OSError:
                client.close()
                continue
            with self._lock:
                self._open += [client, server]
            for source, sink in ((client, server), (server, client)):
                threading.Thread(target=_pump, args=(source, sink), daemon=True).start()


def _pump(source: socket.socket, sink: socket.socket) -> None:
    with contextlib.suppress(OSError):
        while data := source.recv(65536):
            sink.sendall(data)
    for sock in (source, sink):
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)


@pytest.fixture
def relayed(pg_url: str) -> Iterator[tuple[str, Relay]]:
    """``pg_url`` and the same database reached through a :class:`Relay`."""
    url = make_url(pg_url)
    relay = Relay((url.host or "127.0.0.1", url.port or 5432))
    relay.restore()
    try:
        yield (
            url.set(host="127.0.0.1", port=relay.port).render_as_string(hide_password=False),
            relay,
        )
    finally:
        relay.cut()


def test_the_page_shows_a_banner_while_the_database_is_away_and_recovers(
    relayed: tuple[str, Relay], pg_url: str, tmp_path: Any
) -> None:
    from test_browser import CHROMIUM_FLAGS, chromium_binary

    sync_api = pytest.importorskip("playwright.sync_api")
    relay_url, relay = relayed
    with EventStore.open(pg_url) as writer:
        live_run(writer, "run-before")
        app = create_app(relay_url, follower_wait_s=0.5)
        with live_server(app) as base, sync_api.sync_playwright() as playwright:
            browser = playwright.chromium.launch(
                executable_path=chromium_binary(), args=CHROMIUM_FLAGS, headless=True
            )
            try:
                page = browser.new_page()
                page.goto(base + "/")
                page.wait_for_selector("a[href='/runs/run-before']", timeout=WAIT_MS)
                banner = page.locator("#banner")
                assert banner.is_hidden()
                relay.cut()
                banner.wait_for(state="visible", timeout=WAIT_MS)
                assert "The store is unavailable" in banner.inner_text()
                page.screenshot(path=str(tmp_path / "outage.png"), full_page=True)
                import httpx

                down = httpx.get(base + "/api/runs", timeout=60)
                assert down.status_code == 503
                assert "unavailable" in down.json()["error"]
                new_run(writer, "run-during", "appended-while-away")  # the writer is not cut
                relay.restore()
                banner.wait_for(state="hidden", timeout=WAIT_MS)
                page.wait_for_selector("a[href='/runs/run-during']", timeout=WAIT_MS)
                wait_for(
                    lambda: httpx.get(base + "/api/runs", timeout=60).status_code == 200,
                    "the API answering again",
                )
                page.screenshot(path=str(tmp_path / "recovered.png"), full_page=True)
            finally:
                browser.close()
