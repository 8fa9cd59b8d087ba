"""``TrainerRecorded``: what a Ray Train run needs to be resumed, encoded and decoded back.

Pure (no Ray cluster, no database): Ray's config classes are plain objects, the trainer here a
stand-in with a trainer's attributes, blobs a dict.
"""

from __future__ import annotations

import hashlib
import threading
from dataclasses import replace
from typing import Any

import pytest

pytest.importorskip("ray.train.v2")

from ray.train.backend import BackendConfig
from ray.train.v2.api.callback import UserCallback
from ray.train.v2.api.config import (
    CheckpointConfig,
    FailureConfig,
    RunConfig,
    ScalingConfig,
)
from ray.train.v2.api.data_parallel_trainer import DataParallelTrainer

from wgstore.events.codec import Codec
from wgstore.orchestration.ray_train.callback import RecordingCallback
from wgstore.orchestration.ray_train.run_spec import (
    INLINE_LIMIT,
    NotResumableError,
    build_trainer,
    decode_run_spec,
    encode_driver_part,
    encode_run_spec,
)


def train_loop(config: dict[str, Any]) -> int:
    """A module-level train loop: recorded by its import path."""
    return int(config["steps"])


class OtherCallback(UserCallback):
    """A callback of the user's, recorded by name only."""


class Trainer:
    """Stands in for a trainer object as the driver sees it in ``fit()``."""

    def __init__(self, loop: Any, datasets: dict[str, Any] | None = None) -> None:
        self.train_loop_per_worker = loop
        self.datasets = datasets or {}


def _run_config() -> RunConfig:
    return RunConfig(
        name="nightly",
        storage_path="/tmp/ckpt/storage",
        failure_config=FailureConfig(max_failures=2),
        checkpoint_config=CheckpointConfig(num_to_keep=3),
        callbacks=[RecordingCallback("sqlite:////tmp/x.db"), OtherCallback()],
    )


def _encode(trainer: Any, **overrides: Any) -> tuple[Any, dict[str, bytes]]:
    inputs: dict[str, Any] = {
        "train_loop_config": {"steps": 7, "lr": 0.1},
        "scaling_config": ScalingConfig(num_workers=2, resources_per_worker={"CPU": 0.5}),
        "run_config": _run_config(),
        "backend_config": BackendConfig(),
        **overrides,
    }
    event, blobs = encode_run_spec(encode_driver_part(trainer), **inputs)
    stored = {hashlib.sha256(b).hexdigest(): b for b in blobs}
    codec = Codec()
    info, data = codec.encode(event)  # as stored in the log, and read back
    return codec.decode(info.name, info.version, data, stream_id="run-r1", position=1), stored


def test_a_module_level_loop_is_recorded_by_path_and_every_config_comes_back() -> None:
    event, blobs = _encode(Trainer(train_loop))
    assert event.resumable and event.not_resumable_reason is None
    assert (event.train_loop, event.train_loop_pickle) == (f"{__name__}:train_loop", None)
    assert event.trainer == f"{__name__}:Trainer"
    assert event.train_loop_config_json == {"steps": 7, "lr": 0.1}
    assert event.run_config["callbacks"] == [f"{__name__}:OtherCallback"]  # not wgstore's own
    assert event.run_config["failure_config"]["max_failures"] == 2
    assert blobs == {}
    spec = decode_run_spec(event, blobs.__getitem__)
    assert spec.trainer_class is Trainer and spec.train_loop is train_loop
    assert spec.train_loop_config == {"steps": 7, "lr": 0.1}
    assert (spec.scaling_config.num_workers, spec.scaling_config.resources_per_worker) == (
        2,
        {"CPU": 0.5},
    )
    assert isinstance(spec.backend_config, BackendConfig)
    assert (spec.run_config["name"], spec.run_config["storage_path"]) == (
        "nightly",
        "/tmp/ckpt/storage",
    )
    assert spec.run_config["failure_config"].max_failures == 2
    assert spec.run_config["checkpoint_config"].num_to_keep == 3
    assert spec.other_callbacks == (f"{__name__}:OtherCallback",)


def test_a_closure_is_pickled_with_its_hash_and_runs_again() -> None:
    offset = 5
    event, blobs = _encode(Trainer(lambda config: config["steps"] + offset))
    pickled = event.train_loop_pickle
    assert pickled is not None and pickled.data is not None and len(pickled.sha256) == 64
    assert event.train_loop.endswith("<lambda>")
    spec = decode_run_spec(event, blobs.__getitem__)
    assert spec.train_loop({"steps": 1}) == 6


