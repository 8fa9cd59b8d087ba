"""``RecordingCallback``'s pure parts, without a Ray cluster: values for the log, the train
function's name, what travels to the controller, and bad input."""

from __future__ import annotations

import functools
import math
import pickle
from typing import Any

import pytest

from examples.ray_train_recorded import train_func
from wgstore.orchestration.ray_train.translate import jsonable, train_fn_path


def test_values_become_json_the_log_can_store() -> None:
    class Scalar:  # what numpy.float32(0.5) offers
        def item(self) -> float:
            return 0.5

    value = {"loss": Scalar(), "nan": math.nan, "shape": (2, 3), 1: {"deep": object}}
    assert jsonable(value) == {
        "loss": 0.5,
        "nan": "nan",
        "shape": [2, 3],
        "1": {"deep": str(object)},
    }


def test_the_train_function_is_named_by_its_import_path_through_rays_wrapper() -> None:
    @functools.wraps(train_func)
    def wrapper() -> Any:  # what Ray's construct_train_func makes
        return train_func({})

    assert train_fn_path(wrapper) == "examples.ray_train_recorded:train_func"


def test_a_closure_has_no_import_path_and_is_kept_as_the_callable() -> None:
    def make() -> Any:
        def inner() -> None:
            pass

        return inner

    closure = make()
    assert train_fn_path(closure) is closure  # WorkerGroupContext pickles a callable


def test_only_the_settings_travel_to_the_controller() -> None:
    pytest.importorskip("ray.train.v2")
    from wgstore.orchestration.ray_train import RecordingCallback

    callback = RecordingCallback("sqlite:////tmp/x.db", run_name="r", strict=True, hold_s=0)
    copy = pickle.loads(pickle.dumps(callback))
    assert (copy.url, copy.run_name, copy.strict) == ("sqlite:////tmp/x.db", "r", True)
    assert copy.hold_s == 0
    assert copy.writer is None and copy._run_id == ""  # fresh: nothing of a run travels


@pytest.mark.parametrize("url", ["wgstore.db", "", None])
def test_a_url_that_is_not_a_database_url_is_refused_with_an_example(url: Any) -> None:
    pytest.importorskip("ray.train.v2")
    from wgstore.orchestration.ray_train import RecordingCallback

    with pytest.raises(ValueError, match=r"needs a database URL like 'sqlite:///wgstore.db'"):
        RecordingCallback(url)


def test_a_relative_sqlite_path_is_made_absolute_in_the_driver(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The controller actor has another working directory: it must open the driver's file.
    pytest.importorskip("ray.train.v2")
    from wgstore.orchestration.ray_train import RecordingCallback

    monkeypatch.chdir(tmp_path)
    assert RecordingCallback("sqlite:///w.db").url == f"sqlite:///{tmp_path}/w.db"
    assert (
        RecordingCallback("sqlite:///sub/w.db?busy_timeout=1").url
        == f"sqlite:///{tmp_path}/sub/w.db?busy_timeout=1"
    )
    for unchanged in ("sqlite:////abs/w.db", "postgresql+psycopg://u@h/db"):
        assert RecordingCallback(unchanged).url == unchanged
