"""A TCP relay in front of the PostgreSQL server, for tests of a database that goes away: cut it
and every connection through it drops and new ones are refused; restore it and they work again.
The shared server itself is never stopped."""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Iterator

import pytest
from sqlalchemy.engine import make_url


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
