"""What ``wgstore serve`` costs: append -> visible in an open page, a ``/metrics`` scrape, a big
run's pages, and the cost of open pages to appends.

1. **Append -> visible**: ``wgstore serve`` runs as its own process; headless Chromium (Debian's,
   driven by Playwright) has a run's page open. Each of ``--appends`` appends (one
   ``WorkerReported`` of rank 0, from this process) waits until the page's loss chart holds the
   new point; a MutationObserver in the page stamps the moment (``Date.now()``), compared with the
   wall clock just before the append (same machine, same clock). p50 / p99 / max in ms.
2. **/metrics scrape** with ``--runs`` runs in the log (90 % finished, 10 % running, each run 2
   workers x 3 reports): the median and max of ``--scrapes`` scrapes with the read models
   current (the scrape reads them), lagging (one report of each running run not yet projected:
   those are folded again) and never caught up (the scrape folds the log).

3. **A big run** (``--part big``): a run of ``--events`` events (default 100,000: 2 ranks x
   50,000 reports, appended in batches of 1,000): the run page's first byte, ``/api/runs/<id>``
   and ``/api/groups/<id>`` (first byte and whole answer), and each page fully drawn in Chromium
   (from ``goto`` to its chart or table on screen); with the read models never caught up, then
   caught up and one report behind. One report is appended before each request, so no answer is
   shared from the server's cache.
4. **Live pages without a browser** (``--part clients``): ``--clients`` run pages (what
   live.js does: the run fetched, then an ``/api/stream`` connection watching the run and its
   attempt's group, and ``/api/runs/<id>?head=N`` refetched on each append to them, one fetch
   at a time, coalescing appends that come faster) as plain asyncio HTTP/1.1 clients in one
   process at ``nice 19``. A check first (each page fetches
   once per append when appends wait for the pages), then ``--rounds`` pairs of bursts of
   ``--burst`` single appends, without and with the pages, the order alternating: the median
   and spread of each pair's cost to appends, and the server's CPU per append (``/proc``,
   until the pages have caught up), for appends to the run the pages show and for
   bench/store.py's W1 (50 other streams).
5. **A big run's page in process** (``--part series``): ``state_and_series`` of its group and
   ``serve.views.run_page``, ``--repeats`` times on a read-only store with the read models caught
   up: this process's CPU, the Postgres server's CPU for the reader's connections, and wall.
   ``--url`` reuses a store that holds the run ``--run-id`` (built there when missing).

    .venv/bin/python bench/serve.py                        # both backends
    .venv/bin/python bench/serve.py --backend sqlite --appends 50 --runs 200
    .venv/bin/python bench/serve.py --json
    .venv/bin/python bench/serve.py --part big --events 100000
    .venv/bin/python bench/serve.py --backend sqlite --part clients --clients 50 --burst 100 --rounds 20
    .venv/bin/python bench/serve.py --backend sqlite --part series --url sqlite:///big.db --run-id big

Postgres: ``WGSTORE_BENCH_PG_URL`` (default ``postgresql+psycopg://postgres@127.0.0.1:5432/test``),
one fresh schema per run, dropped afterwards. Numbers, not pass/fail.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import httpx
import sqlalchemy as sa

from wgstore.events import EventStore
from wgstore.events.run import (
    ControllerStarted,
    ControllerStateChanged,
    FailureConfig,
    RunCreated,
    RunFinished,
    ScalingConfig,
)
from wgstore.events.streams import group_stream, run_stream
from wgstore.events.worker_group import (
    PlacementGroupReserved,
    SyncActorStarted,
    TrainingLaunched,
    WorkerGroupContext,
    WorkerGroupShutDown,
    WorkerGroupShutdownRequested,
    WorkerGroupStarted,
    WorkerGroupStartRequested,
    WorkerInfo,
    WorkerReported,
    WorkersStarted,
)
from wgstore.projections import catch_up_read_models
from wgstore.serve.interest import EVERYTHING, Interest

PG_URL = os.environ.get("WGSTORE_BENCH_PG_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test")
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
WORKERS = 2


@contextmanager
def _sqlite_url() -> Iterator[str]:
    with tempfile.TemporaryDirectory() as folder:
        yield f"sqlite:///{Path(folder) / 'bench.db'}"


@contextmanager
def _postgres_url() -> Iterator[str]:
    import psycopg

    schema = f"wgbench_{uuid.uuid4().hex[:10]}"
    admin = PG_URL.replace("postgresql+psycopg://", "postgresql://")
    with psycopg.connect(admin, autocommit=True) as connection:
        connection.execute(f"CREATE SCHEMA {schema}")
    try:
        sep = "&" if "?" in PG_URL else "?"
        yield f"{PG_URL}{sep}options=-csearch_path%3D{schema}"
    finally:
        with psycopg.connect(admin, autocommit=True) as connection:
            connection.execute(f"DROP SCHEMA {schema} CASCADE")


def _context() -> WorkerGroupContext:
    return WorkerGroupContext(
        num_workers=WORKERS, resources_per_worker={"CPU": 1.0}, train_fn="examples.train:train_fn"
    )


def record_run(store: EventStore, run_id: str, *, reports: int, finished: bool) -> str:
    """A wgstore run with one attempt of 2 workers reporting ``reports`` steps; returns its group."""
    group_id = f"{run_id}-g1"
    store.append(
        run_stream(run_id),
        [
            RunCreated(
                run_id=run_id,
                name=f"bench {run_id}",
                scaling_config=ScalingConfig(num_workers=WORKERS),
                failure_config=FailureConfig(max_failures=1),
                context=_context(),
            ),
            ControllerStarted(controller_id="c", host="bench", pid=1),
            ControllerStateChanged(from_state="INITIALIZING", to_state="SCHEDULING"),
            ControllerStateChanged(from_state="SCHEDULING", to_state="RUNNING", group_id=group_id),
        ],
    )
    workers = tuple(
        WorkerInfo(
            world_rank=rank,
            local_rank=rank,
            node_rank=0,
            local_world_size=WORKERS,
            world_size=WORKERS,
            node_id="node",
            node_ip="10.0.0.1",
            pid=100 + rank,
            actor_id=f"a{rank}",
            actor_name=f"w{rank}",
        )
        for rank in range(WORKERS)
    )
    events: list[Any] = [
        WorkerGroupStartRequested(group_id=group_id, run_id=run_id, attempt=1, context=_context()),
        PlacementGroupReserved(
            placement_group_id="pg",
            name=f"pg-{group_id}",
            bundles=tuple({"CPU": 1.0} for _ in range(WORKERS)),
            strategy="PACK",
            wait_s=0.01,
        ),
        SyncActorStarted(actor_id="sync", name=f"sync-{group_id}"),
        WorkersStarted(workers=workers),
        WorkerGroupStarted(start_time=datetime.now(UTC), startup_s=0.1),
        TrainingLaunched(train_fn="examples.train:train_fn"),
    ]
    events += [
        WorkerReported(world_rank=rank, index=step, metrics={"loss": 1.0 / step})
        for step in range(1, reports + 1)
        for rank in range(WORKERS)
    ]
    if finished:
        events += [
            WorkerGroupShutdownRequested(reason="done"),
            WorkerGroupShutDown(duration_s=0.1, released=("workers",)),
        ]
    store.append(group_stream(group_id), events)
    if finished:
        store.append(
            run_stream(run_id),
            [
                ControllerStateChanged(from_state="RUNNING", to_state="FINISHED"),
                RunFinished(group_id=group_id),
            ],
        )
    return group_id


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextmanager
def served(url: str) -> Iterator[str]:
    """``wgstore serve`` on ``url`` as its own process; yields its base URL (its pid is
    :data:`SERVER_PID` meanwhile)."""
    port = _free_port()
    wgstore = Path(sys.executable).with_name("wgstore")
    process = subprocess.Popen(
        [str(wgstore), "serve", "--url", url, "--port", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    base = f"http://127.0.0.1:{port}"
    SERVER_PID[0] = process.pid
    try:
        deadline = time.monotonic() + 60
        while True:
            if process.poll() is not None:
                raise RuntimeError(process.communicate()[1])
            try:
                if httpx.get(base + "/static/live.js", timeout=5).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError("wgstore serve did not answer within 60 s")
            time.sleep(0.1)
        yield base
    finally:
        process.send_signal(signal.SIGINT)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


SERVER_PID = [0]


def _cpu_s(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` so far (Linux ``/proc``)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def pages_cost(url: str, pages: int, appends: int, rounds: int = 2) -> dict[str, Any]:
    """Appends at full speed with no page open, then with ``pages`` pages of the run open
    (every append redraws every page), alternating ``rounds`` times: appends/s of each, and
    the server's CPU seconds per append."""
    from playwright.sync_api import sync_playwright

    with EventStore.open(url) as store:
        group_id = record_run(store, "live", reports=1, finished=False)
        step = [2]

        def burst() -> tuple[float, float]:
            cpu = _cpu_s(SERVER_PID[0])
            started = time.perf_counter()
            for _ in range(appends):
                store.append(
                    group_stream(group_id),
                    [WorkerReported(world_rank=0, index=step[0], metrics={"loss": 1 / step[0]})],
                )
                step[0] += 1
            took = time.perf_counter() - started
            time.sleep(2)  # let the pages catch up, so their redraws are counted in this burst
            return appends / took, (_cpu_s(SERVER_PID[0]) - cpu) / appends

        results: dict[str, list[tuple[float, float]]] = {"none": [], "pages": []}
        with served(url) as base, sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_FLAGS)
            try:
                for _ in range(rounds):
                    results["none"].append(burst())
                    context = browser.new_context()
                    opened = []
                    for _ in range(pages):
                        page = context.new_page()
                        page.goto(base + "/runs/live")
                        opened.append(page)
                    for page in opened:
                        page.wait_for_selector("svg[data-metric='loss']", timeout=120_000)
                    results["pages"].append(burst())
                    context.close()
            finally:
                browser.close()
    none_rate = statistics.median(r for r, _ in results["none"])
    pages_rate = statistics.median(r for r, _ in results["pages"])
    return {
        "pages": pages,
        "appends": appends,
        "appends_per_s_no_pages": none_rate,
        "appends_per_s_with_pages": pages_rate,
        "append_cost_pct": (none_rate / pages_rate - 1) * 100,
        "server_cpu_ms_per_append_no_pages": statistics.median(c for _, c in results["none"])
        * 1000,
        "server_cpu_ms_per_append_with_pages": statistics.median(c for _, c in results["pages"])
        * 1000,
    }


