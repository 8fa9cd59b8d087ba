"""What ``wgstore serve`` costs: append -> visible in an open page, and a ``/metrics`` scrape.

1. **Append -> visible**: ``wgstore serve`` runs as its own process; headless Chromium (Debian's,
   driven by Playwright) has a run's page open. Each of ``--appends`` appends (one
   ``WorkerReported`` of rank 0, from this process) waits until the page's loss chart holds the
   new point; a MutationObserver in the page stamps the moment (``Date.now()``), compared with the
   wall clock just before the append (same machine, same clock). p50 / p99 / max in ms.
2. **/metrics scrape** with ``--runs`` runs in the log (90 % finished, 10 % running, each run 2
   workers x 3 reports): the median and max of ``--scrapes`` scrapes, once with the read models
   current (the scrape reads ``wg_runs``) and once behind (the scrape folds the log).

    .venv/bin/python bench/serve.py                        # both backends
    .venv/bin/python bench/serve.py --backend sqlite --appends 50 --runs 200
    .venv/bin/python bench/serve.py --json

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
                if httpx.get(base + "/api/runs?limit=1", timeout=5).status_code == 200:
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
        choices=["visible", "scrape", "pages", "both"],
        default="both",
        help="both: visible and scrape (pages only when asked: it opens --pages tabs)",
    )
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
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
        results.append(row)
    if args.json:
        print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
