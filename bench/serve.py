"""What ``wgstore serve`` costs: append -> visible in an open page, a ``/metrics`` scrape, a big
run's pages, and the cost of open pages to appends.

1. **Append -> visible**: ``wgstore serve`` runs as its own process; headless Chromium (Debian's,
   driven by Playwright) has a run's page open. Each of ``--appends`` appends (one
   ``WorkerReported`` of rank 0, from this process) waits until the page's loss chart holds the
   new point; a MutationObserver in the page stamps the moment (``Date.now()``), compared with the
   wall clock just before the append (same machine, same clock). p50 / p99 / max in ms.
2. **/metrics scrape** with ``--runs`` runs in the log (90 % finished, 10 % running, each run 2
   workers x 3 reports): the median and max of ``--scrapes`` scrapes, once with the read models
   current (the scrape reads ``wg_runs``) and once behind (the scrape folds the log).

3. **A big run** (``--part big``): a run of ``--events`` events (default 100,000: 2 ranks x
   50,000 reports, appended in batches of 1,000): the run page's first byte, ``/api/runs/<id>``
   and ``/api/groups/<id>`` (first byte and whole answer), and each page fully drawn in Chromium
   (from ``goto`` to its chart or table on screen); with the read models never caught up, then
   caught up and one report behind. One report is appended before each request, so no answer is
   shared from the server's cache.
4. **Live pages without a browser** (``--part clients``): ``--clients`` HTTP clients in one
   process at ``nice 19``, each doing what an open run page does (an ``/api/stream`` connection,
   and ``/api/runs/<id>`` fetched on each append to the run); appends/s of a single-append writer
   and the server's CPU per append, without and with them, for appends to the run the pages
   show and for bench/store.py's W1 (50 other streams).
5. **A big run's page in process** (``--part series``): ``state_and_series`` of its group and
   ``serve.views.run_page``, ``--repeats`` times on a read-only store with the read models caught
   up: this process's CPU, the Postgres server's CPU for the reader's connections, and wall.
   ``--url`` reuses a store that holds the run ``--run-id`` (built there when missing).

    .venv/bin/python bench/serve.py                        # both backends
    .venv/bin/python bench/serve.py --backend sqlite --appends 50 --runs 200
    .venv/bin/python bench/serve.py --json
    .venv/bin/python bench/serve.py --part big --events 100000
    .venv/bin/python bench/serve.py --part clients --clients 50 --appends 300 --rounds 3
    .venv/bin/python bench/serve.py --backend sqlite --part series --url sqlite:///big.db --run-id big

Postgres: ``WGSTORE_BENCH_PG_URL`` (default ``postgresql+psycopg://postgres@127.0.0.1:5432/test``),
one fresh schema per run, dropped afterwards. Numbers, not pass/fail.
"""

from __future__ import annotations

import argparse
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
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

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


def clients_child(base: str, clients: int, run_id: str) -> None:
    """``clients`` pages' worth of HTTP without a browser (run as its own, niced process): each
    holds an ``/api/stream`` connection and, on every ``append`` message that touches the run's
    streams, fetches ``/api/runs/<run_id>?head=<the message's head>`` as live.js does (one fetch
    at a time per page, one more if messages came meanwhile). Prints ``ready`` once every stream is open; on stdin's end
    prints how many fetches were made, and exits."""
    import asyncio

    async def page(client: httpx.AsyncClient, ready: asyncio.Event, counts: list[int]) -> None:
        watched: set[str] = set()
        busy = again = False
        head = 0
        running: set[asyncio.Task[None]] = set()

        def start_refresh() -> None:
            task = asyncio.create_task(refresh())
            running.add(task)
            task.add_done_callback(running.discard)

        async def refresh() -> None:
            nonlocal busy, again, watched, head
            if busy:
                again = True
                return
            busy = True
            try:
                while True:
                    again = False
                    try:
                        path = f"{base}/api/runs/{run_id}" + (f"?head={head}" if head else "")
                        answer = (await client.get(path)).json()
                    except httpx.TransportError:  # a kept-alive connection the server closed
                        counts[1] += 1
                        again = True
                        continue
                    counts[0] += 1
                    watched = {f"run-{run_id}"} | {
                        f"worker-group-{a['group_id']}" for a in answer["attempts"]
                    }
                    if not again:
                        return
            finally:
                busy = False

        async with client.stream("GET", f"{base}/api/stream") as stream:
            kind = ""
            async for line in stream.aiter_lines():
                if line.startswith("event:"):
                    kind = line[6:].strip()
                elif line.startswith("data:") and kind in ("status", "append"):
                    message = json.loads(line[5:])
                    head = max(head, message["head"])
                    if kind == "status":
                        ready.set()
                        start_refresh()
                    elif message["more"] or any(
                        e["stream_id"] in watched for e in message["events"]
                    ):
                        start_refresh()

    async def main() -> None:
        counts = [0, 0]
        limits = httpx.Limits(max_connections=clients * 2 + 10, max_keepalive_connections=None)
        async with httpx.AsyncClient(timeout=None, limits=limits) as client:
            readies = [asyncio.Event() for _ in range(clients)]
            _pages = [asyncio.create_task(page(client, r, counts)) for r in readies]  # referenced
            for ready in readies:
                await ready.wait()
            print("ready", flush=True)
            await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)
            print(f"fetches {counts[0]} {counts[1]}", flush=True)
            others = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for task in others:  # the pages and their fetches in flight
                task.cancel()
            await asyncio.gather(*others, return_exceptions=True)

    asyncio.run(main())