BIG_BATCH = 1000
"""Events per append while the big run is built (batched appends, as a busy writer does)."""


def record_big_run(store: EventStore, run_id: str, events: int) -> str:
    """A RUNNING run with one attempt of 2 workers whose stream holds about ``events`` events
    (``events / 2`` reports per rank), appended in batches of :data:`BIG_BATCH`."""
    group_id = record_run(store, run_id, reports=1, finished=False)
    stream = group_stream(group_id)
    step = 2
    count = store.stream_version(stream)
    batch: list[Any] = []
    while count < events:
        batch += [
            WorkerReported(world_rank=rank, index=step, metrics={"loss": 1 / step, "lr": 0.01})
            for rank in range(WORKERS)
        ]
        step += 1
        count += WORKERS
        if len(batch) >= BIG_BATCH or count >= events:
            store.append(stream, batch)
            batch = []
    return group_id


def _first_byte_ms(client: httpx.Client, url: str) -> tuple[float, float, int]:
    """Ms to the first byte and to the whole answer of one GET, and its size."""
    started = time.perf_counter()
    with client.stream("GET", url) as response:
        response.raise_for_status()
        chunks = response.iter_bytes()
        first = next(chunks, b"")
        first_ms = (time.perf_counter() - started) * 1000
        size = len(first) + sum(len(chunk) for chunk in chunks)
    return first_ms, (time.perf_counter() - started) * 1000, size


