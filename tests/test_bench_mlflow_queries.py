"""bench/mlflow_compare.py --queries-only: the query part without Ray, on runs written straight
to the database as the recorder and MLflow's fluent calls write them; kept (``--keep``) and timed
again (``--data``), as an A/B of two versions of wgstore does. Both backends."""

from __future__ import annotations

import importlib.util
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from tests.conftest import PG_URL, _admin_execute, require_postgres

pytestmark = [
    # MLflow 3.17 on SQLAlchemy 2.1 and its own deprecations: the bench's reference, not wgstore
    pytest.mark.filterwarnings("ignore::sqlalchemy.exc.SADeprecationWarning"),
    pytest.mark.filterwarnings("ignore::DeprecationWarning:mlflow.*"),
    pytest.mark.filterwarnings("ignore::FutureWarning:mlflow.*"),
    pytest.mark.filterwarnings("ignore::UserWarning:mlflow.*"),
]

pytest.importorskip("mlflow")

BENCH = Path(__file__).resolve().parents[1] / "bench" / "mlflow_compare.py"
STEPS = 6


@pytest.fixture(scope="module")
def bench() -> Iterator[ModuleType]:
    spec = importlib.util.spec_from_file_location("wgstore_bench_mlflow_queries", BENCH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    yield module
    del sys.modules[spec.name]


def _check(result: dict[str, Any], metrics: int) -> None:
    """The same answers through each tool's API and SQL: one running run, a whole series (of a
    finished run), one failed run."""
    queries = result["queries"]
    running = queries["running_latest"]
    assert running["mlflow_api_rows"] == running["wgstore_api_rows"] == 1
    assert running["mlflow_sql_rows"] == metrics and running["wgstore_sql_rows"] == 2
    series = queries["metric_series"]
    assert {series[f"{t}_{w}_rows"] for t in ("mlflow", "wgstore") for w in ("api", "sql")} == {
        STEPS
    }
    assert series["wgstore_log_rows"] == STEPS
    failed = queries["failed_last_day"]
    assert {failed[f"{t}_{w}_rows"] for t in ("mlflow", "wgstore") for w in ("api", "sql")} == {1}
    for row in queries.values():
        assert row["wgstore_api_ms"] > 0 and row["wgstore_api_cpu_ms"] >= 0


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_the_queries_alone_answer_alike_and_again_on_kept_data(
    bench: ModuleType, backend: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    if backend == "postgres":
        require_postgres()
    for name, value in bench.QUIET_MLFLOW.items():
        monkeypatch.setenv(name, value)
    common = ["--backend", backend, "--url", PG_URL, "--steps", str(STEPS), "--metrics", "3"]
    common += ["--repeats", "1", "--query-repeats", "2", "--queries-only"]
    kept = bench.bench_queries_only(bench.parse_args([*common, "--keep"]))
    try:
        assert kept["queries_only"] and kept["url"]
        _check(kept, 3)
        again = bench.bench_queries_only(bench.parse_args([*common, "--data", kept["url"]]))
        assert again["url"] == kept["url"]
        _check(again, 3)
    finally:
        if backend == "postgres":
            _admin_execute(f"DROP SCHEMA {kept['url'].rsplit('%3D', 1)[1]} CASCADE")
        else:
            shutil.rmtree(Path(kept["url"].removeprefix("sqlite:///")).parent)
