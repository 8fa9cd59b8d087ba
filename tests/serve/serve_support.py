"""Helpers of the serve tests: the app served by a real uvicorn, a client of its event stream,
waiting with a deadline."""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

__all__ = ["StreamClient", "live_server", "wait_for"]


@contextmanager
def live_server(app: Any) -> Iterator[str]:
    """Serve ``app`` with uvicorn on a free loopback port in a thread; yield its base URL."""
    import uvicorn

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", timeout_graceful_shutdown=2))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 60
    while not server.started:
        assert thread.is_alive(), "uvicorn stopped while starting"
        assert time.monotonic() < deadline, "uvicorn did not start within 60 s"
        time.sleep(0.05)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        follower = getattr(app.state, "follower", None)
        if follower is not None:
            follower.close_streams()  # uvicorn in a thread: sse-starlette sees no signal
        server.should_exit = True
        thread.join(timeout=30)
        sock.close()


def wait_for(condition: Any, what: str, timeout_s: float = 30.0) -> Any:
    """Poll ``condition()`` until it is truthy (returned) or fail after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"{what}: not within {timeout_s} s")
        time.sleep(0.05)


class StreamClient:
    """A client of ``/api/stream`` in a thread of its own: every message it is sent, in order,
    as ``(kind, data)``. It reads until the server ends the stream (``live_server`` does when
    it stops)."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.messages: list[tuple[str, dict[str, Any]]] = []
        self.status_code: int | None = None
        self.error: str | None = None
        """The body of an answer other than 200."""
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        import httpx

        with httpx.Client(timeout=60) as http, http.stream("GET", self.url) as response:
            self.status_code = response.status_code
            if response.status_code != 200:
                self.error = response.read().decode()
                return
            kind = ""
            for line in response.iter_lines():
                if line.startswith("event: "):
                    kind = line[7:]
                elif line.startswith("data: "):
                    self.messages.append((kind, json.loads(line[6:])))

    def kinds(self, kind: str) -> list[dict[str, Any]]:
        """The messages of ``kind`` so far."""
        return [data for k, data in list(self.messages) if k == kind]

    def listed(self) -> list[dict[str, Any]]:
        """Every event listed by the ``append`` messages so far."""
        return [event for message in self.kinds("append") for event in message["events"]]

    def heads(self) -> int:
        """The newest head any message carried (0 before the first)."""
        return max((int(data.get("head", 0)) for _, data in list(self.messages)), default=0)

    def answered(self) -> bool:
        """True once the server answered: an error, or the stream's first message."""
        return self.error is not None or bool(self.messages)