def big_run(url: str, events: int, repeats: int) -> dict[str, Any]:
    """The run and group pages of a run of ``events`` events: first byte of the page, the API's
    answer, and the page fully drawn in Chromium (the loss chart on screen), each measured
    ``repeats`` times after an append (so no answer is reused): first with the read models never
    caught up (no projector: each request folds the log), then with them caught up once and
    one report behind (a live run's normal state: the projector catches up every few seconds)."""
    from playwright.sync_api import sync_playwright

    result: dict[str, Any] = {"events": events}
    with EventStore.open(url) as store:
        started = time.perf_counter()
        group_id = record_big_run(store, "big", events)
        result["build_s"] = time.perf_counter() - started
        result["stream_events"] = store.stream_version(group_stream(group_id))
        step = [10**9]

        def another_report() -> None:  # the head moves: no kept answer is reused
            store.append(
                group_stream(group_id),
                [WorkerReported(world_rank=0, index=step[0], metrics={"loss": 0.5, "lr": 0.01})],
            )
            step[0] += 1

        with (
            served(url) as base,
            httpx.Client(timeout=600) as client,
            sync_playwright() as playwright,
        ):
            browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_FLAGS)
            try:
                for phase in ("behind", "current"):
                    if phase == "current":
                        catch_up_read_models(store)
                    rows: dict[str, list[float]] = {}
                    for _ in range(repeats):
                        for name, path in (
                            ("run_page", "/runs/big"),
                            ("run_api", "/api/runs/big"),
                            ("group_api", f"/api/groups/{group_id}"),
                        ):
                            another_report()
                            time.sleep(0.2)  # the follower's work on the append is not counted
                            cpu = _cpu_s(SERVER_PID[0])
                            first, whole, size = _first_byte_ms(client, base + path)
                            rows.setdefault(f"{name}_cpu_ms", []).append(
                                (_cpu_s(SERVER_PID[0]) - cpu) * 1000
                            )
                            rows.setdefault(f"{name}_first_byte_ms", []).append(first)
                            rows.setdefault(f"{name}_ms", []).append(whole)
                            rows[f"{name}_bytes"] = [size]
                        for name, path, selector in (
                            ("run_drawn", "/runs/big", "svg[data-metric='loss']"),
                            ("group_drawn", f"/groups/{group_id}", "table"),
                        ):
                            another_report()
                            page = browser.new_page()
                            began = time.perf_counter()
                            page.goto(base + path)
                            page.wait_for_selector(selector, timeout=600_000)
                            rows.setdefault(f"{name}_ms", []).append(
                                (time.perf_counter() - began) * 1000
                            )
                            page.close()
                    result[phase] = {k: statistics.median(v) for k, v in rows.items()}
                    result[phase]["load_1m"] = os.getloadavg()[0]
            finally:
                browser.close()
    return result


def series_cost(url: str | None, events: int, repeats: int, run_id: str = "big") -> dict[str, Any]:
    """In-process CPU and wall time of a big run's page with the read models caught up:
    ``state_and_series`` of its group and ``serve.views.run_page``, each ``repeats`` times on a
    read-only store (as ``wgstore serve`` opens it). ``url``: a store that already holds the run
    ``run_id`` (its group ``<run_id>-g1``; e.g. a copy of a SQLite file built before, or a kept Postgres schema; built there
    and caught up when missing); None: a fresh SQLite file."""
    from wgstore.projections.timeline import state_and_series
    from wgstore.serve.views import run_page

    def measure(url: str) -> dict[str, Any]:
        with EventStore.open(url) as store:
            group_id = f"{run_id}-g1"
            if store.stream_version(group_stream(group_id)) == 0:
                started = time.perf_counter()
                record_big_run(store, run_id, events)
                print(f"built in {time.perf_counter() - started:.0f} s", file=sys.stderr)
            catch_up_read_models(store)
            stream_events = store.stream_version(group_stream(group_id))
        result: dict[str, Any] = {"stream_events": stream_events}
        with EventStore.open(url, read_only=True, migrate=False) as reader:
            backends: list[int] = []  # Postgres: the server processes of the reader's connections
            if reader.engine.dialect.name == "postgresql":

                def backend_pid(connection: Any, _record: Any) -> None:
                    cursor = connection.cursor()
                    cursor.execute("SELECT pg_backend_pid()")
                    backends.append(cursor.fetchone()[0])
                    cursor.close()
                    connection.rollback()

                sa.event.listen(reader.engine, "connect", backend_pid)
                reader.engine.dispose()

            def server_cpu_s() -> float:
                return sum(_cpu_s(pid) for pid in backends if Path(f"/proc/{pid}").exists())

            for name, call in (
                ("state_and_series", lambda: state_and_series(reader, group_id)),
                ("run_page", lambda: run_page(reader, run_id)),
            ):
                cpu_ms, wall_ms, server_ms = [], [], []
                for _ in range(repeats):
                    server = server_cpu_s()
                    cpu, wall = time.process_time(), time.perf_counter()
                    call()
                    cpu_ms.append((time.process_time() - cpu) * 1000)
                    wall_ms.append((time.perf_counter() - wall) * 1000)
                    server_ms.append((server_cpu_s() - server) * 1000)
                result[name] = {
                    "server_cpu_ms": statistics.median(server_ms),
                    "cpu_ms": statistics.median(cpu_ms),
                    "wall_ms": statistics.median(wall_ms),
                    "cpu_all_ms": [round(c) for c in cpu_ms],
                    "wall_all_ms": [round(w) for w in wall_ms],
                    "load_1m": os.getloadavg()[0],
                }
        return result

    if url is not None:
        return measure(url)
    with _sqlite_url() as fresh:
        return measure(fresh)


CLIENTS_NICE = 19
"""The clients' process runs at this priority: their CPU comes from what the writer and the
server leave (on a cluster the pages run on the readers' machines)."""


