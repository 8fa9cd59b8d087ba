"""What ``wgstore run`` checks before Ray starts: config, train function, a new run's id.

The train function's import check runs in a child interpreter, as the real one does; the run id
check asks a real SQLite store. No Ray.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from wgstore.events import EventStore, InvalidArgumentError
from wgstore.events.run import RunCreated
from wgstore.events.streams import run_stream
from wgstore.orchestration.errors import TrainFnError
from wgstore.orchestration.run.inputs import (
    check_new_run_id,
    check_run_inputs,
    parse_train_config,
)


@pytest.mark.parametrize(("text", "config"), [(None, {}), ("", {}), ('{"steps": 3}', {"steps": 3})])
def test_a_config_is_a_json_object_or_nothing(text: str | None, config: dict[str, int]) -> None:
    assert parse_train_config(text) == config


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("{steps: 3}", "--config is not valid JSON: Expecting property name"),
        ("[" * 100_000, "--config is not valid JSON"),  # too deep for the parser
        ("[1]", "--config must be a JSON object, e.g. '{\"steps\": 50}'"),
        ("3", "--config must be a JSON object"),
    ],
)
def test_a_config_that_is_not_a_json_object_is_refused(text: str, message: str) -> None:
    with pytest.raises(InvalidArgumentError) as raised:
        parse_train_config(text)
    assert str(raised.value).startswith(message)


@pytest.fixture
def folder(tmp_path: Path) -> str:
    (tmp_path / "good_train.py").write_text("def train_fn(config):\n    return None\n")
    return str(tmp_path)


def test_a_train_function_that_imports_passes_with_its_config(folder: str) -> None:
    assert check_run_inputs("good_train:train_fn", '{"a": 1}', folder=folder) == {"a": 1}


def test_the_form_of_the_path_is_checked_first_then_the_config_then_the_import(
    folder: str,
) -> None:
    with pytest.raises(TrainFnError, match="not a file path"):
        check_run_inputs("good_train.py", "not json", folder=folder)
    with pytest.raises(InvalidArgumentError, match="--config"):
        check_run_inputs("no_such_module:train_fn", "not json", folder=folder)
    with pytest.raises(TrainFnError, match="cannot import module 'no_such_module'"):
        check_run_inputs("no_such_module:train_fn", None, folder=folder)
    with pytest.raises(TrainFnError, match="has no attribute 'nope'"):
        check_run_inputs("good_train:nope", None, folder=folder)


def test_a_module_missing_here_is_left_to_workers_that_may_have_it(
    folder: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    assert check_run_inputs("no_such_module:f", None, folder=folder, external_executor=True) == {}
    monkeypatch.setenv("RAY_ADDRESS", "ray://elsewhere:10001")
    assert check_run_inputs("no_such_module:f", None, folder=folder) == {}
    with pytest.raises(TrainFnError, match="has no attribute"):  # the same everywhere
        check_run_inputs("good_train:nope", None, folder=folder)


def test_a_new_run_id_has_the_allowed_form_and_no_run_yet(sqlite_url: str) -> None:
    with EventStore.open(sqlite_url) as store:
        store.append(run_stream("taken"), [RunCreated(run_id="taken")])
        check_new_run_id(store, "fresh_id.1-a")
        check_new_run_id(store, "x" * 128)
        for bad in ("", "has space", "slash/id", "x" * 129):
            with pytest.raises(InvalidArgumentError, match="--run-id must be 1-128 letters"):
                check_new_run_id(store, bad)
        with pytest.raises(InvalidArgumentError) as raised:
            check_new_run_id(store, "taken")
    assert str(raised.value) == (
        "run taken exists already; continue it with `wgstore run --resume taken`, "
        "or choose another --run-id"
    )


@pytest.mark.parametrize("bad", ["a b", " ", "x" * 129, "run/1"])
def test_start_run_refuses_a_run_id_of_another_form_before_writing(
    bad: str, sqlite_url: str
) -> None:
    from wgstore.events.run import ScalingConfig
    from wgstore.orchestration.run.training import start_run

    with EventStore.open(sqlite_url) as store:
        with pytest.raises(ValueError, match="run_id must be 1-128 letters"):
            start_run(
                store,
                "examples.train:train_fn",
                scaling_config=ScalingConfig(num_workers=1),
                run_id=bad,
            )
        assert store.head() == 0


def test_an_elastic_range_for_wgstores_own_run_needs_a_minimum_of_one(tmp_path: Path) -> None:
    """Ray Train allows min_workers=0 (and the recorder keeps it); a wgstore run refuses it
    before anything is written."""
    from wgstore.events.run import ScalingConfig
    from wgstore.orchestration import start_run
    from wgstore.orchestration.run.inputs import parse_workers

    db = tmp_path / "never.db"
    with pytest.raises(ValueError, match="min_workers must be 1 or more for a wgstore run"):
        start_run(
            f"sqlite:///{db}",
            "examples.train:train_fn",
            scaling_config=ScalingConfig(num_workers=2, min_workers=0),
        )
    assert not db.exists()
    assert parse_workers(" 2..4 ") == (2, 4) and parse_workers("3") == 3
    assert parse_workers("2..2") == (2, 2)  # a range of one size is still elastic in form