def test_bytes_that_no_longer_match_their_hash_are_refused_unloaded() -> None:
    event, blobs = _encode(Trainer(lambda config: 1))
    assert event.train_loop_pickle is not None and event.train_loop_pickle.data is not None
    tampered = replace(
        event,
        train_loop_pickle=replace(
            event.train_loop_pickle, data=event.train_loop_pickle.data + b"."
        ),
    )
    with pytest.raises(NotResumableError, match="no longer match their hash"):
        decode_run_spec(tampered, blobs.__getitem__)


def test_an_unpicklable_train_loop_makes_the_run_not_resumable_with_the_reason() -> None:
    lock = threading.Lock()

    def holds_a_lock(config: dict[str, Any]) -> None:
        with lock:
            pass

    event, _ = _encode(Trainer(holds_a_lock))
    assert event.resumable is False
    assert "holds_a_lock cannot be pickled" in event.not_resumable_reason
    assert "lock" in event.not_resumable_reason
    assert event.train_loop_config is not None  # the rest is still recorded
    with pytest.raises(NotResumableError, match="not resumable: the train loop"):
        decode_run_spec(event, {}.__getitem__)


def test_an_unpicklable_dataset_is_named_in_the_reason_and_others_are_kept() -> None:
    event, _ = _encode(Trainer(train_loop, {"train": [1, 2, 3], "eval": threading.Lock()}))
    assert event.resumable is False
    assert "dataset 'eval' cannot be pickled" in event.not_resumable_reason
    assert list(event.datasets) == ["train"]


def test_a_large_dataset_is_stored_once_by_hash_not_in_the_event() -> None:
    big = bytes(range(256)) * (INLINE_LIMIT // 256 + 1)
    event, blobs = _encode(Trainer(train_loop, {"train": big, "again": big}))
    train, again = event.datasets["train"], event.datasets["again"]
    assert train.data is None and train.size > INLINE_LIMIT
    assert train.sha256 == again.sha256 and list(blobs) == [train.sha256]
    spec = decode_run_spec(event, blobs.__getitem__)
    assert spec.datasets == {"train": big, "again": big}
    with pytest.raises(NotResumableError, match="cannot be read"):
        decode_run_spec(event, {}.__getitem__)


def test_an_unpicklable_config_is_a_reason_too_and_recording_never_raises() -> None:
    event, _ = _encode(Trainer(train_loop), train_loop_config={"lock": threading.Lock()})
    assert event.resumable is False
    assert "the train_loop_config cannot be pickled" in event.not_resumable_reason


def test_without_the_driver_part_the_datasets_are_unknown() -> None:
    event, _ = encode_run_spec(
        None,
        train_loop_config=None,
        scaling_config=ScalingConfig(num_workers=1),
        run_config=_run_config(),
        backend_config=BackendConfig(),
        fallback_train_loop=train_loop,
    )
    assert event.train_loop == f"{__name__}:train_loop"
    assert event.resumable is False and "datasets are unknown" in event.not_resumable_reason


def test_the_trainer_is_built_again_with_the_resume_s_callbacks() -> None:
    trainer = Trainer(train_loop)
    event, blobs = _encode(trainer)
    event = replace(event, trainer=f"{DataParallelTrainer.__module__}:DataParallelTrainer")
    spec = decode_run_spec(event, blobs.__getitem__)
    mine = OtherCallback()
    rebuilt = build_trainer(spec, callbacks=[mine])
    assert isinstance(rebuilt, DataParallelTrainer)
    assert rebuilt.train_loop_per_worker is train_loop
    assert rebuilt.train_loop_config == {"steps": 7, "lr": 0.1}
    assert rebuilt.run_config.name == "nightly" and rebuilt.run_config.callbacks == [mine]
    assert rebuilt.scaling_config.num_workers == 2


def test_an_elastic_run_is_rebuilt_with_its_range_so_a_resume_starts_at_what_fits() -> None:
    """Issue 40: ``wgstore resume`` of an orphaned elastic Ray Train run builds the trainer with
    its ``num_workers=(min, max)`` again, so Ray's elastic policy starts it at what fits now."""
    elastic = ScalingConfig(
        num_workers=(1, 4), resources_per_worker={"CPU": 1}, elastic_resize_monitor_interval_s=5
    )
    event, blobs = _encode(Trainer(train_loop), scaling_config=elastic)
    spec = decode_run_spec(event, blobs.__getitem__)
    assert spec.scaling_config.num_workers == (1, 4)
    assert spec.scaling_config.elasticity_enabled
    assert spec.scaling_config.elastic_resize_monitor_interval_s == 5