class _Connection:
    """One HTTP/1.1 keep-alive connection, as a browser holds it: a GET at a time, reopened
    when the server has closed it (uvicorn closes an idle one after 5 s). asyncio streams and
    no HTTP library: the clients share the writer's and the server's 2 cores, so a request
    must cost them little. (With httpx, 50 pages' 100 connections in one pool: the pool looks
    at each connection, a syscall each, for every request, and the clients' process used a
    core of its own and fell behind the appends: the stall of the first measurement.)"""

    def __init__(self, host: str, port: int) -> None:
        self.host, self.port = host, port
        self.streams: tuple[asyncio.StreamReader, asyncio.StreamWriter] | None = None
        self.reopened = 0

    async def get(self, path: str) -> tuple[dict[str, str], asyncio.StreamReader]:
        """Send ``GET path``; the answer's headers and the reader its body comes from."""
        request = f"GET {path} HTTP/1.1\r\nHost: {self.host}:{self.port}\r\n\r\n".encode()
        for attempt in (1, 2):
            if self.streams is None:
                self.streams = await asyncio.open_connection(self.host, self.port)
            reader, writer = self.streams
            try:
                writer.write(request)
                await writer.drain()
                status = await reader.readuntil(b"\r\n")
            except (asyncio.IncompleteReadError, ConnectionError):
                self.close()  # the server closed the kept-alive connection: a new one
                if attempt == 2:
                    raise
                self.reopened += 1
                continue
            headers: dict[str, str] = {}
            while (line := await reader.readuntil(b"\r\n")) != b"\r\n":
                name, _, value = line.decode("latin-1").partition(":")
                headers[name.strip().lower()] = value.strip()
            if int(status.split()[1]) != 200:
                raise RuntimeError(f"GET {path}: {status.decode().strip()}")
            return headers, reader
        raise AssertionError("unreachable")

    async def get_body(self, path: str) -> bytes:
        """``GET path``'s whole body (``Content-Length`` or chunked)."""
        headers, reader = await self.get(path)
        if "content-length" in headers:
            body = await reader.readexactly(int(headers["content-length"]))
        else:
            body = b"".join([chunk async for chunk in _chunks(reader)])
        if headers.get("connection", "").lower() == "close":
            self.close()
        return body

    def close(self) -> None:
        """Close the connection (a later :meth:`get` opens another)."""
        if self.streams is not None:
            self.streams[1].close()
            self.streams = None


async def _chunks(reader: asyncio.StreamReader) -> AsyncIterator[bytes]:
    """The chunks of a chunked HTTP/1.1 body, as they arrive."""
    while True:
        size = int((await reader.readuntil(b"\r\n")).split(b";")[0], 16)
        if size == 0:
            await reader.readuntil(b"\r\n")
            return
        yield await reader.readexactly(size)
        await reader.readexactly(2)


class _LivePage:
    """What live.js does for an open run page, on two connections of its own (a reader's
    browser): it fetches ``/api/runs/<run>`` (the page's load), then follows ``/api/stream``
    watching what it shows (``watch=run:<run>&watch=group:<each attempt>``: the server sends it
    the appends to those streams and the new attempts of the run, and the log's head about once
    a second otherwise). On each ``status`` message, and each ``append`` (its events concern the
    page, or it lists fewer events than it holds), it fetches
    ``/api/runs/<run>?head=<the newest message's head>``. One fetch at a time: messages that
    come meanwhile make one more fetch when it ends (live.js' ``busy`` / ``again``), so a page
    fetches once per append when appends are slower than its fetches and coalesces them when
    they are faster. ``fetching=False``: the stream alone, watching everything (the harness's
    observer)."""

    def __init__(self, host: str, port: int, run_id: str, *, fetching: bool = True) -> None:
        self.run_id = run_id
        self.fetching = fetching
        self.stream = _Connection(host, port)
        self.api = _Connection(host, port)
        self.watching: list[str] | None = None  # None: everything (the observer)
        self.interest = EVERYTHING
        self.followed: str | None = None  # the query its stream was opened with
        self.busy = self.again = False
        self.status_seen = False
        self.head = 0  # the newest message's head
        self.fetches = 0
        self.appends = 0  # append messages the server sent it
        self.tasks: set[asyncio.Task[None]] = set()
        self.failed: str | None = None  # what ended its stream or a fetch

    def start(self) -> None:
        """Open the page as live.js does: its first fetch (the page's load), then its stream
        watching what the page shows."""
        self._spawn(self._open())

    async def _open(self) -> None:
        if self.fetching:
            self.busy = True
            await self.fetch_rows()
        self.followed = self._query()
        await self._follow()

    def _query(self) -> str:
        """The stream's query for what the page watches."""
        if self.watching is None:
            return ""
        return "?" + urlencode([("watch", value) for value in sorted(self.watching)])

    def caught_up(self, head: int, told: bool = True) -> bool:
        """No fetch is in flight or pending, and the page has had the message at ``head``
        (``told``: appends it watches), or its status (not ``told``: appends it does not watch,
        whose head comes in the next ``head`` message, up to a second later)."""
        return self.status_seen and not self.busy and (not told or self.head >= head)

    def refresh(self) -> None:
        """live.js' ``refresh()``: fetch now, or once more after the fetch in flight."""
        if not self.fetching:
            return
        if self.busy:
            self.again = True
            return
        self.busy = True
        self._spawn(self.fetch_rows())

    def _spawn(self, coroutine: Any) -> None:
        task = asyncio.get_running_loop().create_task(coroutine)
        self.tasks.add(task)
        task.add_done_callback(self._done)

    def _done(self, task: asyncio.Task[None]) -> None:
        self.tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            self.failed = f"{type(task.exception()).__name__}: {task.exception()}"

    async def _fetch(self) -> None:
        try:
            while True:
                self.again = False
                path = f"/api/runs/{self.run_id}" + (f"?head={self.head}" if self.head else "")
                answer = json.loads(await self.api.get_body(path))
                self.fetches += 1
                self.watching = [f"run:{self.run_id}"] + [
                    f"group:{a['group_id']}" for a in answer["attempts"]
                ]
                self.interest = Interest.of(self.watching)
                if self.followed is not None and self._query() != self.followed:
                    # live.js would open its stream again; the bench's run has one attempt
                    raise RuntimeError("the run gained an attempt: the bench's pages do not")
                if not self.again:
                    return
        finally:
            self.busy = False

    def _matters(self, message: dict[str, Any]) -> bool:
        """live.js' ``matters()``: the message lists an event the page watches, or fewer
        events than it holds."""
        return message["more"] > 0 or any(
            self.interest.concerns(e["stream_id"], e["type"], e.get("run_id"))
            for e in message["events"]
        )

    async def _follow(self) -> None:
        headers, reader = await self.stream.get("/api/stream" + (self.followed or ""))
        if "chunked" not in headers.get("transfer-encoding", ""):
            raise RuntimeError(f"/api/stream is not chunked: {headers}")
        text = ""
        async for chunk in _chunks(reader):
            text += chunk.decode().replace("\r\n", "\n")
            while "\n\n" in text:
                block, text = text.split("\n\n", 1)
                kind, data = "", ""
                for line in block.split("\n"):
                    if line.startswith("event:"):
                        kind = line[6:].strip()
                    elif line.startswith("data:"):
                        data += line[5:].strip()
                if kind in ("append", "head"):
                    message = json.loads(data)
                    self.head = max(self.head, message["head"])
                    if kind == "append":
                        self.appends += 1
                        if self._matters(message):
                            self.refresh()
                elif kind == "status":
                    message = json.loads(data)
                    self.status_seen = True
                    if message["available"]:
                        self.head = max(self.head, message["head"])
                        self.refresh()

    async def close(self) -> None:
        """Close the page: its tasks and its connections."""
        for task in list(self.tasks):
            task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)
        self.stream.close()
        self.api.close()


