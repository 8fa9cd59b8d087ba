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
    (tmp_path / "sub").mkdir()
    assert RecordingCallback("sqlite:///w.db").url == f"sqlite:///{tmp_path}/w.db"
    assert (
        RecordingCallback("sqlite:///sub/w.db?busy_timeout=1").url
        == f"sqlite:///{tmp_path}/sub/w.db?busy_timeout=1"
    )
    for unchanged in (f"sqlite:///{tmp_path}/w.db", "postgresql+psycopg://u@h/db"):
        assert RecordingCallback(unchanged).url == unchanged


def test_rays_elastic_scaling_config_is_its_range_and_a_fixed_one_has_none() -> None:
    from ray.train import ScalingConfig as RayScaling

    from wgstore.orchestration.ray_train.translate import scaling_config

    elastic = scaling_config(
        RayScaling(
            num_workers=(1, 3), resources_per_worker={"CPU": 2}, elastic_resize_monitor_interval_s=5
        )
    )
    assert (elastic.min_workers, elastic.num_workers, elastic.resources) == (1, 3, {"CPU": 2.0})
    assert elastic.elastic_resize_monitor_interval_s == 5.0
    fixed = scaling_config(RayScaling(num_workers=4))
    assert (fixed.min_workers, fixed.num_workers, fixed.elastic) == (None, 4, False)
    assert scaling_config(RayScaling(num_workers=(0, 2))).min_workers == 0  # Ray allows 0


def test_why_a_size_was_chosen_follows_the_state_ray_scheduled_from() -> None:
    from wgstore.events.run import ControllerState as S
    from wgstore.events.run import ResizeCause as C
    from wgstore.orchestration.ray_train.translate import resize_cause

    assert resize_cause(S.INITIALIZING, None, 2, None) is C.INITIAL
    assert resize_cause(None, None, 2, None) is C.INITIAL
    assert resize_cause(S.RESIZING, 2, 3, None) is C.GREW
    assert resize_cause(S.RESIZING, 3, 2, None) is C.SHRANK
    assert resize_cause(S.RESCHEDULING, 3, 2, "start") is C.START_RETRY
    assert resize_cause(S.RESTARTING, 3, 2, "preemption") is C.PREEMPTION
    assert resize_cause(S.RESTARTING, 3, 2, "worker_group") is C.FAILURE
    assert resize_cause(S.RESTARTING, None, 2, "worker_group") is C.INITIAL  # nothing before


def test_a_scaling_decision_says_what_fits_against_what_the_run_had() -> None:
    from wgstore.events.run import ResizeCause as C
    from wgstore.events.run import ScalingConfig
    from wgstore.orchestration.run.scaling import resize_reason

    elastic = ScalingConfig(num_workers=4, min_workers=1)
    assert resize_reason(C.INITIAL, None, 1, elastic) == "start: 1 worker fits (range 1..4)"
    assert resize_reason(C.GREW, 2, 4, None) == "more resources available: 4 workers fit; was 2"
    assert resize_reason(C.SHRANK, 4, 3, None) == "fewer resources available: 3 workers fit; was 4"
    assert resize_reason(C.FAILURE, 4, 3, None, "node lost: rank 3") == (
        "restart after a failure (node lost: rank 3): 3 workers fit; was 4"
    )
    assert resize_reason(C.PREEMPTION, 4, 2, None) == (
        "restart after a preemption (no detail): 2 workers fit; was 4"
    )


def test_a_failure_whose_workers_died_with_their_node_is_a_lost_node() -> None:
    from wgstore.events.run import RankError
    from wgstore.events.worker_group import ErrorInfo
    from wgstore.orchestration.run.scaling import failure_summary

    died = "The actor died because its node has died. Node Id: 7b63"
    lost = (
        RankError(world_rank=2, error=ErrorInfo(type="WorkerHealthCheckFailedError", message=died)),
    )
    assert failure_summary("worker_group", lost) == "node lost: rank 2"
    raised = (RankError(world_rank=0, error=ErrorInfo(type="ValueError", message="bad")),)
    assert failure_summary("worker_group", raised) == "worker_group failure: rank 0 ValueError"
    mixed = lost + raised
    assert failure_summary("worker_group", mixed).startswith("worker_group failure: rank 2")
    start = (RankError(world_rank=-1, error=ErrorInfo(type="ControllerError", message="t/o")),)
    assert failure_summary("start", start) == "start failure: ControllerError"
    assert failure_summary("start", ()) == "start failure"


def test_a_store_that_can_never_be_opened_is_refused_before_training_starts(
    tmp_path: Any,
) -> None:
    """Issue 41: such a URL used to be retried "as a brief outage" for the whole run, and only
    at its end did the controller say that every event was lost."""
    pytest.importorskip("ray.train.v2")
    from tests.conftest import PG_URL, require_postgres
    from wgstore.orchestration.ray_train import RecordingCallback

    with pytest.raises(ValueError, match=r"the folder '/nonexistent/sub' does not exist"):
        RecordingCallback("sqlite:////nonexistent/sub/w.db")
    with pytest.raises(ValueError, match="in-memory database"):
        RecordingCallback("sqlite:///:memory:")
    assert RecordingCallback(f"sqlite:///{tmp_path}/w.db").url == f"sqlite:///{tmp_path}/w.db"
    require_postgres()
    missing = PG_URL.rsplit("/", 1)[0] + "/wgstore_no_such_database"
    with pytest.raises(ValueError, match=r"does not exist.*create the database first"):
        RecordingCallback(missing)
    RecordingCallback(PG_URL)  # the test database exists: no error
