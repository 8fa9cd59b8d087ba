"""``wgstore serve`` on the command line: what it refuses (one line, no traceback), and a real
server process that answers and stops cleanly on Ctrl-C."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from serve_scenarios import live_run
from typer.testing import CliRunner

from tests.cli.conftest import make_reader
from tests.waiting import wait_until
from wgstore.cli import app
from wgstore.cli.serve import allowed_hosts, is_loopback, served_at, served_url
from wgstore.events import EventStore

TOKEN = "command-line-token-0123456789"


def _cli(*args: str, env: dict[str, str] | None = None) -> Any:
    return CliRunner().invoke(app, list(args), env=env, catch_exceptions=False)


@pytest.mark.parametrize(
    ("args", "env", "says"),
    [
        (["--host", "0.0.0.0"], {}, "binding 0.0.0.0 exposes the log beyond this machine"),
        (["--host", "10.1.2.3"], {}, "give --token (or WGSTORE_SERVE_TOKEN)"),
        (["--token", "short"], {}, "--token is 5 characters; use at least 16"),
        (["--host", "0.0.0.0"], {"WGSTORE_SERVE_TOKEN": "tiny"}, "--token is 4 characters"),
    ],
)
def test_a_non_loopback_address_needs_a_real_token(
    tmp_path: Path, args: list[str], env: dict[str, str], says: str
) -> None:
    result = _cli("serve", "--url", f"sqlite:///{tmp_path / 'w.db'}", *args, env=env)
    assert result.exit_code == 2
    assert says in result.stderr
    assert "Traceback" not in result.stderr


def test_a_missing_store_is_one_line_not_a_traceback(tmp_path: Path) -> None:
    result = _cli("serve", "--url", f"sqlite:///{tmp_path / 'missing.db'}")
    assert result.exit_code == 1
    assert "Traceback" not in result.stderr
    assert "missing.db" in result.stderr


@pytest.mark.parametrize(
    ("host", "loopback"),
    [("127.0.0.1", True), ("127.9.9.9", True), ("::1", True), ("localhost", True),
     ("0.0.0.0", False), ("::", False), ("192.168.1.5", False), ("example.org", False)],
)  # fmt: skip
def test_loopback_addresses(host: str, loopback: bool) -> None:
    assert is_loopback(host) is loopback


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_the_command_serves_and_stops_on_ctrl_c(store_url: str) -> None:
    with EventStore.open(store_url) as store:
        live_run(store, "run-cli1")
    make_reader(store_url)  # `wgstore db reader`: serve reads as the role, never makes it
    port = _free_port()
    wgstore = Path(sys.executable).with_name("wgstore")
    env = {**os.environ, "WGSTORE_SERVE_TOKEN": TOKEN}
    process = subprocess.Popen(
        [str(wgstore), "serve", "--url", store_url, "--port", str(port)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        deadline = time.monotonic() + 60
        answer = None
        while answer is None:
            assert process.poll() is None, process.communicate()[1]
            assert time.monotonic() < deadline, "wgstore serve did not answer within 60 s"
            try:
                answer = httpx.get(
                    f"http://127.0.0.1:{port}/api/runs",
                    headers={"Authorization": f"Bearer {TOKEN}"},
                    timeout=5,
                )
            except httpx.TransportError:
                time.sleep(0.1)
        assert answer.status_code == 200
        assert [r["run_id"] for r in answer.json()["runs"]] == ["run-cli1"]
        assert httpx.get(f"http://127.0.0.1:{port}/api/runs", timeout=5).status_code == 401
        # a page following the log must not keep the server from stopping
        with httpx.stream(
            "GET",
            f"http://127.0.0.1:{port}/api/stream",
            headers={"Authorization": f"Bearer {TOKEN}"},
            timeout=30,
        ) as stream:
            first = next(stream.iter_lines())
            assert first == "event: status"
            process.send_signal(signal.SIGINT)
            _, stderr = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
    assert process.returncode in (0, 130), stderr
    assert "Traceback" not in stderr
    assert f"at http://127.0.0.1:{port}/?token=..." in stderr
    if store_url.startswith("postgresql"):  # it read as the reader role wgstore sql uses
        assert "read-only as role wgstore_reader_" in stderr


def test_on_postgres_the_server_reads_as_the_reader_role_and_cannot_write(pg_url: str) -> None:
    import sqlalchemy as sa

    with EventStore.open(pg_url) as store:
        live_run(store, "run-role")
    make_reader(pg_url)
    reader_url, how = served_url(pg_url)
    assert how.startswith("read-only as role wgstore_reader_")
    with EventStore.open(reader_url, read_only=True, migrate=False) as store:
        assert store.head() > 0  # it reads
        with store.engine.connect() as connection:
            user = connection.execute(sa.text("SELECT current_user")).scalar_one()
            assert how.endswith(user)
        with store.engine.connect() as connection:
            # past the read-only transaction too: the role itself may not write
            connection.execute(sa.text("SET TRANSACTION READ WRITE"))
            with pytest.raises(sa.exc.ProgrammingError, match="permission denied"):
                connection.execute(sa.text("DELETE FROM wg_blobs"))


def test_on_sqlite_the_url_is_served_as_given(sqlite_url: str) -> None:
    assert served_url(sqlite_url) == (sqlite_url, "read-only")


@pytest.mark.parametrize(
    ("host", "url", "hosts"),
    [("127.0.0.1", "http://127.0.0.1:8275/", ["127.0.0.1", "[::1]", "localhost"]),
     ("127.0.0.2", "http://127.0.0.2:8275/", ["127.0.0.1", "127.0.0.2", "[::1]", "localhost"]),
     ("::1", "http://[::1]:8275/", ["127.0.0.1", "[::1]", "localhost"]),
     ("localhost", "http://localhost:8275/", ["127.0.0.1", "[::1]", "localhost"]),
     ("0.0.0.0", "http://0.0.0.0:8275/", None)],
)  # fmt: skip
def test_the_server_answers_the_address_it_binds_and_says_it(
    host: str, url: str, hosts: list[str] | None
) -> None:
    assert served_at(host, 8275) == url
    assert allowed_hosts(host) == hosts


def test_a_port_in_use_is_one_line_and_nothing_claims_to_serve(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'w.db'}"
    EventStore.open(url).close()
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = _cli("serve", "--url", url, "--port", str(port))
    assert result.exit_code == 1
    assert f"cannot serve on 127.0.0.1:{port}: Address already in use" in result.stderr
    assert "serving" not in result.stderr
    assert "Traceback" not in result.stderr


def test_a_loopback_address_other_than_127_0_0_1_is_served_once_bound(sqlite_url: str) -> None:
    """``--host 127.0.0.2``: the start line names that address, and is printed once the socket
    listens (a request sent right after it is answered, no retry), and requests to it pass the
    Host check (they used to get 400 "Invalid host header"; issue 41, item 9)."""
    with EventStore.open(sqlite_url) as store:
        live_run(store, "run-host2")
    port = _free_port()
    wgstore = Path(sys.executable).with_name("wgstore")
    process = subprocess.Popen(
        [str(wgstore), "serve", "--url", sqlite_url, "--host", "127.0.0.2", "--port", str(port)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(iter(process.stderr.readline, "")))
    reader.start()
    try:
        wait_until(
            lambda: any("serving" in line for line in lines) or process.poll() is not None,
            timeout_s=60,
            what="wgstore serve's start line",
        )
        assert process.poll() is None, "".join(lines)
        (start,) = [line for line in lines if "serving" in line]
        assert f"at http://127.0.0.2:{port}/ (Ctrl-C stops)" in start
        answer = httpx.get(f"http://127.0.0.2:{port}/api/runs", timeout=30)
        assert answer.status_code == 200, answer.text
        assert [r["run_id"] for r in answer.json()["runs"]] == ["run-host2"]
        renamed = httpx.get(
            f"http://127.0.0.2:{port}/api/runs", headers={"Host": "evil.example"}, timeout=30
        )
        assert renamed.status_code == 400  # a rebound DNS name is still refused
        process.send_signal(signal.SIGINT)
        process.wait(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        reader.join(timeout=30)
    assert "Traceback" not in "".join(lines)