def clients_child(base: str, run_id: str) -> None:
    """The live pages of ``--part clients``, in their own process (:class:`Clients` starts it
    niced), driven by lines on stdin, each answered by one line on stdout:

    - ``open N``: open N pages of the run (:class:`_LivePage`); ``ready`` once each has its
      stream and has fetched the run at the head its stream announced.
    - ``close``: close them; ``closed``.
    - ``wait H S T``: wait (at most S seconds) until the observer (a stream watching
      everything, open throughout) has had the message at head H, and every page too when T is
      1 (the appends are to streams the pages watch; 0: to others, of which they are told
      nothing), and no page has a fetch in flight or pending; ``caught <seconds> <1 | 0 if S
      ran out>``.
    - ``count``: ``count <fetches> <connections reopened> <append messages>`` of the pages so
      far.
    """
    host, port = base.removeprefix("http://").rsplit(":", 1)

    async def main() -> None:
        loop = asyncio.get_running_loop()
        commands = asyncio.StreamReader()
        await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(commands), sys.stdin)
        observer = _LivePage(host, int(port), run_id, fetching=False)
        observer.start()
        pages: list[_LivePage] = []
        closed = [0, 0, 0]  # fetches, reopened, append messages: of pages closed before

        async def until(done: Any, seconds: float) -> tuple[float, bool]:
            started = time.perf_counter()
            while not done():
                failed = [p.failed for p in [observer, *pages] if p.failed]
                if failed:
                    say(f"failed {failed[0]}")
                    raise SystemExit(1)
                if time.perf_counter() - started > seconds:
                    return time.perf_counter() - started, False
                await asyncio.sleep(0.005)
            return time.perf_counter() - started, True

        def say(text: str) -> None:
            sys.stdout.write(text + "\n")
            sys.stdout.flush()

        while line := (await commands.readline()).decode().split():
            if line[0] == "open":
                pages = [_LivePage(host, int(port), run_id) for _ in range(int(line[1]))]
                for page in pages:
                    page.start()
                _, ok = await until(
                    lambda pages=pages: all(p.fetches and p.caught_up(p.head) for p in pages), 300
                )
                say("ready" if ok else "not ready")
            elif line[0] == "close":
                for page in pages:
                    closed[0] += page.fetches
                    closed[1] += page.api.reopened
                    closed[2] += page.appends
                    await page.close()
                pages = []
                say("closed")
            elif line[0] == "wait":
                head, told = int(line[1]), line[3] == "1"
                took, ok = await until(
                    lambda head=head, told=told, pages=pages: (
                        observer.caught_up(head) and all(p.caught_up(head, told) for p in pages)
                    ),
                    float(line[2]),
                )
                say(f"caught {took:.4f} {int(ok)}")
            elif line[0] == "count":
                fetches = closed[0] + sum(p.fetches for p in pages)
                reopened = closed[1] + sum(p.api.reopened for p in pages)
                say(f"count {fetches} {reopened} {closed[2] + sum(p.appends for p in pages)}")
        await observer.close()
        for page in pages:
            await page.close()

    asyncio.run(main())