@contextmanager
def open_clients(base: str, clients: int, run_id: str) -> Iterator[dict[str, Any]]:
    """:func:`clients_child` in its own process at the lowest priority (``nice 19``); yields a
    dict that holds ``fetches`` once the clients are gone."""
    process = subprocess.Popen(
        [
            "nice",
            "-n",
            "19",
            sys.executable,
            __file__,
            "--clients-child",
            base,
            str(clients),
            run_id,
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert process.stdin is not None and process.stdout is not None
    found: dict[str, Any] = {"pid": process.pid}
    try:
        line = process.stdout.readline()
        if line.strip() != "ready":
            raise RuntimeError(f"the clients did not start: {line!r}")
        yield found
    finally:
        process.stdin.close()
        out = process.stdout.read()
        process.wait(timeout=60)
        for line in out.splitlines():
            if line.startswith("fetches "):
                found["fetches"], found["retries"] = (int(n) for n in line.split()[1:])


def clients_cost(url: str, clients: int, appends: int, rounds: int) -> dict[str, Any]:
    """Single appends at full speed with no client, then with ``clients`` live pages' worth of
    HTTP clients (:func:`clients_child`), alternating ``rounds`` times, for two workloads:
    ``run``: every append is a report of the run the pages show (each one makes every page
    fetch the run again); ``w1``: bench/store.py's W1 (single appends over 50 streams the pages
    do not show: each reaches every page as a server-sent event, no fetch). Appends/s, and the
    server's CPU (ms per append, its ``/proc`` user + system time) over the burst and the 2 s
    after it."""
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

        def burst(append: Any) -> tuple[float, float]:
            cpu = _cpu_s(SERVER_PID[0])
            started = time.perf_counter()
            for _ in range(appends):
                append()
            took = time.perf_counter() - started
            time.sleep(2)  # the fetches the last appends caused count in this burst
            return appends / took, (_cpu_s(SERVER_PID[0]) - cpu) / appends

        out: dict[str, Any] = {"clients": clients, "appends": appends, "rounds": rounds}
        with served(url) as base:
            for _ in range(5):
                w1_append()
                run_append()  # warm: the first appends open connections and caches
            for name, append in (("run", run_append), ("w1", w1_append)):
                rows: dict[str, list[tuple[float, float]]] = {"none": [], "clients": []}
                fetches = retries = 0
                loads = []
                for _ in range(rounds):
                    loads.append(os.getloadavg()[0])
                    rows["none"].append(burst(append))
                    with open_clients(base, clients, "live") as found:
                        rows["clients"].append(burst(append))
                    fetches += found.get("fetches", 0)
                    retries += found.get("retries", 0)
                none_rates = [r for r, _ in rows["none"]]
                with_rates = [r for r, _ in rows["clients"]]
                none_rate = statistics.median(none_rates)
                with_rate = statistics.median(with_rates)
                out[name] = {
                    "appends_per_s_no_clients": none_rate,
                    "appends_per_s_with_clients": with_rate,
                    "rates_no_clients": none_rates,
                    "rates_with_clients": with_rates,
                    "append_cost_pct": (none_rate / with_rate - 1) * 100,
                    "server_cpu_ms_per_append_no_clients": statistics.median(
                        c for _, c in rows["none"]
                    )
                    * 1000,
                    "server_cpu_ms_per_append_with_clients": statistics.median(
                        c for _, c in rows["clients"]
                    )
                    * 1000,
                    "fetches_per_append": fetches / (appends * rounds),
                    "fetches_retried": retries,
                    "load_1m": loads,
                }
    return out


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
    """Median / max ms of a /metrics scrape with ``runs`` runs, read models current and behind."""
    with EventStore.open(url) as store:
        for n in range(runs):
            record_run(store, f"r{n:05d}", reports=3, finished=n % 10 != 0)
        events = store.head()
        result: dict[str, Any] = {"runs": runs, "events": events}
        with served(url) as base:
            result["behind"] = _scrapes(base, max(1, scrapes // 5))
            catch_up_read_models(store)
            result["current"] = _scrapes(base, scrapes)
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
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument(
        "--url", help="--part series: a store holding the run --run-id (built when missing)"
    )
    parser.add_argument("--run-id", default="big", help="--part series: the run to time")
    parser.add_argument("--clients-child", nargs=3, help=argparse.SUPPRESS)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    if args.clients_child:
        base, count, run_id = args.clients_child
        clients_child(base, int(count), run_id)
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
                    f"{scrape['current']['max_ms']:.0f}), behind median "
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
                row["clients"] = cost = clients_cost(url, args.clients, args.appends, args.rounds)
            if not args.json:
                for name in ("run", "w1"):
                    c = cost[name]
                    print(
                        f"{backend:8} {name:3} load {c['load_1m']}: {cost['clients']} clients: "
                        f"appends/s {c['appends_per_s_no_clients']:.0f} without "
                        f"{[round(r) for r in c['rates_no_clients']]}, "
                        f"{c['appends_per_s_with_clients']:.0f} with "
                        f"{[round(r) for r in c['rates_with_clients']]} "
                        f"({c['append_cost_pct']:+.1f} %); server CPU per append "
                        f"{c['server_cpu_ms_per_append_no_clients']:.2f} ms without, "
                        f"{c['server_cpu_ms_per_append_with_clients']:.2f} ms with; "
                        f"{c['fetches_per_append']:.2f} fetches per append "
                        f"({c['fetches_retried']} retried)",
                        flush=True,
                    )
        results.append(row)
    if args.json:
        print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
