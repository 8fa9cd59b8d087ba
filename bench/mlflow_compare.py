"""The recorder against MLflow's tracking store, same database: one real Ray Train run, three sides.

A ``DataParallelTrainer`` with 2 workers (0.5 CPU each) whose train function calls
``ray.train.report`` ``--steps`` times with ``--metrics`` metrics, run on three sides, alternated
(``--repeats`` of each, the order rotating):

- **neither**: nothing records the metrics;
- **mlflow**: rank 0 logs every step to MLflow as Ray's experiment-tracking guide shows
  (``mlflow.set_tracking_uri``, ``set_experiment``, ``start_run`` on rank 0, then
  ``mlflow.log_metrics(metrics, step=step)`` before each ``ray.train.report``, ``end_run`` at the
  end), MLflow's ``SqlAlchemyStore`` on the same SQLite file / Postgres schema as wgstore;
- **wgstore**: ``RecordingCallback`` on that database.

Every side carries a probe callback noting when the controller starts shutting the group down
(as bench/ray_train_overhead.py: ``fit()`` ends on Ray's 1 s placement-group-cleaner grid).
Per side: the median wall clock of ``fit()`` and to the shutdown, their overhead over
``neither``; per report in the training process: the time around ``mlflow.log_metrics`` (rank 0)
and around ``ray.train.report`` (every rank, every side), and for wgstore the controller's time
in the callback's hooks (the callback measures it and notes it on the run's end event).

Then, on the same database, one more run of each tool ends in an error (rank 0 raises half-way)
and one is left running (the train function waits after its last report), both recorded by
both tools at once, and three queries a user runs are timed, ``--query-repeats`` times each,
tools alternated, medians: the latest metrics of every running run, one metric's series of a run
(``loss`` of rank 0 of a finished run), the runs that failed in the last day. Each through the
tool's own API (``MlflowClient.search_runs`` / ``get_metric_history``; wgstore's
``run_summaries``, ``worker_group_state``, ``metric_series``) and through plain SQL on its tables
(MLflow's ``runs``/``latest_metrics``/``metrics``; wgstore's read models, caught up first: a
recorded Ray Train run has no executor catching them up, ``wgstore projections catch-up`` or
``catch_up_read_models`` does). Numbers, not pass/fail.

    .venv/bin/python bench/mlflow_compare.py                       # SQLite, 200 steps, 3 of each
    .venv/bin/python bench/mlflow_compare.py --backend postgres    # a fresh schema, dropped after
    .venv/bin/python bench/mlflow_compare.py --steps 3 --repeats 1 --query-repeats 3 --json

Postgres: ``--url`` (default ``WGSTORE_BENCH_PG_URL`` or the local test database); the bench
makes one schema ``wgbench_mlflow_<id>`` and points both tools at it (``search_path``): MLflow's
tables (``runs``, ``metrics``, ``alembic_version``, ...) and wgstore's (``wg_*``,
``wg_alembic_version``) do not collide.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from ray_train_probes import shutdown_probe_class, timed_recorder_class  # next to this file

SIDES = ("neither", "mlflow", "wgstore")
QUERIES = ("running_latest", "metric_series", "failed_last_day")
PG_URL = os.environ.get("WGSTORE_BENCH_PG_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test")
# MLflow 3 sends usage telemetry from every process that uses it; this machine has no route out
# and the workers would wait on it. Off on every side (it is in the workers' environment).
QUIET_MLFLOW = {"MLFLOW_DISABLE_TELEMETRY": "true", "DO_NOT_TRACK": "true"}


def metric_names(count: int) -> list[str]:
    """``loss`` and ``count - 1`` more names."""
    return ["loss", *(f"metric_{j}" for j in range(1, count))]


def train_func(config: dict[str, Any]) -> None:
    """Report ``steps`` times; on the mlflow side rank 0 logs each step to MLflow first.

    Writes its timings to ``<out>/<tag>-rank<r>.json``. ``fail_at``: rank 0 raises at that step
    (after logging it). ``hold``: after the last report, wait for that file to exist.
    """
    import ray.train

    rank = ray.train.get_context().get_world_rank()
    names = metric_names(int(config["metrics"]))
    tracking = config.get("mlflow") if rank == 0 else None
    timings: dict[str, Any] = {"rank": rank, "log_s": [], "report_s": [], "setup_s": 0.0}
    mlflow: Any = None
    if tracking:
        started = time.perf_counter()
        import mlflow

        mlflow.set_tracking_uri(tracking["uri"])
        mlflow.set_experiment(tracking["experiment"])
        mlflow.start_run(run_name=tracking["run_name"])
        timings["setup_s"] = time.perf_counter() - started
    status = "FINISHED"
    try:
        for step in range(int(config["steps"])):
            metrics = {name: 1.0 / (step + 1 + j) for j, name in enumerate(names)}
            if mlflow is not None:
                started = time.perf_counter()
                mlflow.log_metrics(metrics, step=step)
                timings["log_s"].append(time.perf_counter() - started)
            if config.get("fail_at") == step and rank == 0:
                raise RuntimeError(f"rank 0 fails at step {step}")
            started = time.perf_counter()
            ray.train.report(metrics)
            timings["report_s"].append(time.perf_counter() - started)
        if config.get("hold"):
            Path(config["out"], f"{config['tag']}-held-rank{rank}").touch()
            deadline = time.monotonic() + 600
            while not os.path.exists(config["hold"]) and time.monotonic() < deadline:
                time.sleep(0.05)
    except BaseException:
        status = "FAILED"
        raise
    finally:
        if mlflow is not None:
            mlflow.end_run(status=status)
        with open(os.path.join(config["out"], f"{config['tag']}-rank{rank}.json"), "w") as out:
            json.dump(timings, out)


class Bench:
    """One database shared by both tools, the runs on it, and the queries."""

    def __init__(self, args: argparse.Namespace, folder: str, url: str | None = None) -> None:
        self.args = args
        self.folder = folder
        self.schema: str | None = None
        if url is not None:  # data made before (--queries-only --data): used, never dropped
            self.url = url
        elif args.backend == "sqlite":
            self.url = f"sqlite:///{folder}/shared.db"
        else:
            self.schema = f"wgbench_mlflow_{uuid.uuid4().hex[:10]}"
            self._admin(f"CREATE SCHEMA {self.schema}")
            sep = "&" if "?" in args.url else "?"
            self.url = f"{args.url}{sep}options=-csearch_path%3D{self.schema}"
        self.experiment = "wgstore-bench"
        self.counter = 0

    def _admin(self, sql: str) -> None:
        import sqlalchemy as sa

        engine = sa.create_engine(self.args.url, isolation_level="AUTOCOMMIT")
        with engine.connect() as connection:
            connection.execute(sa.text(sql))
        engine.dispose()

    def drop(self) -> None:
        """Drop the Postgres schema (both tools' tables)."""
        if self.schema is not None and not self.args.keep:
            self._admin(f"DROP SCHEMA {self.schema} CASCADE")

    def prepare(self) -> None:
        """Both tools' tables exist before the first timed run, as for every run after a first."""
        import mlflow
        from mlflow import MlflowClient

        from wgstore.events import EventStore

        EventStore.open(self.url).close()
        mlflow.set_tracking_uri(self.url)
        client = MlflowClient(self.url)
        if client.get_experiment_by_name(self.experiment) is None:
            client.create_experiment(
                self.experiment, artifact_location=Path(self.folder, "mlruns").as_uri()
            )

    def run(
        self,
        side: str,
        steps: int,
        *,
        record_wgstore: bool | None = None,
        fail_at: int | None = None,
        hold: str | None = None,
    ) -> dict[str, Any]:
        """One ``fit()`` on a side; its times, the workers' timings and the recording note."""
        from ray.train import RunConfig, ScalingConfig
        from ray.train.v2.api.data_parallel_trainer import DataParallelTrainer

        self.counter += 1
        tag = f"{side}-{self.counter}"
        probe_path = os.path.join(self.folder, f"{tag}-shutdown-at")
        callbacks: list[Any] = [shutdown_probe_class()(probe_path)]
        wgstore = side == "wgstore" if record_wgstore is None else record_wgstore
        timings_path = os.path.join(self.folder, f"{tag}-hook-times.json")
        if wgstore:
            callbacks.append(timed_recorder_class()(self.url, timings_path))
        config: dict[str, Any] = {
            "steps": steps,
            "metrics": self.args.metrics,
            "out": self.folder,
            "tag": tag,
            "fail_at": fail_at,
            "hold": hold,
            "mlflow": {"uri": self.url, "experiment": self.experiment, "run_name": tag}
            if side in ("mlflow", "both")
            else None,
        }
        trainer = DataParallelTrainer(
            train_func,
            train_loop_config=config,
            scaling_config=ScalingConfig(num_workers=2, resources_per_worker={"CPU": 0.5}),
            run_config=RunConfig(
                name=tag,
                storage_path=os.path.join(self.folder, "storage"),
                callbacks=callbacks,
                worker_runtime_env={"env_vars": QUIET_MLFLOW},
            ),
        )
        failed = None
        started = time.monotonic()
        try:
            trainer.fit()
        except Exception as error:  # the failing run: Ray's TrainingFailedError
            if fail_at is None:
                raise
            failed = type(error).__name__
        took = time.monotonic() - started
        result: dict[str, Any] = {"side": side, "tag": tag, "wall_s": took, "failed": failed}
        if os.path.exists(probe_path):
            with open(probe_path) as probe:
                result["to_shutdown_s"] = float(probe.read()) - started
        result["workers"] = []
        for rank in (0, 1):
            path = os.path.join(self.folder, f"{tag}-rank{rank}.json")
            if os.path.exists(path):
                with open(path) as timings:
                    result["workers"].append(json.load(timings))
        if wgstore:
            result["note"] = None
            if os.path.exists(timings_path):
                with open(timings_path) as timings:
                    result["note"] = json.load(timings)
        return result


# ------------------------------------------------------------------ summaries of the timed runs

_ONCE = ("after_controller_start", "before_worker_group_start", "after_worker_group_start")
_END_FLUSH = "_close"  # timed inside the final state update's hook (bench/ray_train_probes.py)


def _steady_s(hooks: dict[str, dict[str, float]], key: str) -> float:
    """The hooks' time (``key``: "s" or "cpu_s") a run's reports cost: every hook but the
    once-per-run ones, less the end of the run's flush, which is a once-per-run cost too
    (MLflow's side counts neither its setup nor its ``end_run`` per report either)."""
    total = sum(h[key] for name, h in hooks.items() if name not in (*_ONCE, _END_FLUSH))
    return total - hooks.get(_END_FLUSH, {}).get(key, 0.0)


def _median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def summarise(runs: list[dict[str, Any]], steps: int) -> dict[str, Any]:
    """Medians per side; per-report costs in µs; overheads over ``neither``."""
    sides: dict[str, Any] = {}
    for side in SIDES:
        mine = [r for r in runs if r["side"] == side]
        wall = [r["wall_s"] for r in mine]
        to_shutdown = [r["to_shutdown_s"] for r in mine if "to_shutdown_s" in r]
        report_us = [
            statistics.median(w["report_s"]) * 1e6
            for r in mine
            for w in r["workers"]
            if w["report_s"]
        ]
        log_us = [x * 1e6 for r in mine for w in r["workers"] for x in w["log_s"]]
        setup_s = [w["setup_s"] for r in mine for w in r["workers"] if w["setup_s"]]
        entry: dict[str, Any] = {
            "runs": len(mine),
            "wall_s": wall,
            "median_wall_s": _median(wall),
            "to_shutdown_s": to_shutdown,
            "median_to_shutdown_s": _median(to_shutdown),
            "report_us_median": _median(report_us),
        }
        if log_us:
            entry["log_metrics_us_median"] = statistics.median(log_us)
            entry["log_metrics_us_mean"] = statistics.fmean(log_us)
            entry["log_metrics_us_p99"] = sorted(log_us)[int(0.99 * (len(log_us) - 1))]
            entry["mlflow_setup_s_median"] = _median(setup_s)
        notes = [r["note"] for r in mine if r.get("note")]
        if notes:
            steady = [_steady_s(n["hooks"], "s") * 1e6 / steps for n in notes]
            steady_cpu = [_steady_s(n["hooks"], "cpu_s") * 1e6 / steps for n in notes]
            entry["hook_us_per_report"] = statistics.median(steady)
            entry["hook_cpu_us_per_report"] = statistics.median(steady_cpu)
            entry["once_ms"] = statistics.median(
                sum(n["hooks"][k]["s"] for k in _ONCE if k in n["hooks"]) * 1e3 for n in notes
            )
            entry["end_flush_ms"] = statistics.median(
                n["hooks"].get(_END_FLUSH, {}).get("s", 0.0) * 1e3 for n in notes
            )
        sides[side] = entry
    base = sides["neither"]
    for side in ("mlflow", "wgstore"):
        entry = sides[side]
        for key in ("median_wall_s", "median_to_shutdown_s"):
            if entry[key] is not None and base[key]:
                short = key.replace("median_", "")
                entry[f"overhead_{short}"] = entry[key] - base[key]
                entry[f"overhead_{short}_pct"] = 100.0 * (entry[key] / base[key] - 1.0)
                entry[f"overhead_{short}_ms_per_report"] = (entry[key] - base[key]) * 1e3 / steps
        if entry["report_us_median"] is not None and base["report_us_median"] is not None:
            entry["report_us_delta"] = entry["report_us_median"] - base["report_us_median"]
    mlflow_us = sides["mlflow"].get("log_metrics_us_median")
    wg_us = sides["wgstore"].get("hook_us_per_report")
    per_report: dict[str, Any] = {"mlflow_us": mlflow_us, "wgstore_us": wg_us}
    if mlflow_us and wg_us:
        # wgstore's cost per report: the controller's hooks plus whatever the callback added to
        # ray.train.report in the workers (never below zero: a faster report is noise)
        added = max(0.0, sides["wgstore"].get("report_us_delta") or 0.0)
        per_report["wgstore_us"] = wg_us + added
        per_report["wgstore_report_us_added"] = added
        per_report["ratio"] = mlflow_us / per_report["wgstore_us"]
    return {"sides": sides, "per_report": per_report}


# ------------------------------------------------------------------ the queries


def series_from_log(store: Any, run_id: str, name: str, rank: int = 0) -> list[tuple[int, float]]:
    """One metric's series of a run from the log: the run's attempts (its stream), then each
    attempt's stream, keeping rank ``rank``'s ``WorkerReported``."""
    from wgstore.events.streams import group_stream
    from wgstore.events.worker_group import WorkerReported
    from wgstore.projections import run_state

    points = []
    for group_id in run_state(store, run_id).groups:
        for record in store.read_stream(group_stream(group_id)):
            event = record.event
            if (
                isinstance(event, WorkerReported)
                and event.world_rank == rank
                and name in event.metrics
            ):
                points.append((event.index, event.metrics[name]))
    return points


def _sql(backend: str) -> dict[str, dict[str, str]]:
    """The three queries in plain SQL on each tool's tables."""
    loss = (
        "CAST(json_extract(p.metrics, '$.loss') AS REAL)"
        if backend == "sqlite"
        else "CAST(p.metrics->>'loss' AS DOUBLE PRECISION)"
    )
    return {
        "mlflow": {
            "running_latest": "SELECT r.run_uuid, m.key, m.value, m.step FROM runs r "
            "JOIN latest_metrics m ON m.run_uuid = r.run_uuid "
            "WHERE r.status = 'RUNNING' AND r.lifecycle_stage = 'active' AND r.experiment_id = :exp",
            "metric_series": "SELECT step, value FROM metrics WHERE run_uuid = :run AND key = 'loss' "
            "ORDER BY step, timestamp",
            "failed_last_day": "SELECT run_uuid, name, end_time FROM runs "
            "WHERE status = 'FAILED' AND end_time >= :since_ms AND experiment_id = :exp",
        },
        "wgstore": {
            "running_latest": "SELECT r.run_id, w.world_rank, w.last_metrics FROM wg_runs r "
            "JOIN wg_workers w ON w.group_id = r.current_group_id WHERE r.status = 'RUNNING'",
            "metric_series": f"SELECT g.attempt, p.report_index, {loss} AS loss FROM wg_reports p "
            "JOIN wg_worker_groups g ON g.group_id = p.group_id "
            "WHERE g.run_id = :run AND p.world_rank = 0 ORDER BY g.attempt, p.report_index",
            "failed_last_day": "SELECT run_id, name, ended_at FROM wg_runs "
            "WHERE status = 'ERRORED' AND ended_at >= :since",
        },
    }


def query_bench(bench: Bench, targets: dict[str, Any], repeats: int) -> dict[str, Any]:
    """Time the three queries through each tool's API and through SQL; medians in ms."""
    import sqlalchemy as sa
    from mlflow import MlflowClient

    from wgstore.events import EventStore
    from wgstore.projections.metric_series import metric_series
    from wgstore.projections.queries import worker_group_state
    from wgstore.projections.run_views import run_summaries

    client = MlflowClient(bench.url)
    experiment_id = client.get_experiment_by_name(bench.experiment).experiment_id
    store = EventStore.open(bench.url, read_only=True)
    engine = sa.create_engine(bench.url)
    now = datetime.now(UTC)
    since = now - timedelta(days=1)
    since_ms = int(since.timestamp() * 1000)
    series_mlflow, series_wgstore = targets["mlflow_run"], targets["wgstore_run"]

    def mlflow_running() -> dict[str, dict[str, float]]:
        runs = client.search_runs([experiment_id], "attributes.status = 'RUNNING'")
        return {run.info.run_id: run.data.metrics for run in runs}

    def mlflow_series() -> list[tuple[int, float]]:
        return [(m.step, m.value) for m in client.get_metric_history(series_mlflow, "loss")]

    def mlflow_failed() -> list[str]:
        runs = client.search_runs(
            [experiment_id], f"attributes.status = 'FAILED' AND attributes.end_time >= {since_ms}"
        )
        return [run.info.run_id for run in runs]

    def wgstore_running() -> dict[str, dict[int, Any]]:
        found = {}
        for summary in run_summaries(store):
            if summary.status == "RUNNING" and summary.current_group_id:
                state = worker_group_state(store, summary.current_group_id)
                found[summary.run_id] = dict(state.latest_metrics)
        return found

    def wgstore_series() -> list[tuple[int, float]]:
        return [(p.index, p.value) for p in metric_series(store, series_wgstore, "loss")]

    def wgstore_series_log() -> list[tuple[int, float]]:
        return series_from_log(store, series_wgstore, "loss")

    def wgstore_failed() -> list[str]:
        return [
            s.run_id
            for s in run_summaries(store)
            if s.status == "ERRORED" and s.ended_at is not None and s.ended_at >= since
        ]

    sql = _sql(bench.args.backend)
    since_param: Any = (
        since if bench.args.backend == "postgres" else since.strftime("%Y-%m-%d %H:%M:%S.%f")
    )
    params = {
        "mlflow": {"exp": experiment_id, "run": series_mlflow, "since_ms": since_ms},
        "wgstore": {"run": series_wgstore, "since": since_param},
    }

    def sql_query(tool: str, name: str) -> Callable[[], list[Any]]:
        statement = sa.text(sql[tool][name])
        needed = {k: v for k, v in params[tool].items() if f":{k}" in sql[tool][name]}

        def run() -> list[Any]:
            with engine.connect() as connection:
                rows = list(connection.execute(statement, needed))
                connection.rollback()
            return rows

        return run

    cases: dict[tuple[str, str, str], Callable[[], Any]] = {
        ("mlflow", "api", "running_latest"): mlflow_running,
        ("mlflow", "api", "metric_series"): mlflow_series,
        ("mlflow", "api", "failed_last_day"): mlflow_failed,
        ("wgstore", "api", "running_latest"): wgstore_running,
        ("wgstore", "api", "metric_series"): wgstore_series,
        ("wgstore", "api", "failed_last_day"): wgstore_failed,
        ("wgstore", "log", "metric_series"): wgstore_series_log,  # before metric_series existed
    }
    for tool in ("mlflow", "wgstore"):
        for name in QUERIES:
            cases[(tool, "sql", name)] = sql_query(tool, name)
    times: dict[tuple[str, str, str], list[float]] = {key: [] for key in cases}
    cpu: dict[tuple[str, str, str], list[float]] = {key: [] for key in cases}
    answers: dict[tuple[str, str, str], Any] = {}
    for key, function in cases.items():  # warm: first connections, caches, imports
        answers[key] = function()
    keys = list(cases)
    for round_ in range(repeats):
        order = keys if round_ % 2 == 0 else keys[::-1]
        for key in order:
            started, cpu_started = time.perf_counter(), time.process_time()
            cases[key]()
            times[key].append(time.perf_counter() - started)
            cpu[key].append(time.process_time() - cpu_started)
    store.close()
    engine.dispose()
    result: dict[str, Any] = {}
    for (tool, way, name), values in times.items():
        answer = answers[(tool, way, name)]
        result.setdefault(name, {})[f"{tool}_{way}_ms"] = statistics.median(values) * 1e3
        result[name][f"{tool}_{way}_cpu_ms"] = statistics.median(cpu[(tool, way, name)]) * 1e3
        result[name][f"{tool}_{way}_rows"] = len(answer)
    for name in QUERIES:
        row = result[name]
        row["api_ratio"] = row["mlflow_api_ms"] / row["wgstore_api_ms"]
        row["api_cpu_ratio"] = row["mlflow_api_cpu_ms"] / row["wgstore_api_cpu_ms"]
        row["sql_ratio"] = row["mlflow_sql_ms"] / row["wgstore_sql_ms"]
    return result


def _wait_until(check: Callable[[], bool], what: str, timeout_s: float = 300.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        if time.monotonic() > deadline:
            raise TimeoutError(f"waited {timeout_s:.0f} s for {what}")
        time.sleep(0.1)


def live_queries(bench: Bench, targets: dict[str, Any], steps: int) -> dict[str, Any]:
    """Leave one run running (recorded by both tools), time the queries, then let it end."""
    from wgstore.events import EventStore
    from wgstore.projections import catch_up_read_models

    release = os.path.join(bench.folder, "release-live")
    tag = f"both-{bench.counter + 1}"  # the tag bench.run gives the live run
    outcome: dict[str, Any] = {}

    def query_while_held() -> None:
        try:
            _wait_until(
                lambda: all(
                    os.path.exists(os.path.join(bench.folder, f"{tag}-held-rank{r}"))
                    for r in (0, 1)
                ),
                "the live run's workers to finish reporting",
            )
            with EventStore.open(bench.url) as store:

                def recorded() -> bool:
                    catch_up_read_models(store)
                    with store.engine.connect() as connection:
                        import sqlalchemy as sa

                        running = connection.execute(
                            sa.text(
                                "SELECT count(*) FROM wg_reports p JOIN wg_runs r "
                                "ON r.current_group_id = p.group_id WHERE r.status = 'RUNNING'"
                            )
                        ).scalar_one()
                        connection.rollback()
                    return int(running) >= 2 * steps

                _wait_until(recorded, "the live run's reports in wgstore's read models")
            outcome["queries"] = query_bench(bench, targets, bench.args.query_repeats)
        except BaseException as error:  # noqa: BLE001 - raised again by the main thread
            outcome["error"] = error
        finally:
            Path(release).touch()

    thread = threading.Thread(target=query_while_held, name="queries", daemon=True)
    thread.start()
    run = bench.run("both", steps, record_wgstore=True, hold=release)
    thread.join(60)
    if "error" in outcome:
        raise outcome["error"]
    return {"live_run": run, "queries": outcome["queries"]}


# ------------------------------------------------------------------ --queries-only: no Ray


class _RecordedRun:
    """A Ray Train run written to wgstore as ``RecordingCallback`` writes it (the same events,
    streams and batches: a run stream, one attempt's group stream, each poll's reports in one
    append), without Ray: for ``--queries-only``."""

    def __init__(self, store: Any, run_id: str, name: str) -> None:
        from wgstore.events.run import (
            ControllerStarted,
            ControllerStateChanged,
            FailureConfig,
            RunCreated,
            ScalingConfig,
        )

        self.store = store
        self.run_id = run_id
        self.group_id = f"{run_id}-attempt-1"
        self.meta = {
            "source": "ray_train",
            "ray_job_id": "01000000",
            "ray_controller_actor_id": run_id,
        }
        self.run_events(
            RunCreated(
                run_id=run_id,
                name=name,
                scaling_config=ScalingConfig(num_workers=2, resources_per_worker={"CPU": 0.5}),
                failure_config=FailureConfig(),
                context=None,
                ray={"id": run_id, "name": name, "job_id": "01000000"},
            ),
            ControllerStarted(controller_id=run_id, host="bench", pid=os.getpid()),
        )
        self.run_events(
            ControllerStateChanged(from_state="INITIALIZING", to_state="SCHEDULING"),
        )

    def _append(self, stream_id: str, events: tuple[Any, ...]) -> None:
        from wgstore.events import NewEvent

        meta = {**self.meta, "ray_time_ns": time.time_ns()}
        self.store.append(stream_id, [NewEvent(event, metadata=meta) for event in events])

    def run_events(self, *events: Any) -> None:
        """Append to the run's stream."""
        from wgstore.events.streams import run_stream

        self._append(run_stream(self.run_id), events)

    def group_events(self, *events: Any) -> None:
        """Append to the attempt's stream."""
        from wgstore.events.streams import group_stream

        self._append(group_stream(self.group_id), events)

    def start(self) -> None:
        """The attempt starts: its start request, the builder's steps, training launched."""
        from wgstore.events.run import ControllerStateChanged
        from wgstore.events.worker_group import (
            PlacementGroupReserved,
            SyncActorStarted,
            TrainingLaunched,
            WorkerGroupContext,
            WorkerGroupStarted,
            WorkerGroupStartRequested,
            WorkerInfo,
            WorkersStarted,
        )

        context = WorkerGroupContext(
            num_workers=2, resources_per_worker={"CPU": 0.5}, train_fn="__main__:train_func"
        )
        self.group_events(
            WorkerGroupStartRequested(
                group_id=self.group_id, run_id=self.run_id, attempt=1, context=context
            )
        )
        self.group_events(
            PlacementGroupReserved(
                placement_group_id="pg" + self.run_id,
                name="",
                bundles=({"CPU": 0.5}, {"CPU": 0.5}),
                strategy="PACK",
            ),
            SyncActorStarted(actor_id="sync" + self.run_id, name=""),
        )
        workers = tuple(
            WorkerInfo(
                world_rank=rank,
                local_rank=rank,
                node_rank=0,
                local_world_size=2,
                world_size=2,
                node_id="node",
                node_ip="127.0.0.1",
                pid=1000 + rank,
                actor_id=f"actor{rank}{self.run_id}",
                actor_name="",
            )
            for rank in (0, 1)
        )
        self.group_events(WorkersStarted(workers=workers))
        self.group_events(WorkerGroupStarted(start_time=datetime.now(UTC), startup_s=1.0))
        self.run_events(
            ControllerStateChanged(
                from_state="SCHEDULING", to_state="RUNNING", group_id=self.group_id
            )
        )
        self.group_events(TrainingLaunched(train_fn="__main__:train_func"))

    def report(self, step: int, metrics: dict[str, float], first: bool) -> None:
        """One poll that finds a report from each rank (the first poll: both running)."""
        from wgstore.events.worker_group import (
            WorkerGroupPolled,
            WorkerReported,
            WorkerStatusChange,
        )

        events: list[Any] = [
            WorkerReported(world_rank=rank, index=step, metrics=metrics) for rank in (0, 1)
        ]
        if first:
            events.append(
                WorkerGroupPolled(
                    poll_seq=1,
                    polled_at=datetime.now(UTC),
                    changes=tuple(WorkerStatusChange(world_rank=r, running=True) for r in (0, 1)),
                )
            )
        self.group_events(*events)

    def end(self, error: str | None) -> None:
        """The attempt ends (every rank done, or rank 0 raised) and so does the run."""
        from wgstore.events.run import ControllerStateChanged, RunErrored, RunFinished
        from wgstore.events.worker_group import (
            ErrorInfo,
            WorkerGroupPolled,
            WorkerGroupShutDown,
            WorkerGroupShutdownRequested,
            WorkerStatusChange,
        )

        failure = None if error is None else ErrorInfo(type="RuntimeError", message=error)
        changes = (
            WorkerStatusChange(world_rank=0, running=False, error=failure),
            WorkerStatusChange(world_rank=1, running=failure is not None),
        )
        self.group_events(
            WorkerGroupPolled(poll_seq=2, polled_at=datetime.now(UTC), changes=changes),
            WorkerGroupShutdownRequested(reason=error or "training finished"),
        )
        self.group_events(WorkerGroupShutDown(duration_s=0.1, released=("workers",)))
        if failure is None:
            self.run_events(
                ControllerStateChanged(from_state="RUNNING", to_state="FINISHED"),
                RunFinished(group_id=self.group_id),
            )
        else:
            self.run_events(
                ControllerStateChanged(from_state="RUNNING", to_state="ERRORED"),
                RunErrored(error=failure, group_id=self.group_id),
            )


def _mlflow_run(
    client: Any, experiment_id: str, tag: str, names: list[str], reported: int, status: str | None
) -> None:
    """One run written as rank 0's ``start_run``, ``log_metrics(metrics, step=step)`` a step
    and ``end_run(status)`` write it (the same tags, one ``log_batch`` a step,
    ``set_terminated``); ``status`` None leaves it running."""
    from mlflow.entities import Metric
    from mlflow.tracking.context import registry

    run = client.create_run(
        experiment_id, run_name=tag, tags=registry.resolve_tags({"mlflow.runName": tag})
    )
    for step in range(reported):
        now_ms = int(time.time() * 1000)
        metrics = [Metric(n, 1.0 / (step + 1 + j), now_ms, step) for j, n in enumerate(names)]
        client.log_batch(run.info.run_id, metrics=metrics, synchronous=True)
    if status is not None:
        client.set_terminated(run.info.run_id, status)


def _wgstore_run(
    store: Any, tag: str, names: list[str], reported: int, error: str | None, end: bool
) -> str:
    """One Ray Train run as ``RecordingCallback`` records it (:class:`_RecordedRun`); its id."""
    run = _RecordedRun(store, uuid.uuid4().hex, tag)
    run.start()
    for step in range(reported):
        run.report(step, {n: 1.0 / (step + 1 + j) for j, n in enumerate(names)}, step == 0)
    if end:
        run.end(error)
    return run.run_id


def build_query_data(bench: Bench, args: argparse.Namespace) -> None:
    """The runs the query part of a full bench finds, written straight to the database: MLflow's
    warm-up run (5 steps) and ``--repeats`` finished runs of each tool, one of each that failed
    half-way, one of each left running (its controller holding the lease); wgstore's read
    models caught up."""
    from mlflow import MlflowClient

    from wgstore.events import EventStore
    from wgstore.events.leases import acquire_lease
    from wgstore.projections import catch_up_read_models

    names = metric_names(args.metrics)
    steps, fail_at = args.steps, args.steps // 2
    client = MlflowClient(bench.url)
    experiment_id = client.get_experiment_by_name(bench.experiment).experiment_id
    counter = iter(range(1, 1000))
    _mlflow_run(client, experiment_id, f"mlflow-{next(counter)}", names, 5, "FINISHED")
    with EventStore.open(bench.url) as store:
        for _ in range(args.repeats):
            _mlflow_run(client, experiment_id, f"mlflow-{next(counter)}", names, steps, "FINISHED")
            _wgstore_run(store, f"wgstore-{next(counter)}", names, steps, None, True)
        tag = f"both-{next(counter)}"  # rank 0 logs the failing step, then raises
        _mlflow_run(client, experiment_id, tag, names, fail_at + 1, "FAILED")
        _wgstore_run(store, tag, names, fail_at, f"rank 0 fails at step {fail_at}", True)
        tag = f"both-{next(counter)}"
        _mlflow_run(client, experiment_id, tag, names, steps, None)
        running = _wgstore_run(store, tag, names, steps, None, False)
        catch_up_read_models(store)
        acquire_lease(store, running, running, 3600.0)  # its controller holds it


def query_targets(url: str) -> dict[str, Any]:
    """The runs whose series the bench reads: a finished run of each tool."""
    import sqlalchemy as sa

    from wgstore.events import EventStore

    with EventStore.open(url, read_only=True) as store, store.engine.connect() as connection:
        wgstore_run = connection.execute(
            sa.text("SELECT run_id FROM wg_runs WHERE status = 'FINISHED' ORDER BY run_id LIMIT 1")
        ).scalar_one()
        mlflow_run = connection.execute(
            sa.text(
                "SELECT run_uuid FROM runs WHERE status = 'FINISHED' AND name LIKE "
                "'mlflow-%' ORDER BY start_time DESC LIMIT 1"
            )
        ).scalar_one()
        connection.rollback()
    return {"mlflow_run": mlflow_run, "wgstore_run": wgstore_run}


def bench_queries_only(args: argparse.Namespace) -> dict[str, Any]:
    """``--queries-only``: the query part alone, on runs written without Ray
    (:func:`build_query_data`), or on the data ``--data`` names (kept by an earlier
    ``--queries-only --keep``: the same data for two versions of wgstore, A/B); the same
    timings as the full bench's."""
    folder = tempfile.mkdtemp(prefix="wgstore-mlflow-queries-")
    bench = Bench(args, folder, url=args.data)
    try:
        load = [list(os.getloadavg())]
        if args.data is None:
            bench.prepare()
            build_query_data(bench, args)
            load.append(list(os.getloadavg()))
        queries = query_bench(bench, query_targets(bench.url), args.query_repeats)
        load.append(list(os.getloadavg()))
        return {
            "backend": args.backend,
            "steps": args.steps,
            "metrics": args.metrics,
            "repeats": args.repeats,
            "query_repeats": args.query_repeats,
            "queries_only": True,
            "url": bench.url if args.keep or args.data else None,
            "load": load,
            "queries": queries,
            "versions": _versions(),
        }
    finally:
        bench.drop()
        if not args.keep or args.data is not None:
            shutil.rmtree(folder, ignore_errors=True)


# ------------------------------------------------------------------ main


def bench_main(args: argparse.Namespace) -> dict[str, Any]:
    """The whole bench in a Ray that is already up (``ray.init`` by the caller), with
    ``RAY_TRAIN_HEALTH_CHECK_INTERVAL_S`` and :data:`QUIET_MLFLOW` set by the caller."""
    import mlflow  # noqa: F401  (imported here first: the driver's import is not timed)

    from wgstore.events import EventStore
    from wgstore.projections import catch_up_read_models

    folder = tempfile.mkdtemp(prefix="wgstore-mlflow-bench-")
    bench = Bench(args, folder)
    try:
        bench.prepare()
        if args.warmup:  # worker processes, imports, the page cache
            bench.run("mlflow", min(args.steps, 5))
        runs: list[dict[str, Any]] = []
        load: list[list[float]] = []
        for i in range(args.repeats):
            order = SIDES[i % 3 :] + SIDES[: i % 3]
            for side in order:
                load.append(list(os.getloadavg()))
                runs.append(bench.run(side, args.steps))
        summary = summarise(runs, args.steps)
        # a run of each tool that fails, then the queries while one of each is running
        load.append(list(os.getloadavg()))
        failed = bench.run("both", args.steps, record_wgstore=True, fail_at=args.steps // 2)
        with EventStore.open(bench.url) as store:
            catch_up_read_models(store)
            import sqlalchemy as sa

            with store.engine.connect() as connection:
                wgstore_run = connection.execute(
                    sa.text("SELECT run_id FROM wg_runs WHERE status = 'FINISHED' LIMIT 1")
                ).scalar_one()
                mlflow_run = connection.execute(
                    sa.text(
                        "SELECT run_uuid FROM runs WHERE status = 'FINISHED' AND name LIKE "
                        "'mlflow-%' ORDER BY start_time DESC LIMIT 1"
                    )
                ).scalar_one()
                connection.rollback()
        load.append(list(os.getloadavg()))
        live = live_queries(
            bench, {"mlflow_run": mlflow_run, "wgstore_run": wgstore_run}, args.steps
        )
        load.append(list(os.getloadavg()))
        return {
            "backend": args.backend,
            "steps": args.steps,
            "metrics": args.metrics,
            "repeats": args.repeats,
            "poll_s": args.poll_s,
            "query_repeats": args.query_repeats,
            "schema": bench.schema,
            "load": load,
            "runs": runs,
            **summary,
            "failed_run": {k: failed[k] for k in ("tag", "failed", "wall_s")},
            "queries": live["queries"],
            "versions": _versions(),
        }
    finally:
        bench.drop()
        if not args.keep:  # the SQLite file, the runs' checkpoints and Ray Train's storage
            shutil.rmtree(folder, ignore_errors=True)


def _versions() -> dict[str, str]:
    import platform
    from importlib.metadata import version

    found = {"python": platform.python_version()}
    for name in ("mlflow", "ray", "sqlalchemy", "alembic", "psycopg"):
        try:
            found[name] = version(name)
        except Exception:  # noqa: BLE001 - not installed: say so
            found[name] = "-"
    return found


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line (also what tests/test_bench_mlflow.py passes)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", choices=("sqlite", "postgres"), default="sqlite")
    parser.add_argument("--url", default=PG_URL, help="Postgres: the database (a schema is made)")
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--metrics", type=int, default=10)
    parser.add_argument("--repeats", type=int, default=3, help="timed runs of each side")
    parser.add_argument("--poll-s", type=float, default=0.05)
    parser.add_argument("--query-repeats", type=int, default=30)
    parser.add_argument("--no-warmup", dest="warmup", action="store_false")
    parser.add_argument(
        "--keep", action="store_true", help="keep the data: the Postgres schema, the SQLite folder"
    )
    parser.add_argument(
        "--queries-only",
        action="store_true",
        help="no Ray: write the runs the query part finds straight to the database, time the "
        "queries (--keep: keep the data and print its URL)",
    )
    parser.add_argument(
        "--data",
        default=None,
        help="with --queries-only: time the queries on this URL's data (a --keep's), write none",
    )
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--out", default=None, help="also write the JSON result to this file")
    args = parser.parse_args(argv)
    if args.steps < 2 or args.metrics < 1 or args.repeats < 1 or args.query_repeats < 1:
        parser.error("--steps must be >= 2, --metrics, --repeats and --query-repeats >= 1")
    if args.data is not None and not args.queries_only:
        parser.error("--data goes with --queries-only")
    return args


def _print(result: dict[str, Any]) -> None:
    sides = result["sides"]
    loads = [entry[0] for entry in result["load"]]
    print(
        f"{result['backend']}: {result['steps']} steps x {result['metrics']} metrics, 2 workers, "
        f"{result['repeats']} runs of each side (1-min load {min(loads):.1f}-{max(loads):.1f})"
    )
    for side in SIDES:
        entry = sides[side]
        line = (
            f"  {side:8} fit() median {entry['median_wall_s']:.2f} s, to shutdown "
            f"{entry['median_to_shutdown_s']:.2f} s, ray.train.report median "
            f"{entry['report_us_median']:.0f} µs"
        )
        if side != "neither":
            line += (
                f"; overhead {entry.get('overhead_wall_s', 0):+.2f} s "
                f"({entry.get('overhead_wall_s_pct', 0):+.1f} %), to shutdown "
                f"{entry.get('overhead_to_shutdown_s', 0):+.2f} s"
            )
        print(line)
    mlflow_side, wg_side = sides["mlflow"], sides["wgstore"]
    print(
        f"  per report: mlflow.log_metrics median {mlflow_side['log_metrics_us_median']:.0f} µs "
        f"(mean {mlflow_side['log_metrics_us_mean']:.0f}, p99 "
        f"{mlflow_side['log_metrics_us_p99']:.0f}; setup {mlflow_side['mlflow_setup_s_median']:.2f} s "
        f"per run); wgstore hooks {wg_side['hook_us_per_report']:.0f} µs wall, "
        f"{wg_side['hook_cpu_us_per_report']:.0f} µs CPU; ratio {result['per_report'].get('ratio', 0):.1f} x"
    )
    _print_queries(result)


def _print_queries(result: dict[str, Any]) -> None:
    for name, row in result["queries"].items():
        print(
            f"  {name:16} API mlflow {row['mlflow_api_ms']:.2f} ms / wgstore "
            f"{row['wgstore_api_ms']:.2f} ms ({row['api_ratio']:.1f} x; CPU "
            f"{row['mlflow_api_cpu_ms']:.2f} / {row['wgstore_api_cpu_ms']:.2f} ms, "
            f"{row['api_cpu_ratio']:.1f} x); SQL {row['mlflow_sql_ms']:.2f} / "
            f"{row['wgstore_sql_ms']:.2f} ms ({row['sql_ratio']:.1f} x)"
        )


def _report(result: dict[str, Any], args: argparse.Namespace) -> None:
    if args.out:
        Path(args.out).write_text(json.dumps(result))
    if args.json:
        print(json.dumps(result))
    elif result.get("queries_only"):
        loads = [entry[0] for entry in result["load"]]
        print(
            f"{result['backend']}, queries only (no Ray): {result['steps']} steps x "
            f"{result['metrics']} metrics, {result['query_repeats']} rounds "
            f"(1-min load {min(loads):.1f}-{max(loads):.1f})"
            + (f"; data kept at {result['url']}" if result["url"] else "")
        )
        _print_queries(result)
    else:
        _print(result)


def main() -> None:
    """Start a local Ray, run the bench, print it (``--json``: one JSON object)."""
    args = parse_args()
    os.environ.update(QUIET_MLFLOW)
    if args.queries_only:
        _report(bench_queries_only(args), args)
        return
    os.environ["RAY_TRAIN_HEALTH_CHECK_INTERVAL_S"] = str(args.poll_s)
    import ray

    for attempt in (1, 2, 3):  # Ray waits a fixed 30 s for its raylet: a loaded machine misses it
        try:
            ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
            break
        except Exception as error:
            if "timed out during startup" not in str(error) or attempt == 3:
                raise
            ray.shutdown()
    try:
        result = bench_main(args)
    finally:
        ray.shutdown()
    _report(result, args)


if __name__ == "__main__":
    main()