class Clients:
    """:func:`clients_child` in its own process at ``nice`` (default :data:`CLIENTS_NICE`)."""

    def __init__(self, base: str, run_id: str, nice: int = CLIENTS_NICE) -> None:
        self.process = subprocess.Popen(
            ["nice", "-n", str(nice), sys.executable, __file__, "--clients-child", base, run_id],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        self.pid = self.process.pid

    def ask(self, command: str) -> list[str]:
        """Send ``command``; its answer's words."""
        assert self.process.stdin is not None and self.process.stdout is not None
        self.process.stdin.write(command + "\n")
        self.process.stdin.flush()
        line = self.process.stdout.readline()
        if not line:
            raise RuntimeError(f"the clients' process ended (exit {self.process.wait()})")
        if line.startswith("failed "):
            raise RuntimeError(f"a page failed: {line[7:].strip()}")
        return line.split()

    def open(self, pages: int) -> None:
        """Open ``pages`` live pages; return once each shows the run."""
        if self.ask(f"open {pages}") != ["ready"]:
            raise RuntimeError(f"{pages} pages did not all load within 300 s")

    def close(self) -> None:
        """Close the open pages."""
        self.ask("close")

    def wait(self, head: int, seconds: float = 120, *, told: bool = True) -> float:
        """Seconds until the observer has had the append at ``head``, every page too when
        ``told`` (the pages watch the appends' streams), and every page fetched what it made it
        fetch (raises after ``seconds``)."""
        _, took, ok = self.ask(f"wait {head} {seconds} {int(told)}")
        if ok != "1":
            raise RuntimeError(f"the pages did not catch up with head {head} in {seconds} s")
        return float(took)

    def count(self) -> tuple[int, int, int]:
        """Fetches made so far, connections the server had closed that were reopened, and
        append messages the pages were sent."""
        _, fetches, reopened, appends = self.ask("count")
        return int(fetches), int(reopened), int(appends)

    def stop(self) -> None:
        """End the process."""
        assert self.process.stdin is not None
        self.process.stdin.close()
        self.process.wait(timeout=60)


def _schedstat_s() -> tuple[float, float]:
    """Seconds this thread has run, and waited on a run queue for a core (Linux
    ``/proc/thread-self/schedstat``)."""
    on_cpu, waiting, _ = Path("/proc/thread-self/schedstat").read_text().split()
    return int(on_cpu) / 1e9, int(waiting) / 1e9


def _spread(values: list[float]) -> dict[str, float]:
    """Median, quartiles, min and max."""
    quartiles = statistics.quantiles(values, n=4) if len(values) > 1 else values * 3
    return {
        "median": statistics.median(values),
        "q1": quartiles[0],
        "q3": quartiles[2],
        "min": min(values),
        "max": max(values),
    }


def clients_cost(
    url: str, clients: int, burst: int, rounds: int, paced: int = 20, nice: int = CLIENTS_NICE
) -> dict[str, Any]:
    """What ``clients`` open run pages (:class:`_LivePage`, in a process of their own at
    ``nice``) cost a writer of single appends and the server, for two workloads: ``run``: every
    append is a report of the run the pages show (each makes every page refetch the run, or
    coalesce); ``w1``: bench/store.py's W1 (single appends over 50 other streams, which no page
    watches: the server sends the pages no append, only the log's head about once a second).

    First a check that the pages do what a page does (``paced``): ``paced`` appends to the run,
    each after the pages caught up with the one before: each page fetches once per append.

    Then, per workload, ``rounds`` pairs of bursts of ``burst`` appends, one without pages and
    one with them, the order alternating from pair to pair. A burst is timed from its first
    append to its last (appends/s); its CPU (``/proc`` user + system time, of the server and of
    the clients' process) runs until the pages have caught up (an observer's stream, open
    throughout and watching everything, has had the last append; in ``run`` every page has had
    it too; every page finished the fetches it made). A W1 burst's pages are told nothing but
    the log's head in a ``head`` message about once a second: the window does not wait for it
    (that is a cost per second, counted when it falls in a burst, not per append). The cost to appends is each pair's without/with - 1: its median
    and spread; also with the time the writer waited on a run queue for a core taken out of
    each burst (``/proc/thread-self/schedstat``: what is left is the writer's own work, its
    I/O and its waits for the database, so a machine whose cores the writer does not share
    is approached). The CPU per append is each arm's total over its total appends."""
    from bench_payload import make_event

    with EventStore.open(url) as store:
        group_id = record_run(store, "live", reports=1, finished=False)
        step = [2]
        seq = [0]

        def run_append() -> None:
            store.append(
                group_stream(group_id),
                [WorkerReported(world_rank=0, index=step[0], metrics={"loss": 1 / step[0]})],
            )
            step[0] += 1

        def w1_append() -> None:
            store.append(f"w1-{seq[0] % 50}", [make_event(seq[0])])
            seq[0] += 1

        out: dict[str, Any] = {
            "clients": clients,
            "burst": burst,
            "rounds": rounds,
            "nice": nice,
        }
        with served(url) as base:
            harness = Clients(base, "live", nice)
            try:
                for _ in range(5):
                    w1_append()
                    run_append()  # warm: the first appends open connections and caches
                harness.wait(store.head())
                harness.open(clients)
                fetches = harness.count()[0]
                waits = []
                for _ in range(paced):
                    run_append()
                    waits.append(harness.wait(store.head()))
                out["paced"] = {
                    "appends": paced,
                    "fetches_per_append_per_page": (harness.count()[0] - fetches)
                    / (paced * clients),
                    "all_pages_fetched_ms": _spread([w * 1000 for w in waits]),
                    "load_1m": os.getloadavg()[0],
                }
                harness.close()
                for name, append in (("run", run_append), ("w1", w1_append)):
                    out[name] = _clients_rounds(
                        store,
                        harness,
                        append,
                        clients=clients,
                        burst=burst,
                        rounds=rounds,
                        told=name == "run",
                    )
            finally:
                harness.stop()
    return out


def _clients_rounds(
    store: EventStore,
    harness: Clients,
    append: Any,
    *,
    clients: int,
    burst: int,
    rounds: int,
    told: bool,
) -> dict[str, Any]:
    """The alternating rounds of :func:`clients_cost` for one workload (``told``: its appends
    are to the streams the pages watch)."""

    def one(with_pages: bool) -> dict[str, float]:
        if with_pages:
            harness.open(clients)
        fetches, reopened, messages = harness.count()
        server, child = _cpu_s(SERVER_PID[0]), _cpu_s(harness.pid)
        cpu, waited = _schedstat_s()
        started = time.perf_counter()
        for _ in range(burst):
            append()
        took = time.perf_counter() - started
        cpu_after, waited_after = _schedstat_s()
        caught = harness.wait(store.head(), told=told)
        row = {
            "appends_per_s": burst / took,
            "appends_per_s_own": burst / (took - (waited_after - waited)),
            "writer_cpu_s": cpu_after - cpu,
            "server_cpu_s": _cpu_s(SERVER_PID[0]) - server,
            "clients_cpu_s": _cpu_s(harness.pid) - child,
            "caught_up_s": caught,
            "fetches": harness.count()[0] - fetches,
            "reopened": harness.count()[1] - reopened,
            "append_messages": harness.count()[2] - messages,
            "load_1m": os.getloadavg()[0],
        }
        if with_pages:
            harness.close()
        return row

    pairs = []
    for n in range(rounds):
        first = n % 2 == 1  # pages first in every other pair
        a = one(first)
        b = one(not first)
        without, with_ = (b, a) if first else (a, b)
        pairs.append({"without": without, "with": with_})
    appends = burst * rounds

    def total(arm: str, key: str) -> float:
        return sum(p[arm][key] for p in pairs)

    return {
        "cost_pct": _spread(
            [(p["without"]["appends_per_s"] / p["with"]["appends_per_s"] - 1) * 100 for p in pairs]
        ),
        "cost_own_pct": _spread(
            [
                (p["without"]["appends_per_s_own"] / p["with"]["appends_per_s_own"] - 1) * 100
                for p in pairs
            ]
        ),
        "appends_per_s_without": _spread([p["without"]["appends_per_s"] for p in pairs]),
        "appends_per_s_with": _spread([p["with"]["appends_per_s"] for p in pairs]),
        "writer_cpu_ms_per_append_without": total("without", "writer_cpu_s") / appends * 1000,
        "writer_cpu_ms_per_append_with": total("with", "writer_cpu_s") / appends * 1000,
        "server_cpu_ms_per_append_without": total("without", "server_cpu_s") / appends * 1000,
        "server_cpu_ms_per_append_with": total("with", "server_cpu_s") / appends * 1000,
        "clients_cpu_ms_per_append": total("with", "clients_cpu_s") / appends * 1000,
        "fetches_per_append_per_page": total("with", "fetches") / (appends * clients),
        "append_messages_per_append_per_page": total("with", "append_messages")
        / (appends * clients),
        "caught_up_ms_with": _spread([p["with"]["caught_up_s"] * 1000 for p in pairs]),
        "reopened": total("with", "reopened"),
        "load_1m": _spread([p[arm]["load_1m"] for p in pairs for arm in ("without", "with")]),
        "pairs": pairs,
    }


def print_clients(backend: str, cost: dict[str, Any]) -> None:
    """:func:`clients_cost`'s summary: the check, then a table, one row per workload."""
    paced = cost["paced"]
    print(
        f"{backend}: {cost['clients']} pages (nice {cost['nice']}), {cost['rounds']} pairs of "
        f"bursts of {cost['burst']} appends. Check, {paced['appends']} appends each after the "
        f"pages caught up: {paced['fetches_per_append_per_page']:.2f} fetches per append per "
        f"page (a page fetches once per append), every page had its answer "
        f"{paced['all_pages_fetched_ms']['median']:.0f} ms after the append (median; load "
        f"{paced['load_1m']:.1f})",
        flush=True,
    )

    def spread(s: dict[str, float]) -> str:
        return (
            f"{s['median']:+.1f} % [{s['q1']:+.1f}, {s['q3']:+.1f}] ({s['min']:+.0f}, "
            f"{s['max']:+.0f})"
        )

    print(
        "| workload | load 1 min | appends/s without | with | cost to appends: median [q1, q3] "
        "(min, max) | the same, the writer's waits for a core left out | CPU ms per append: "
        "writer without / with | server without / with | pages | append messages per append "
        "per page | fetches per append per page | pages caught up after the burst, ms |"
    )
    print("|---|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|")
    for name in ("run", "w1"):
        c = cost[name]
        print(
            f"| {name} | {c['load_1m']['min']:.1f}-{c['load_1m']['max']:.1f} "
            f"| {c['appends_per_s_without']['median']:.0f} "
            f"| {c['appends_per_s_with']['median']:.0f} | {spread(c['cost_pct'])} "
            f"| {spread(c['cost_own_pct'])} "
            f"| {c['writer_cpu_ms_per_append_without']:.2f} / "
            f"{c['writer_cpu_ms_per_append_with']:.2f} "
            f"| {c['server_cpu_ms_per_append_without']:.2f} / "
            f"{c['server_cpu_ms_per_append_with']:.2f} | {c['clients_cpu_ms_per_append']:.2f} "
            f"| {c['append_messages_per_append_per_page']:.2f} "
            f"| {c['fetches_per_append_per_page']:.2f} | {c['caught_up_ms_with']['median']:.0f} |",
            flush=True,
        )


OBSERVER = """() => {
  window.__seen = {};
  const stamp = () => {
    const chart = document.querySelector("svg[data-metric='loss']");
    if (chart && !(chart.dataset.points in window.__seen)) window.__seen[chart.dataset.points] = Date.now();
  };
  new MutationObserver(stamp).observe(document.getElementById("main"), {childList: true, subtree: true});
  stamp();
}"""


def append_to_visible(url: str, appends: int) -> dict[str, float]:
    """p50 / p99 / max ms from an append to the page's chart holding the new point."""
    from playwright.sync_api import sync_playwright

    with EventStore.open(url) as store:
        group_id = record_run(store, "live", reports=1, finished=False)
        with served(url) as base, sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_FLAGS)
            try:
                page = browser.new_page()
                page.goto(base + "/runs/live")
                page.wait_for_selector("svg[data-metric='loss'][data-points='2']", timeout=60_000)
                page.evaluate(OBSERVER)
                latencies = []
                for n in range(appends):
                    points = 3 + n
                    before = time.time() * 1000
                    store.append(
                        group_stream(group_id),
                        [WorkerReported(world_rank=0, index=2 + n, metrics={"loss": 1 / (n + 2)})],
                    )
                    page.wait_for_function(
                        f"() => window.__seen['{points}'] !== undefined", timeout=60_000
                    )
                    latencies.append(page.evaluate(f"window.__seen['{points}']") - before)
            finally:
                browser.close()
    latencies.sort()
    return {
        "appends": appends,
        "p50_ms": statistics.median(latencies),
        "p99_ms": latencies[min(len(latencies) - 1, round(0.99 * (len(latencies) - 1)))],
        "max_ms": latencies[-1],
    }


