"""Benchmark worker-group lifecycles: wgstore beside plain Ray, in the same run (issue 3).

Numbers, not pass/fail. Workloads:

- L1 start-to-running of a 4-worker group (0.25 CPU each): ``WorkerGroup.create()`` until it
  returns (placement group ready, sync actor, workers with ranks, train context, training
  launched, six events appended), beside the same detached named placement group and actors
  created with plain Ray (a trivial actor class), and beside plain Ray driving wgstore's own
  worker class (same steps, no store): the last column isolates the cost of the log and the
  executor from the cost of importing wgstore in each worker process. Median of ``--repeat``,
  the three variants interleaved.
- L2 latency from an append (in another process, as a controller would) to the executor's loop
  seeing the event, p50/p99, on SQLite and Postgres (Postgres wakes on LISTEN/NOTIFY, SQLite
  polls). The loop is RayExecutor's own (``wait_for_new`` + ``read_all`` + decode + fold), run
  without Ray work.
- L3 bytes stored per steady-state poll of a 64-worker group: the executor's poll recorder and
  append path (no Ray actors: 64 actor processes do not fit this machine) over an hour of 1 Hz
  polls, once with nothing changing (then the shutdown's flush) and once with a change every 600
  polls; beside the bytes if every poll were stored in full.
- L4 report cost: a 4-worker group on real Ray, each worker reporting at 10 Hz (every 5th report
  with a checkpoint), on SQLite and Postgres: the time spent inside ``report()`` p50/p99, the
  time from the ``report()`` call to the report being in the log (``recorded_at``) p50/p99, and
  the rate sustained (reports per second per worker).

- L5 the run controller (issue 10), on real Ray, per backend: from a worker's death (SIGKILL
  right after its report, so that report's ``recorded_at``) to the next attempt running
  (``ControllerStateChanged(→RUNNING)`` of attempt 2), with the steps between; from a new
  controller starting on a run whose controller died (its lease expired) to its executor
  re-attached to the running group (lease taken, ``ControllerStarted``, log caught up, actors
  found by name); and the controller's overhead: a one-attempt run through ``start_run`` beside
  the same group through ``WorkerGroup.create`` + ``wait`` + ``shutdown``, interleaved, median
  of ``--repeat``.

Run ``python bench/lifecycle.py --help``; ``--json`` prints the results as JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from wgstore.events import EventStore, NewEvent  # noqa: E402
from wgstore.events.worker_group import (  # noqa: E402
    WorkerGroupContext,
    WorkerGroupPolled,
    WorkerStatusChange,
)
from wgstore.orchestration.polling.recorder import PollRecorder, WorkerObservation  # noqa: E402

PG_URL = os.environ.get("WGSTORE_BENCH_PG_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test")


# ---------------------------------------------------------------------------------- backends


@contextmanager
def open_backend(name: str) -> Iterator[tuple[EventStore, str]]:
    """A fresh store: a SQLite file, or a new Postgres schema dropped afterwards."""
    if name == "sqlite":
        with tempfile.TemporaryDirectory() as folder:
            url = f"sqlite:///{folder}/bench.db"
            with EventStore.open(url) as store:
                yield store, url
        return
    import psycopg

    schema = f"wgbench_{uuid.uuid4().hex[:10]}"
    conninfo = PG_URL.replace("postgresql+psycopg://", "postgresql://")
    with psycopg.connect(conninfo, autocommit=True) as admin:
        admin.execute(f"CREATE SCHEMA {schema}")
    sep = "&" if "?" in PG_URL else "?"
    url = f"{PG_URL}{sep}options=-csearch_path%3D{schema}"
    try:
        with EventStore.open(url) as store:
            yield store, url
    finally:
        with psycopg.connect(conninfo, autocommit=True) as admin:
            admin.execute(f"DROP SCHEMA {schema} CASCADE")


def _pg_available() -> bool:
    try:
        import psycopg

        with psycopg.connect(
            PG_URL.replace("postgresql+psycopg://", "postgresql://"), connect_timeout=3
        ):
            return True
    except Exception:  # noqa: BLE001 - any failure means "skip Postgres"
        return False


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


# ---------------------------------------------------------------------------------- L1


class _PlainWorker:
    """A trivial actor for the plain-Ray baseline."""

    def meta(self) -> int:
        return os.getpid()

    def init(self) -> None:
        return None

    def run(self) -> None:
        return None


def _plain_start(
    num_workers: int, resources: dict[str, float], worker_cls: Any, store_url: str = ""
) -> float:
    import ray
    from ray.util.placement_group import placement_group, remove_placement_group
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    tag = uuid.uuid4().hex[:12]
    began = time.perf_counter()
    pg = placement_group([resources] * num_workers, name=f"plain-{tag}", lifetime="detached")
    pg.wait(timeout_seconds=60)
    plain: Any = ray.remote(_PlainWorker)
    sync = plain.options(
        name=f"plain-{tag}-sync", namespace="plain", lifetime="detached", num_cpus=0
    ).remote()
    ray.get(sync.meta.remote())
    actors: list[Any] = []
    for index in range(num_workers):
        options = {
            "name": f"plain-{tag}-{index}",
            "namespace": "plain",
            "lifetime": "detached",
            "num_cpus": resources["CPU"],
            "scheduling_strategy": PlacementGroupSchedulingStrategy(
                placement_group=pg, placement_group_bundle_index=index
            ),
        }
        if worker_cls is _PlainWorker:
            actors.append(plain.options(**options).remote())
        else:
            actors.append(worker_cls.options(**options).remote(f"plain-{tag}-{index}", index))
    if worker_cls is _PlainWorker:
        ray.get([a.meta.remote() for a in actors])
        ray.get([a.init.remote() for a in actors])
        ray.get([a.run.remote() for a in actors])
    else:
        from wgstore.orchestration.train_context import TrainContext

        ray.get([a.get_metadata.remote() for a in actors])
        ray.get(
            [
                a.init_train_context.remote(
                    context=TrainContext(
                        group_id=tag,
                        world_rank=i,
                        local_rank=i,
                        node_rank=0,
                        world_size=num_workers,
                        local_world_size=num_workers,
                        config={"seconds": 30},
                    ),
                    train_fn="examples.train:sleepy_fn",
                    store_url=store_url,
                    extra_sys_path=[str(REPO)],
                )
                for i, a in enumerate(actors)
            ]
        )
        ray.get([a.run_train_fn.remote() for a in actors])
        ray.get([a.start_training.remote() for a in actors])
    elapsed = time.perf_counter() - began
    for actor in [*actors, sync]:
        ray.kill(actor)
    remove_placement_group(pg)
    return elapsed


def bench_start(repeat: int, num_workers: int) -> dict[str, Any]:
    """L1: start-to-running, wgstore beside plain Ray."""
    import ray

    from wgstore.orchestration import RayExecutor, WorkerGroup
    from wgstore.orchestration.runtimes.ray_resources import _WorkerActor

    resources = {"CPU": 0.25}
    context = WorkerGroupContext(
        num_workers=num_workers,
        resources_per_worker=resources,
        train_fn="examples.train:sleepy_fn",
        train_fn_config={"seconds": 30},
        poll_interval_s=1.0,
    )
    times: dict[str, list[float]] = {"plain_ray": [], "plain_ray_wgstore_worker": [], "wgstore": []}
    with (
        open_backend("sqlite") as (store, url),
        RayExecutor(store, extra_sys_path=[str(REPO)]) as ex,
    ):
        _plain_start(num_workers, resources, _PlainWorker)  # warm-up, not counted
        for _ in range(repeat):
            times["plain_ray"].append(_plain_start(num_workers, resources, _PlainWorker))
            times["plain_ray_wgstore_worker"].append(
                _plain_start(num_workers, resources, _WorkerActor, url)
            )
            began = time.perf_counter()
            group = WorkerGroup.create(store, context, executor=ex)
            times["wgstore"].append(time.perf_counter() - began)
            group.shutdown()
            time.sleep(0.5)
        assert not ex.errors, ex.errors
    medians = {k: statistics.median(v) for k, v in times.items()}
    return {
        "workers": num_workers,
        "repeat": repeat,
        "median_s": medians,
        "all_s": times,
        "wgstore_vs_plain_ray": medians["wgstore"] / medians["plain_ray"],
        "wgstore_vs_same_worker_plain_ray": medians["wgstore"]
        / medians["plain_ray_wgstore_worker"],
        "cpus": ray.cluster_resources().get("CPU"),  # type: ignore[no-untyped-call]
    }


# ---------------------------------------------------------------------------------- L4


def bench_report_cost(backend: str, workers: int, reports: int, hz: float) -> dict[str, Any]:
    """L4: what one ``report()`` costs in a worker, and how long until it is in the log."""
    from wgstore.events.worker_group import stream_id_for_group
    from wgstore.orchestration import RayExecutor, WorkerGroup

    with (
        open_backend(backend) as (store, _url),
        tempfile.TemporaryDirectory() as out_dir,
        RayExecutor(store, extra_sys_path=[str(REPO)]) as ex,
    ):
        context = WorkerGroupContext(
            num_workers=workers,
            resources_per_worker={"CPU": 0.25},
            train_fn="examples.train:timed_report_fn",
            train_fn_config={
                "reports": reports,
                "hz": hz,
                "checkpoint_every": 5,
                "out_dir": out_dir,
            },
            poll_interval_s=1.0,
        )
        group = WorkerGroup.create(store, context, executor=ex)
        group.wait(timeout_s=reports / hz * 10 + 60)
        group.shutdown()
        spent = [
            float(line) * 1000
            for rank in range(workers)
            for line in Path(out_dir, f"rank{rank}.txt").read_text().split()
        ]
        records = [
            r
            for r in store.read_stream(stream_id_for_group(group.group_id))
            if r.type == "WorkerReported"
        ]
        lag = [(r.recorded_at.timestamp() - r.event.metrics["t"]) * 1000 for r in records]
        rates = []  # reports per second each worker sustained, first call to last
        for rank in range(workers):
            times = sorted(r.event.metrics["t"] for r in records if r.event.world_rank == rank)
            rates.append((len(times) - 1) / max(times[-1] - times[0], 1e-9))
        assert not ex.errors, ex.errors
    return {
        "backend": backend,
        "workers": workers,
        "hz": hz,
        "reports_stored": len(records),
        "reports_made": len(spent),
        "in_report_p50_ms": _pct(spent, 0.5),
        "in_report_p99_ms": _pct(spent, 0.99),
        "call_to_log_p50_ms": _pct(lag, 0.5),
        "call_to_log_p99_ms": _pct(lag, 0.99),
        "reports_per_s_per_worker": min(rates),
    }


# ---------------------------------------------------------------------------------- L2

_SENDER = """
import sys, time, uuid
from wgstore.events import EventStore, NewEvent
from wgstore.events.worker_group import WorkerGroupShutdownRequested
url, count, gap = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
with EventStore.open(url) as store:
    time.sleep(1.0)
    for i in range(count):
        store.append("worker-group-latency", [NewEvent(WorkerGroupShutdownRequested(reason=str(i)),
                     metadata={"sent_at": time.time()})])
        time.sleep(gap)
