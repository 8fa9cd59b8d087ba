"""Workers get Ray Train's propagated variables and the group's runtime_env, as the log records.

The variables are set in this (driver) process after Ray is up, which Ray alone would not pass
to the workers; the train function returns what it saw, so the test reads it from the log.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.orchestration.conftest import assert_nothing_left, make_context
from wgstore.events.worker_group import WorkerGroupContext, stream_id_for_group
from wgstore.orchestration import WorkerGroup
from wgstore.orchestration.runtimes.environment import (
    PROPAGATED_ENV_VARS,
    env_vars_to_propagate,
    worker_runtime_env,
)

FN = "tests.orchestration.parity_fns:env_fn"


def test_the_propagated_names_are_ray_train_s() -> None:
    constants = pytest.importorskip("ray.train.v2._internal.constants")
    assert set(constants.ENV_VARS_TO_PROPAGATE) == PROPAGATED_ENV_VARS


MERGES = {
    "nothing to propagate leaves the runtime_env alone": (
        {"PATH": "/bin"},
        {"working_dir": "/w"},
        {"working_dir": "/w"},
    ),
    "Ray Train variables are added": (
        {"RAY_TRAIN_HEALTH_CHECK_INTERVAL_S": "3", "NCCL_RAS_ADDR": "h:1", "HOME": "/root"},
        {},
        {"env_vars": {"NCCL_RAS_ADDR": "h:1", "RAY_TRAIN_HEALTH_CHECK_INTERVAL_S": "3"}},
    ),
    "the user's env_vars win, as in Ray": (
        {"RAY_TRAIN_COLLECTIVE_TIMEOUT_S": "10"},
        {"env_vars": {"RAY_TRAIN_COLLECTIVE_TIMEOUT_S": "99", "A": "b"}, "pip": ["six"]},
        {"env_vars": {"RAY_TRAIN_COLLECTIVE_TIMEOUT_S": "99", "A": "b"}, "pip": ["six"]},
    ),
}


@pytest.mark.parametrize("case", list(MERGES.values()), ids=list(MERGES))
def test_the_worker_runtime_env_merges_as_ray_does(case: tuple[dict, dict, dict]) -> None:
    environ, runtime_env, expected = case
    assert worker_runtime_env(runtime_env, environ) == expected


def test_only_ray_train_variables_propagate() -> None:
    environ = {"RAY_TRAIN_ANYTHING": "1", "RAY_ADDRESS": "x", "SECRET": "s"}
    assert env_vars_to_propagate(environ) == {"RAY_TRAIN_ANYTHING": "1"}


BAD_ENVS = {
    "not a mapping": (["env_vars"], "runtime_env must be a mapping"),
    "a number as a value": ({"env_vars": {"N": 1}}, "quote numbers"),
    "a working_dir that is not a string": ({"working_dir": 3}, "working_dir"),
    "a pip that is a number": ({"pip": 3}, "pip"),
}


@pytest.mark.parametrize("case", list(BAD_ENVS.values()), ids=list(BAD_ENVS))
def test_a_malformed_runtime_env_is_refused_with_how_to_fix_it(case: tuple[Any, str]) -> None:
    runtime_env, words = case
    with pytest.raises(ValueError, match=words):
        WorkerGroupContext(num_workers=1, train_fn="m:f", runtime_env=runtime_env)


@pytest.mark.ray
def test_workers_see_the_driver_s_ray_train_variables_and_the_runtime_env(
    store: Any, executor: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RAY_TRAIN_HEALTH_CHECK_INTERVAL_S", "3.5")  # set after ray.init
    monkeypatch.setenv("RAY_TRAIN_COLLECTIVE_TIMEOUT_S", "10")
    # a folder of its own: tmp_path also holds the test's live SQLite store, which Ray would zip
    # (with its -wal and -shm files) while the executor writes it; the one run that did crashed
    # the suite with SIGBUS in a read of that store (under stress --cpu 2)
    shipped = tmp_path / "working_dir"
    shipped.mkdir()
    (shipped / "shipped.txt").write_text("in the working dir\n")
    names = ["RAY_TRAIN_HEALTH_CHECK_INTERVAL_S", "RAY_TRAIN_COLLECTIVE_TIMEOUT_S", "MY_VAR"]
    context = make_context(
        2,
        train_fn=FN,
        config={"names": names},
        runtime_env={
            "env_vars": {"MY_VAR": "mine", "RAY_TRAIN_COLLECTIVE_TIMEOUT_S": "99"},
            "working_dir": str(shipped),
        },
    )
    group = WorkerGroup.create(store, context, executor=executor)
    status = group.wait(timeout_s=120)

    assert status.errors == {}, status.get_error_string()
    for rank in (0, 1):
        seen = status.return_values[rank]
        assert seen["env"] == {
            "RAY_TRAIN_HEALTH_CHECK_INTERVAL_S": "3.5",
            "RAY_TRAIN_COLLECTIVE_TIMEOUT_S": "99",
            "MY_VAR": "mine",
        }
        assert "shipped.txt" in seen["files"]
    requested = next(iter(store.read_stream(stream_id_for_group(group.group_id)))).event
    assert requested.context.runtime_env["env_vars"] == {
        "MY_VAR": "mine",
        "RAY_TRAIN_COLLECTIVE_TIMEOUT_S": "99",
        "RAY_TRAIN_HEALTH_CHECK_INTERVAL_S": "3.5",
    }
    group.shutdown(reason="done")
    assert_nothing_left(group.group_id)