def scrape_time(url: str, runs: int, scrapes: int) -> dict[str, Any]:
    """Median / max ms of a /metrics scrape with ``runs`` runs: the read models never caught up
    (``behind``), current, and ``lagging`` (current, then one more report of every running run
    not yet projected: a live log between two catch-ups)."""
    with EventStore.open(url) as store:
        running = {}
        for n in range(runs):
            group_id = record_run(store, f"r{n:05d}", reports=3, finished=n % 10 != 0)
            if n % 10 == 0:
                running[f"r{n:05d}"] = group_id
        events = store.head()
        result: dict[str, Any] = {"runs": runs, "events": events}
        with served(url) as base:
            result["behind"] = _scrapes(base, max(1, scrapes // 5))
            catch_up_read_models(store)
            result["current"] = _scrapes(base, scrapes)
            for group_id in running.values():
                store.append(
                    group_stream(group_id),
                    [WorkerReported(world_rank=0, index=4, metrics={"loss": 0.25})],
                )
            result["lagging"] = _scrapes(base, scrapes)
            result["lagging"]["groups_behind"] = len(running)
    return result


def _scrapes(base: str, count: int) -> dict[str, float]:
    times = []
    with httpx.Client(timeout=600) as client:
        client.get(base + "/metrics").raise_for_status()  # warm up
        for _ in range(count):
            started = time.perf_counter()
            client.get(base + "/metrics").raise_for_status()
            times.append((time.perf_counter() - started) * 1000)
    return {"scrapes": count, "median_ms": statistics.median(times), "max_ms": max(times)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", choices=["sqlite", "postgres", "both"], default="both")
    parser.add_argument("--appends", type=int, default=200)
    parser.add_argument("--runs", type=int, default=1000)
    parser.add_argument("--scrapes", type=int, default=20)
    parser.add_argument("--pages", type=int, default=50)
    parser.add_argument(
        "--part",
        choices=["visible", "scrape", "pages", "big", "clients", "series", "both"],
        default="both",
        help="both: visible and scrape; pages (opens --pages tabs), big (a run of --events "
        "events) and clients (--clients pages' worth of HTTP clients) only when asked",
    )
    parser.add_argument("--events", type=int, default=100_000)
    parser.add_argument("--clients", type=int, default=50)
    parser.add_argument(
        "--rounds", type=int, default=20, help="--part clients: pairs of bursts (without, with)"
    )
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument(
        "--url", help="--part series: a store holding the run --run-id (built when missing)"
    )
    parser.add_argument("--run-id", default="big", help="--part series: the run to time")
    parser.add_argument("--burst", type=int, default=100, help="--part clients: appends per burst")
    parser.add_argument(
        "--clients-nice", type=int, default=CLIENTS_NICE, help="--part clients: the pages' nice"
    )
    parser.add_argument("--clients-child", nargs=2, help=argparse.SUPPRESS)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    if args.clients_child:
        clients_child(*args.clients_child)
        return
    backends = ["sqlite", "postgres"] if args.backend == "both" else [args.backend]
    results = []
    for backend in backends:
        place = _sqlite_url if backend == "sqlite" else _postgres_url
        load = os.getloadavg()[0]
        row: dict[str, Any] = {"backend": backend, "load_1m": load}
        if args.part in ("visible", "both"):
            with place() as url:
                row["visible"] = visible = append_to_visible(url, args.appends)
            if not args.json:
                print(
                    f"{backend:8} load {load:.2f}  append->visible p50 {visible['p50_ms']:.0f} ms, "
                    f"p99 {visible['p99_ms']:.0f} ms, max {visible['max_ms']:.0f} ms "
                    f"({visible['appends']} appends)",
                    flush=True,
                )
        if args.part in ("scrape", "both"):
            with place() as url:
                row["scrape"] = scrape = scrape_time(url, args.runs, args.scrapes)
            if not args.json:
                print(
                    f"{backend:8} load {os.getloadavg()[0]:.2f}  /metrics with {scrape['runs']} "
                    f"runs ({scrape['events']} events): read models current median "
                    f"{scrape['current']['median_ms']:.0f} ms (max "
                    f"{scrape['current']['max_ms']:.0f}), "
                    f"{scrape['lagging']['groups_behind']} groups behind median "
                    f"{scrape['lagging']['median_ms']:.0f} ms, never caught up median "
                    f"{scrape['behind']['median_ms']:.0f} ms",
                    flush=True,
                )
        if args.part == "pages":
            with place() as url:
                row["pages"] = cost = pages_cost(url, args.pages, 300)
            if not args.json:
                print(
                    f"{backend:8} load {os.getloadavg()[0]:.2f}  {cost['pages']} open run pages: "
                    f"appends/s {cost['appends_per_s_no_pages']:.0f} without, "
                    f"{cost['appends_per_s_with_pages']:.0f} with "
                    f"(+{cost['append_cost_pct']:.1f} % per append); server CPU per append "
                    f"{cost['server_cpu_ms_per_append_no_pages']:.2f} ms without, "
                    f"{cost['server_cpu_ms_per_append_with_pages']:.2f} ms with",
                    flush=True,
                )
        if args.part == "big":
            with place() as url:
                row["big"] = big = big_run(url, args.events, args.repeats)
            if not args.json:
                print(
                    f"{backend:8} a run of {big['stream_events']:,} events (built in "
                    f"{big['build_s']:.0f} s)",
                    flush=True,
                )
                for phase in ("behind", "current"):
                    m = big[phase]
                    print(
                        f"  read models {phase:7} (load {m['load_1m']:.2f}): run page first byte "
                        f"{m['run_page_first_byte_ms']:.0f} ms; /api/runs {m['run_api_ms']:.0f} ms "
                        f"(server CPU {m['run_api_cpu_ms']:.0f} ms, {m['run_api_bytes']:,} B), "
                        f"drawn {m['run_drawn_ms']:.0f} ms; /api/groups {m['group_api_ms']:.0f} ms "
                        f"(server CPU {m['group_api_cpu_ms']:.0f} ms, {m['group_api_bytes']:,} B), "
                        f"drawn {m['group_drawn_ms']:.0f} ms",
                        flush=True,
                    )
        if args.part == "series":
            if args.url is not None:
                row["series"] = cost = series_cost(args.url, args.events, args.repeats, args.run_id)
            else:
                with place() as url:
                    row["series"] = cost = series_cost(url, args.events, args.repeats)
            if not args.json:
                for name in ("state_and_series", "run_page"):
                    c = cost[name]
                    server = (
                        f", Postgres server CPU {c['server_cpu_ms']:.0f} ms"
                        if backend == "postgres"
                        else ""
                    )
                    print(
                        f"{backend:8} {cost['stream_events']:,} events, {name}: CPU "
                        f"{c['cpu_ms']:.0f} ms {c['cpu_all_ms']}, wall {c['wall_ms']:.0f} ms "
                        f"{c['wall_all_ms']}{server} (load {c['load_1m']:.2f})",
                        flush=True,
                    )
        if args.part == "clients":
            with place() as url:
                row["clients"] = cost = clients_cost(
                    url, args.clients, args.burst, args.rounds, nice=args.clients_nice
                )
            if not args.json:
                print_clients(backend, cost)
        results.append(row)
    if args.json:
        print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