"""


def bench_latency(backend: str, count: int, gap_s: float) -> dict[str, Any]:
    """L2: append in another process -> RayExecutor's loop sees it (no Ray work)."""
    from wgstore.orchestration.executor.ray_executor import RayExecutor

    seen: list[float] = []
    with open_backend(backend) as (store, url):
        executor = RayExecutor(store, from_position=store.head())
        original = executor._apply

        def timed_apply(record: Any) -> None:
            sent = record.metadata.get("sent_at")
            if sent is not None:
                seen.append(time.time() - float(sent))
            original(record)

        executor._apply = timed_apply  # type: ignore[method-assign,unused-ignore]
        loop = threading.Thread(target=executor._run_loop, daemon=True)  # the loop, without Ray
        loop.start()
        subprocess.run(
            [sys.executable, "-c", _SENDER, url, str(count), str(gap_s)],
            cwd=REPO,
            check=True,
            timeout=600,
        )
        deadline = time.monotonic() + 10
        while len(seen) < count and time.monotonic() < deadline:
            time.sleep(0.05)
        executor._stop.set()
        loop.join(10)
    ms = [s * 1000 for s in seen]
    return {
        "backend": backend,
        "events": len(ms),
        "p50_ms": _pct(ms, 0.50),
        "p99_ms": _pct(ms, 0.99),
        "max_ms": max(ms),
    }


