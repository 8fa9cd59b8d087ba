"""bench/mlflow_compare.py at its smallest: every side runs on real Ray Train, MLflow and
wgstore record into one SQLite file, the three queries answer alike through every way.

Runs in the session's Ray (``ray_session``); the bench's train function travels by value.
"""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

pytestmark = [
    pytest.mark.ray,
    pytest.mark.slow,
    pytest.mark.timeout(900),  # five Ray Train runs: ~30 s on a quiet machine, minutes at load 100
    # MLflow 3.17 on SQLAlchemy 2.1 (its ORM's ``noload``, ...) and its own deprecations: the
    # bench's reference, not wgstore's code, which the rest of the suite keeps strict
    pytest.mark.filterwarnings("ignore::sqlalchemy.exc.SADeprecationWarning"),
    pytest.mark.filterwarnings("ignore::DeprecationWarning:mlflow.*"),
    pytest.mark.filterwarnings("ignore::FutureWarning:mlflow.*"),
    pytest.mark.filterwarnings("ignore::UserWarning:mlflow.*"),
]

pytest.importorskip("ray.train.v2")
pytest.importorskip("mlflow")

BENCH = Path(__file__).resolve().parents[1] / "bench" / "mlflow_compare.py"
STEPS = 4


@pytest.fixture(scope="module")
def bench(ray_session: None) -> Iterator[ModuleType]:
    """The bench as a module whose functions Ray pickles by value (workers cannot import it)."""
    import cloudpickle
    import ray.cloudpickle  # Ray pickles the train function with its own copy of cloudpickle

    spec = importlib.util.spec_from_file_location("wgstore_bench_mlflow_compare", BENCH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    for pickler in (cloudpickle, ray.cloudpickle):
        pickler.register_pickle_by_value(module)
    yield module
    for pickler in (cloudpickle, ray.cloudpickle):
        pickler.unregister_pickle_by_value(module)
    del sys.modules[spec.name]


@pytest.fixture
def result(bench: ModuleType, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    for name, value in bench.QUIET_MLFLOW.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("RAY_TRAIN_HEALTH_CHECK_INTERVAL_S", "0.05")  # the controller reads it
    args = bench.parse_args(
        ["--steps", str(STEPS), "--repeats", "1", "--query-repeats", "2", "--no-warmup"]
    )
    return dict(bench.bench_main(args))


def test_the_smallest_comparison_runs_every_side_and_query(result: dict[str, Any]) -> None:
    assert result["backend"] == "sqlite" and result["steps"] == STEPS
    sides = result["sides"]
    assert set(sides) == {"neither", "mlflow", "wgstore"}
    for side, entry in sides.items():
        assert entry["runs"] == 1, side
        assert entry["median_wall_s"] > 0 and entry["median_to_shutdown_s"] > 0
        assert entry["report_us_median"] > 0
    # MLflow logged every step on rank 0 only; wgstore's hooks were timed in the controller
    runs = {run["side"]: run for run in result["runs"]}
    logged = {w["rank"]: len(w["log_s"]) for w in runs["mlflow"]["workers"]}
    assert logged == {0: STEPS, 1: 0}
    assert all(not w["log_s"] for w in runs["wgstore"]["workers"] + runs["neither"]["workers"])
    assert runs["wgstore"]["note"] is not None and runs["mlflow"].get("note") is None
    assert sides["mlflow"]["log_metrics_us_median"] > 0
    assert sides["wgstore"]["hook_us_per_report"] > 0
    # the end of the run's flush was timed on its own (once per run, not per report; a second
    # call, from after_controller_finish, finds it done)
    hooks = runs["wgstore"]["note"]["hooks"]
    assert hooks["_close"]["calls"] >= 1 and sides["wgstore"]["end_flush_ms"] > 0
    assert hooks["after_controller_state_update"]["s"] >= hooks["_close"]["s"]
    assert result["per_report"]["ratio"] > 0
    assert result["failed_run"]["failed"] is not None
    queries = result["queries"]
    assert set(queries) == {"running_latest", "metric_series", "failed_last_day"}
    for name, row in queries.items():
        for tool in ("mlflow", "wgstore"):
            assert row[f"{tool}_api_ms"] > 0 and row[f"{tool}_sql_ms"] > 0, (name, tool)
    # the same answers through the API and through SQL: one running run (rows: MLflow one per
    # metric, wgstore one per rank), a whole series, one failed run
    running = queries["running_latest"]
    assert running["mlflow_api_rows"] == running["wgstore_api_rows"] == 1
    assert running["mlflow_sql_rows"] == result["metrics"]
    assert running["wgstore_sql_rows"] == 2
    series = queries["metric_series"]
    assert {series[f"{t}_{w}_rows"] for t in ("mlflow", "wgstore") for w in ("api", "sql")} == {
        STEPS
    }
    failed = queries["failed_last_day"]
    assert {failed[f"{t}_{w}_rows"] for t in ("mlflow", "wgstore") for w in ("api", "sql")} == {1}


def test_the_end_of_the_run_s_flush_is_not_counted_per_report(bench: ModuleType) -> None:
    """The flush runs inside the final state update's hook: its time is taken off that hook's
    and off the once-per-run hooks' (both ``s`` and ``cpu_s``)."""
    hooks = {
        "after_controller_start": {"s": 5.0, "cpu_s": 1.0},  # once
        "after_worker_group_poll_status": {"s": 0.25, "cpu_s": 0.5},
        "after_controller_state_update": {"s": 0.75, "cpu_s": 0.25},  # holds the flush
        "_close": {"s": 0.5, "cpu_s": 0.125},
    }
    assert bench._steady_s(hooks, "s") == 0.5
    assert bench._steady_s(hooks, "cpu_s") == 0.625
    del hooks["_close"]  # a note from before the flush was timed
    assert bench._steady_s(hooks, "s") == 1.0
