"""Train functions are named by import path; lambdas and closures are refused. No Ray."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest

from examples.train import train_fn
from wgstore.orchestration import TrainFnError, get_context, report
from wgstore.orchestration.errors import NotInWorkerError, ReportNotStoredError
from wgstore.orchestration.train_context import TrainContext, WorkerSession
from wgstore.orchestration.train_fn.loading import import_path_of, resolve_train_fn
from wgstore.orchestration.train_fn.report_writer import (
    ReportWriter,
    absolute_store_url,
    report_event_id,
)


def test_a_module_level_function_is_named_by_its_import_path_and_resolves_back() -> None:
    assert import_path_of(train_fn) == "examples.train:train_fn"
    assert resolve_train_fn("examples.train:train_fn") is train_fn


def test_a_lambda_is_refused_with_a_message_that_says_what_to_do() -> None:
    with pytest.raises(TrainFnError, match=r"lambda.*module level"):
        import_path_of(lambda config: None)
    with pytest.raises(TrainFnError, match="lambda"):
        resolve_train_fn("examples.train:lambda_fn")


def test_a_closure_is_refused() -> None:
    def inner(config: dict[str, object]) -> None:
        return None

    with pytest.raises(TrainFnError, match="closure or nested function"):
        import_path_of(inner)


def test_a_missing_module_or_attribute_or_non_function_is_a_train_fn_error() -> None:
    with pytest.raises(TrainFnError, match=r"cannot import module 'examples\.nope'") as caught:
        resolve_train_fn("examples.nope:train_fn")
    assert isinstance(caught.value.__cause__, ModuleNotFoundError)
    with pytest.raises(TrainFnError, match="has no attribute"):
        resolve_train_fn("examples.train:nope")
    with pytest.raises(TrainFnError, match="not a function"):
        resolve_train_fn("examples.train:not_a_function")


def test_get_context_and_report_outside_a_worker_say_where_they_work() -> None:
    with pytest.raises(NotInWorkerError, match="inside a train function"):
        get_context()
    with pytest.raises(NotInWorkerError):
        report({"loss": 1.0})


class _ListSink:
    def __init__(self, fail_at: int | None = None) -> None:
        self.stored: list[tuple[int, Any, str | None]] = []
        self.fail_at = fail_at

    def append(self, index: int, metrics: Any, checkpoint: str | None) -> None:
        if index == self.fail_at:
            raise ReportNotStoredError("store unreachable")
        self.stored.append((index, metrics, checkpoint))


def _context() -> TrainContext:
    return TrainContext(
        group_id="g", world_rank=0, local_rank=0, node_rank=0, world_size=1, local_world_size=1
    )


def test_reports_are_numbered_stored_before_report_returns_and_must_be_json() -> None:
    sink = _ListSink(fail_at=1)
    session = WorkerSession(_context(), sink)
    session.report({"loss": 1.0})
    assert sink.stored == [(0, {"loss": 1.0}, None)]
    with pytest.raises(ReportNotStoredError):
        session.report({"loss": 0.7})
    session.report({"loss": 0.5}, checkpoint="/ckpt/1")
    # a report that failed uses up its index: a later one never reuses a maybe-stored id
    assert [index for index, _, _ in sink.stored] == [0, 2]
    with pytest.raises(TypeError, match="JSON-able"):
        session.report({"loss": object()})
    with pytest.raises(TypeError, match="JSON-able"):
        session.report({"loss": float("nan")})


def test_a_worker_that_cannot_see_the_sqlite_file_fails_clearly_and_creates_nothing(
    tmp_path: Path,
) -> None:
    missing = tmp_path / "elsewhere" / "wgstore.db"
    with pytest.raises(ReportNotStoredError, match="cannot see the SQLite store"):
        ReportWriter(f"sqlite:///{missing}", group_id="g", world_rank=0, metadata={})
    assert not missing.exists() and not missing.parent.exists()


def test_report_event_ids_use_the_command_namespace_and_relative_sqlite_paths_become_absolute(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from wgstore.orchestration.executor.commands import COMMAND_NAMESPACE

    assert report_event_id("g", 1, 2) == uuid.uuid5(COMMAND_NAMESPACE, "g:report:1:2")
    monkeypatch.chdir(tmp_path)
    assert absolute_store_url("sqlite:///w.db") == f"sqlite:///{tmp_path}/w.db"
    assert absolute_store_url("sqlite:////abs/w.db") == "sqlite:////abs/w.db"
    pg = "postgresql+psycopg://postgres@127.0.0.1/test"
    assert absolute_store_url(pg) == pg


class _FlakyStore:
    """A real store whose first ``failures`` appends raise as an unreachable database does."""

    def __init__(self, store: Any, failures: int) -> None:
        self.store = store
        self.failures = failures

    def append(self, stream: str, events: Any) -> Any:
        from wgstore.events import StoreUnavailableError

        if self.failures:
            self.failures -= 1
            raise StoreUnavailableError("cannot reach the database (test)")
        return self.store.append(stream, events)


def test_a_report_retries_a_store_that_is_briefly_unreachable_then_raises_a_clear_error(
    store_url: str,
) -> None:
    from wgstore.events import EventStore

    with EventStore.open(store_url):
        pass  # migrated, as the executor leaves it
    writer = ReportWriter(store_url, group_id="g1", world_rank=0, metadata={"causation_id": "c"})
    writer.wait_ready(60)
    real = writer._store
    writer._store = _FlakyStore(real, failures=2)
    writer.append(0, {"loss": 1.0}, None)  # two failures, retried, stored once
    writer.retry_s = 0.2
    writer._store = _FlakyStore(real, failures=1000)
    with pytest.raises(ReportNotStoredError, match=r"report 1 of worker 0 .* was not stored"):
        writer.append(1, {"loss": 0.5}, None)
    stored = list(real.read_stream("worker-group-g1"))
    assert [(r.event.index, r.metadata["causation_id"], r.metadata["source"]) for r in stored] == [
        (0, "c", "worker")
    ]
    writer._store = real
    writer.close()