# ---------------------------------------------------------------------------------- L3


def _table_bytes(store: EventStore, backend: str, stream_id: str) -> tuple[int, int]:
    """(rows, bytes of data + metadata + the fixed columns) of one stream."""
    import sqlalchemy as sa

    if backend == "sqlite":
        sql = (
            "SELECT count(*), coalesce(sum(length(data) + length(metadata) + length(stream_id) "
            "+ length(event_type) + 16 + 8 + 4 + 2 + 32 + 32), 0) FROM wg_events "
            "WHERE stream_id = :s"
        )
    else:
        sql = (
            "SELECT count(*), coalesce(sum(pg_column_size(wg_events.*)), 0) FROM wg_events "
            "WHERE stream_id = :s"
        )
    with store.engine.connect() as conn:
        rows, size = conn.execute(sa.text(sql), {"s": stream_id}).one()
    return int(rows), int(size)


def bench_poll_bytes(backend: str, workers: int, polls: int, change_every: int) -> dict[str, Any]:
    """L3: bytes per steady-state poll through the poll recorder and the append path."""
    start = datetime(2026, 1, 1, tzinfo=UTC)
    metadata = {"causation_id": str(uuid.uuid4()), "executor_id": uuid.uuid4().hex}
    with open_backend(backend) as (store, _url):
        stream = f"worker-group-bench{uuid.uuid4().hex[:8]}"
        recorder = PollRecorder({r: WorkerObservation(running=True) for r in range(workers)})
        status = {r: WorkerObservation(running=True) for r in range(workers)}
        stored = 0
        for seq in range(1, polls + 1):
            if change_every and seq % change_every == 0:
                rank = (seq // change_every) % workers
                status[rank] = WorkerObservation(running=not status[rank].running)
            event = recorder.observe(dict(status), start + timedelta(seconds=seq))
            if event is not None:
                store.append(stream, [NewEvent(event, metadata=metadata)])
                stored += 1
        flushed = recorder.flush()
        if flushed is not None:
            store.append(stream, [NewEvent(flushed, metadata=metadata)])
            stored += 1
        rows, size = _table_bytes(store, backend, stream)
        full = WorkerGroupPolled(
            poll_seq=1,
            polled_at=start,
            changes=tuple(WorkerStatusChange(world_rank=r, running=True) for r in range(workers)),
        )
        store.append(stream + "full", [NewEvent(full, metadata=metadata)])
        _, full_size = _table_bytes(store, backend, stream + "full")
    return {
        "backend": backend,
        "workers": workers,
        "polls": polls,
        "change_every": change_every or None,
        "events_stored": rows,
        "bytes_total": size,
        "bytes_per_poll": size / polls,
        "bytes_if_every_poll_stored_in_full": full_size,
    }


# ---------------------------------------------------------------------------------- main


L5_FN = "tests.orchestration.controller_fns:resumable_fn"


def _at(store: EventStore, stream_id: str, predicate: Any) -> datetime:
    for record in store.read_stream(stream_id):
        if predicate(record):
            return record.recorded_at
    raise LookupError(f"no such event in {stream_id}")


def bench_controller(backend: str, repeat: int) -> dict[str, Any]:
    """L5: worker death -> next attempt running; controller restart -> re-attached; overhead."""
    from wgstore.events.leases import lease_of
    from wgstore.events.streams import group_stream, run_stream
    from wgstore.orchestration import FailureConfig, ScalingConfig, WorkerGroup, start_run
    from wgstore.orchestration.run.controller import RunController
    from wgstore.orchestration.run.training import NO_RETRY

    scaling = ScalingConfig(num_workers=2, resources_per_worker={"CPU": 0.25})
    fast = {"poll_interval_s": 0.2, "placement_timeout_s": 30.0}
    result: dict[str, Any] = {"backend": backend}
    with open_backend(backend) as (store, _url):
        # worker death -> next attempt running
        run = start_run(
            store,
            L5_FN,
            scaling_config=scaling,
            failure_config=FailureConfig(max_failures=1),
            train_fn_config={"steps": 6, "kill_rank": 1, "kill_at": 2, "step_sleep_s": 0.3},
            **fast,
        ).run_state
        assert run is not None and run.attempts == 2, run
        first, second = run.groups
        died = _at(
            store,
            group_stream(first),
            lambda r: r.type == "WorkerReported" and r.event.world_rank == 1,
        )
        rs = run_stream(run.run_id)
        steps = {
            "failure_decided": _at(store, rs, lambda r: r.type == "FailureDecisionMade"),
            "failed_group_released": _at(
                store, group_stream(first), lambda r: r.type == "WorkerGroupShutDown"
            ),
            "next_attempt_requested": _at(
                store, group_stream(second), lambda r: r.type == "WorkerGroupStartRequested"
            ),
            "next_attempt_running": _at(
                store,
                rs,
                lambda r: (
                    r.type == "ControllerStateChanged"
                    and r.event.to_state == "RUNNING"
                    and r.event.group_id == second
                ),
            ),
        }
        result["death_to_next_running_s"] = {
            name: round((at - died).total_seconds(), 3) for name, at in steps.items()
        }

        # controller restart -> re-attached
        go = Path(tempfile.mkdtemp()) / "go"
        run_id = f"l5r{uuid.uuid4().hex[:8]}"
        from wgstore.events import NO_STREAM
        from wgstore.events.run import RunCreated

        context = WorkerGroupContext(
            num_workers=2,
            resources_per_worker={"CPU": 0.25},
            train_fn=L5_FN,
            train_fn_config={"steps": 2, "wait_for": str(go)},
            **fast,
        )
        store.append(
            run_stream(run_id),
            [RunCreated(run_id=run_id, scaling_config=scaling, context=context, lease_s=1.0)],
            expected_version=NO_STREAM,
        )
        dead = RunController(store, run_id).start()
        while dead.run_state.controller_state != "RUNNING":
            if dead.step().empty:
                store.wait_for_new(store.head(), 0.5)
        assert dead._owned is not None
        dead._owned.stop()  # the controller and its executor die; the lease is not given up
        while not lease_of(store, run_id).expired():  # type: ignore[union-attr]
            time.sleep(0.02)
        group_id = dead.run_state.current_group_id
        started = time.perf_counter()
        resumed = RunController(store, run_id).start()
        taken = time.perf_counter() - started
        executor = resumed._owned
        assert executor is not None
        executor.wait_caught_up()
        caught_up = time.perf_counter() - started
        while group_id not in executor._attached:  # found its actors by name at its first poll
            time.sleep(0.005)
        attached = time.perf_counter() - started
        go.touch()
        final = resumed.run(timeout_s=120)
        resumed.close()
        assert final.status.value == "FINISHED", final
        result["restart_to_reattached_s"] = {
            "lease_and_controller_started": round(taken, 3),
            "executor_caught_up": round(caught_up, 3),
            "actors_reattached": round(attached, 3),
        }

        # overhead of the controller against a single attempt
        times: dict[str, list[float]] = {"group_only": [], "controller": []}
        config = {"steps": 3, "step_sleep_s": 0.02}
        for _ in range(repeat):
            started = time.perf_counter()
            group = WorkerGroup.create(
                store,
                WorkerGroupContext(
                    num_workers=2,
                    resources_per_worker={"CPU": 0.25},
                    train_fn=L5_FN,
                    train_fn_config=config,
                    **fast,
                ),
            )
            group.wait()
            group.shutdown()
            times["group_only"].append(time.perf_counter() - started)
            started = time.perf_counter()
            start_run(
                store,
                L5_FN,
                scaling_config=scaling,
                failure_config=NO_RETRY,
                train_fn_config=config,
                **fast,
            )
            times["controller"].append(time.perf_counter() - started)
        medians = {k: statistics.median(v) for k, v in times.items()}
        result["one_attempt_s"] = {
            "median": {k: round(v, 3) for k, v in medians.items()},
            "all": {k: [round(t, 3) for t in v] for k, v in times.items()},
            "overhead_s": round(medians["controller"] - medians["group_only"], 3),
        }
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=3, help="L1 repetitions (median)")
    parser.add_argument("--workers", type=int, default=4, help="L1 group size")
    parser.add_argument("--latency-events", type=int, default=300, help="L2 appends per backend")
    parser.add_argument(
        "--latency-gap-s", type=float, default=0.02, help="L2 pause between appends"
    )
    parser.add_argument("--polls", type=int, default=3600, help="L3 polls (1 Hz: an hour)")
    parser.add_argument("--reports", type=int, default=100, help="L4 reports per worker")
    parser.add_argument("--skip-ray", action="store_true", help="skip L1 and L4 (need Ray)")
    parser.add_argument("--only-l4", action="store_true", help="run only L4 (report cost)")
    parser.add_argument("--only-l5", action="store_true", help="run only L5 (run controller)")
    parser.add_argument("--json", action="store_true", help="print JSON instead of tables")
    args = parser.parse_args(argv)

    backends = ["sqlite"] + (["postgres"] if _pg_available() else [])
    results: dict[str, Any] = {
        "machine": {"python": platform.python_version(), "cpus": os.cpu_count()},
        "backends": backends,
    }
    if not args.skip_ray:
        import ray

        ray.init(num_cpus=4, include_dashboard=False, log_to_driver=False)
        try:
            if args.only_l5:
                os.chdir(REPO)  # the workers import the L5 train function from here
                results["L5_controller"] = [bench_controller(b, args.repeat) for b in backends]
                print(json.dumps(results, indent=2, default=str))
                return 0
            if not args.only_l4:
                results["L1_start_to_running"] = bench_start(args.repeat, args.workers)
            results["L4_report_cost"] = [
                bench_report_cost(b, args.workers, args.reports, 10.0) for b in backends
            ]
        finally:
            ray.shutdown()
    if not args.only_l4:
        results["L2_append_to_executor"] = [
            bench_latency(b, args.latency_events, args.latency_gap_s) for b in backends
        ]
        results["L3_poll_bytes"] = [
            bench_poll_bytes(b, 64, args.polls, change) for b in backends for change in (0, 600)
        ]
    if args.json:
        print(json.dumps(results, indent=2, default=str))
        return 0
    if "L1_start_to_running" in results:
        l1 = results["L1_start_to_running"]
        print(f"L1 start-to-running, {l1['workers']} workers x 0.25 CPU, median of {l1['repeat']}")
        print(f"  {'variant':<34}{'median s':>10}   all")
        for key, label in (
            ("plain_ray", "plain Ray (trivial actor)"),
            ("plain_ray_wgstore_worker", "plain Ray, wgstore's worker class"),
            ("wgstore", "wgstore WorkerGroup.create()"),
        ):
            runs = " ".join(f"{t:.2f}" for t in l1["all_s"][key])
            print(f"  {label:<34}{l1['median_s'][key]:>10.2f}   {runs}")
        print(
            f"  wgstore / plain Ray: {l1['wgstore_vs_plain_ray']:.2f}; "
            f"wgstore / plain Ray with the same worker class: "
            f"{l1['wgstore_vs_same_worker_plain_ray']:.2f}"
        )
    if "L4_report_cost" in results:
        print("L4 report cost, 4 workers at 10 Hz, every 5th report with a checkpoint")
        print(
            f"  {'backend':<10}{'stored/made':>13}{'in report() p50/p99 ms':>24}"
            f"{'call->log p50/p99 ms':>22}{'min reports/s/worker':>22}"
        )
        for row in results["L4_report_cost"]:
            made = f"{row['reports_stored']}/{row['reports_made']}"
            inside = f"{row['in_report_p50_ms']:.2f}/{row['in_report_p99_ms']:.2f}"
            lag = f"{row['call_to_log_p50_ms']:.1f}/{row['call_to_log_p99_ms']:.1f}"
            print(
                f"  {row['backend']:<10}{made:>13}{inside:>24}{lag:>22}"
                f"{row['reports_per_s_per_worker']:>22.2f}"
            )
    if args.only_l4:
        return 0
    print("L2 append (other process) -> executor sees it")
    print(f"  {'backend':<10}{'events':>8}{'p50 ms':>10}{'p99 ms':>10}{'max ms':>10}")
    for row in results["L2_append_to_executor"]:
        print(
            f"  {row['backend']:<10}{row['events']:>8}{row['p50_ms']:>10.2f}"
            f"{row['p99_ms']:>10.2f}{row['max_ms']:>10.2f}"
        )
    print("L3 bytes stored per steady-state poll, 64 workers")
    print(
        f"  {'backend':<10}{'polls':>7}{'change every':>14}{'events':>8}{'bytes':>9}"
        f"{'bytes/poll':>12}{'one full poll':>15}"
    )
    for row in results["L3_poll_bytes"]:
        every = row["change_every"] or "never"
        print(
            f"  {row['backend']:<10}{row['polls']:>7}{every!s:>14}{row['events_stored']:>8}"
            f"{row['bytes_total']:>9}{row['bytes_per_poll']:>12.2f}"
            f"{row['bytes_if_every_poll_stored_in_full']:>15}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
