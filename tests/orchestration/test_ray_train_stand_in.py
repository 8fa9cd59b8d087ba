"""The Ray Train workers get a stand-in for ``RecordingCallback``, not wgstore's event catalog.

Ray Train hands each worker the run config, callbacks included; unpickling the real callback
there imported about 27 wgstore modules per worker while the workers started (the recording
overhead's largest part in bench/ray_train_overhead.py). The real-Ray runs of test_ray_train.py
show recording still works with the stand-in; these tests pin the mechanism itself.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

pytest.importorskip("ray.train.v2")

import cloudpickle

from wgstore.orchestration.ray_train import callback as callback_module
from wgstore.orchestration.ray_train.callback import RecordingCallback
from wgstore.orchestration.ray_train.stand_in import RecordingStandIn


def test_from_the_driver_the_callback_travels_whole() -> None:
    sent = RecordingCallback("sqlite:////tmp/wgstore-stand-in.db", run_name="whole", lease_s=12)
    received = cloudpickle.loads(cloudpickle.dumps(sent))
    assert isinstance(received, RecordingCallback)
    assert (received.url, received.run_name, received.lease_s) == (sent.url, "whole", 12.0)


def test_from_a_recording_controller_every_copy_is_an_inert_stand_in(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    copy_in_the_run_config = RecordingCallback("sqlite:////tmp/wgstore-stand-in.db")
    monkeypatch.setattr(callback_module._process, "is_controller", True)
    data = cloudpickle.dumps({"callbacks": [copy_in_the_run_config]})
    received = cloudpickle.loads(data)["callbacks"][0]
    assert isinstance(received, RecordingStandIn)
    from ray.train.v2.api.callback import RayTrainCallback

    assert isinstance(received, RayTrainCallback)  # RunConfig's own check still holds
    # A worker unpickling it loads no part of wgstore's catalog, store or read models.
    script = (
        "import pickle, sys; pickle.loads(sys.stdin.buffer.read()); "
        "print(sorted(m for m in sys.modules if m.startswith('wgstore')))"
    )
    loaded = subprocess.run(
        [sys.executable, "-c", script], input=data, capture_output=True, check=True
    ).stdout.decode()
    assert "wgstore.orchestration.ray_train.stand_in" in loaded
    for heavy in ("wgstore.events", "wgstore.projections", "ray_train.callback"):
        assert f"{heavy}'" not in loaded and f"{heavy}." not in loaded, loaded


def test_hooks_called_in_a_driver_do_not_turn_its_callbacks_into_stand_ins(
    ray_session: None,
) -> None:
    """Only a controller actor's process sends stand-ins: a driver (no actor) that calls a
    hook itself (a test, a notebook) still pickles its callbacks whole."""
    driver_side = RecordingCallback("sqlite:////tmp/wgstore-stand-in.db")
    driver_side.after_controller_start(object())  # a hook never raises into Ray; this fails
    assert callback_module._process.is_controller is False
    assert isinstance(cloudpickle.loads(cloudpickle.dumps(driver_side)), RecordingCallback)
