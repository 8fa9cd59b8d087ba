"""A PostgreSQL server of one's own: a temporary folder, a free port, settings of one's choosing.

For what the shared server on 5432 must not be used for: stopping and starting it
(tests/events/test_private_server.py), or loading an extension through
``shared_preload_libraries`` (bench/pg_profile.py's ``pg_stat_statements``). ``initdb`` and
``pg_ctl`` refuse root, so they run as the ``postgres`` OS user (``runuser``); the folder is
removed afterwards.
"""

from __future__ import annotations

import contextlib
import glob
import os
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field


@dataclass
class PrivateServer:
    """A PostgreSQL server owned by its caller: its URL, and stop/start."""

    bin_dir: str
    folder: str
    port: int
    settings: dict[str, str] = field(default_factory=dict)

    @property
    def url(self) -> str:
        """The SQLAlchemy URL of its ``postgres`` database."""
        return f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/postgres?connect_timeout=5"

    @property
    def conninfo(self) -> str:
        """The same, for psycopg."""
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    @property
    def data(self) -> str:
        return os.path.join(self.folder, "data")

    def pg_ctl(self, *args: str) -> None:
        subprocess.run(
            ["runuser", "-u", "postgres", "--", f"{self.bin_dir}/pg_ctl", "-D", self.data, *args],
            check=True,
            capture_output=True,
            timeout=120,
        )

    def start(self) -> None:
        options = f"-p {self.port} -k {self.folder} -c listen_addresses=127.0.0.1"
        options += "".join(f" -c {name}={value}" for name, value in self.settings.items())
        self.pg_ctl("-o", options, "-l", os.path.join(self.folder, "log"), "-w", "start")

    def stop(self) -> None:
        self.pg_ctl("-m", "fast", "-w", "stop")


def unavailable() -> str | None:
    """Why a private server cannot be started here, or None when it can."""
    if not glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"):
        return "no PostgreSQL installation under /usr/lib/postgresql"
    if os.geteuid() != 0 or shutil.which("runuser") is None:
        return "initdb and pg_ctl must run as the postgres user: needs root and runuser"
    return None


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@contextlib.contextmanager
def private_server(settings: dict[str, str] | None = None) -> Iterator[PrivateServer]:
    """A new server (``initdb``, then started with ``settings`` as ``-c`` options), stopped
    (``immediate``) and removed on exit."""
    problem = unavailable()
    if problem is not None:
        raise RuntimeError(f"cannot start a private PostgreSQL server: {problem}")
    bin_dir = os.path.dirname(sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"))[-1])
    folder = tempfile.mkdtemp(prefix="wgstore-private-pg-")
    try:
        shutil.chown(folder, "postgres")
        subprocess.run(
            ["runuser", "-u", "postgres", "--", f"{bin_dir}/initdb", "-D", f"{folder}/data",
             "-U", "postgres", "--auth=trust", "-E", "UTF8", "--no-sync"],
            check=True, capture_output=True, timeout=300,
        )  # fmt: skip
        server = PrivateServer(bin_dir, folder, _free_port(), dict(settings or {}))
        server.start()
        try:
            yield server
        finally:
            with contextlib.suppress(subprocess.CalledProcessError):  # already stopped
                server.pg_ctl("-m", "immediate", "-w", "stop")
    finally:
        shutil.rmtree(folder, ignore_errors=True)
