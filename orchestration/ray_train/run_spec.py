"""What a recorded Ray Train run needs to be started again: encoded into ``TrainerRecorded``,
and decoded back into a :class:`ResumeSpec`.

Encoding happens in two places, because Ray shows the parts in two places:

- In the driver, when Ray pickles :class:`~wgstore.orchestration.ray_train.RecordingCallback`
  to the controller (inside ``trainer.fit()``): the trainer object is on the call stack there
  (:func:`find_trainer`), so its class, the user's own train loop (not Ray's wrapper) and its
  datasets are taken from it (:func:`encode_driver_part`). Nothing else reaches the datasets.
- In the controller (``after_controller_start``): the configs, from Ray's ``TrainRunContext``
  (:func:`encode_run_spec`).

A part that cannot be pickled does not fail anything: the run is recorded as not resumable, with
the reason. Pickles up to :data:`INLINE_LIMIT` bytes sit in the event; larger ones are stored once
in ``wg_blobs`` (content-addressed) and named by their SHA-256.

Decoding (:func:`decode_run_spec`) is pure apart from importing the trainer class and the train
loop: every pickle is checked against its SHA-256 before it is loaded.
"""

from __future__ import annotations

import hashlib
import importlib
import inspect
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from wgstore.events.run import Pickled, TrainerRecorded
from wgstore.orchestration.train_fn.loading import IMPORT_PATH

__all__ = [
    "INLINE_LIMIT",
    "DriverPart",
    "NotResumableError",
    "ResumeSpec",
    "build_trainer",
    "decode_run_spec",
    "encode_driver_part",
    "encode_run_spec",
    "find_trainer",
    "qualified_name",
]

INLINE_LIMIT = 256 * 1024
"""Pickles larger than this (bytes) go to ``wg_blobs``, once per content; smaller ones sit in the
event. 256 KiB keeps an event small enough to read and hash quickly while a typical train loop
(a few KiB) and its configs stay inline."""

_RECORDING_CALLBACK = "wgstore.orchestration.ray_train.callback:RecordingCallback"
_FAILURE_FIELDS = (
    "max_failures",
    "controller_failure_limit",
    "max_preemption_failures",
    "relax_collectives_on_preemption",
    "preemption_grace_s",
)
"""Ray 2.60's ``FailureConfig`` fields (those a given Ray lacks are left out)."""


class NotResumableError(ValueError):
    """A recorded run cannot be rebuilt: it was recorded as not resumable, or a recorded part no
    longer loads (its bytes do not match their hash, its class or module is gone)."""


def qualified_name(value: Any) -> str:
    """``module:qualname`` of a class or function (of the value's type for anything else)."""
    target = value if inspect.isclass(value) or inspect.isroutine(value) else type(value)
    module = getattr(target, "__module__", None) or "__main__"
    return f"{module}:{getattr(target, '__qualname__', type(target).__qualname__)}"


def _pickle(value: Any, blobs: list[bytes]) -> Pickled:
    """``value`` as a :class:`Pickled` (raises what cloudpickle raises)."""
    import cloudpickle

    data = cloudpickle.dumps(value)
    digest = hashlib.sha256(data).hexdigest()
    if len(data) > INLINE_LIMIT:
        blobs.append(data)
        return Pickled(sha256=digest, size=len(data), type=qualified_name(value))
    return Pickled(sha256=digest, size=len(data), type=qualified_name(value), data=data)


def _why(error: BaseException) -> str:
    text = f"{type(error).__name__}: {error}"
    return text if len(text) <= 300 else text[:297] + "..."


def _importable(fn: Any) -> str | None:
    """The import path of a module-level function reachable again by it (not ``__main__``)."""
    module = getattr(fn, "__module__", None) or "__main__"
    qualname = getattr(fn, "__qualname__", "")
    path = f"{module}:{qualname}"
    if (
        inspect.isfunction(fn)
        and module != "__main__"
        and IMPORT_PATH.match(path)
        and getattr(sys.modules.get(module), qualname, None) is fn
    ):
        return path
    return None


@dataclass(frozen=True, slots=True)
class DriverPart:
    """What the driver contributes: the trainer class, the train loop, the datasets, and the
    bytes among them too large for the event (``blobs``); ``problems`` say what failed."""

    trainer: str
    train_loop: str
    train_loop_pickle: Pickled | None = None
    datasets: Mapping[str, Pickled] = field(default_factory=dict)
    blobs: tuple[bytes, ...] = ()
    problems: tuple[str, ...] = ()


def _encode_train_loop(fn: Any, blobs: list[bytes], problems: list[str]) -> tuple[str, Any]:
    fn = inspect.unwrap(fn)
    path = _importable(fn)
    if path is not None:
        return path, None
    name = qualified_name(fn)
    try:
        return name, _pickle(fn, blobs)
    except Exception as error:  # noqa: BLE001 - anything cloudpickle raises
        problems.append(f"the train loop {name} cannot be pickled ({_why(error)})")
        return name, None


def encode_driver_part(trainer: Any) -> DriverPart:
    """The driver's part of the record, from a Ray Train trainer object. Never raises."""
    blobs: list[bytes] = []
    problems: list[str] = []
    train_loop, pickled = _encode_train_loop(
        getattr(trainer, "train_loop_per_worker", None), blobs, problems
    )
    datasets: dict[str, Pickled] = {}
    for name, dataset in dict(getattr(trainer, "datasets", None) or {}).items():
        try:
            datasets[str(name)] = _pickle(dataset, blobs)
        except Exception as error:  # noqa: BLE001
            problems.append(f"dataset {name!r} cannot be pickled ({_why(error)})")
    return DriverPart(
        trainer=qualified_name(type(trainer)),
        train_loop=train_loop,
        train_loop_pickle=pickled,
        datasets=datasets,
        blobs=tuple(blobs),
        problems=tuple(problems),
    )


def find_trainer(max_depth: int = 60) -> Any:
    """The Ray Train trainer whose ``fit()`` is on the calling thread's stack, or ``None``.

    Called while Ray pickles the callback to the controller (inside ``fit()``)."""
    try:
        from ray.train.v2.api.data_parallel_trainer import DataParallelTrainer
    except ImportError:
        return None
    frame = inspect.currentframe()
    depth = 0
    while frame is not None and depth < max_depth:
        candidate = frame.f_locals.get("self")
        if isinstance(candidate, DataParallelTrainer):
            return candidate
        frame = frame.f_back
        depth += 1
    return None


def _run_config_fields(run_config: Any, problems: list[str]) -> dict[str, Any]:
    """The ``RunConfig`` fields a resume sets again, as JSON; other callbacks by name."""
    from wgstore.orchestration.ray_train.translate import jsonable

    failure = run_config.failure_config
    checkpoint = run_config.checkpoint_config
    fields: dict[str, Any] = {
        "name": run_config.name,
        "storage_path": run_config.storage_path,
        "failure_config": {
            name: getattr(failure, name)
            for name in _FAILURE_FIELDS
            if isinstance(getattr(failure, name, None), bool | int | float)
        },
        "checkpoint_config": {
            "num_to_keep": checkpoint.num_to_keep,
            "checkpoint_score_attribute": checkpoint.checkpoint_score_attribute,
            "checkpoint_score_order": checkpoint.checkpoint_score_order,
        },
        "worker_runtime_env": jsonable(run_config.worker_runtime_env or {}),
        "callbacks": [
            qualified_name(cb)
            for cb in run_config.callbacks or []
            if qualified_name(cb) != _RECORDING_CALLBACK
        ],
    }
    filesystem = getattr(run_config, "storage_filesystem", None)
    if filesystem is not None:
        fields["storage_filesystem"] = qualified_name(filesystem)
        problems.append(
            f"a custom storage_filesystem ({qualified_name(filesystem)}) is not recorded"
        )
    return fields


def encode_run_spec(
    part: DriverPart | None,
    *,
    train_loop_config: Any,
    scaling_config: Any,
    run_config: Any,
    backend_config: Any,
    fallback_train_loop: Any = None,
) -> tuple[TrainerRecorded, tuple[bytes, ...]]:
    """The ``TrainerRecorded`` event of a run, and the bytes to store in ``wg_blobs`` first.

    ``part`` is the driver's (``None`` when the trainer was not found there: the train loop is
    then ``fallback_train_loop``, Ray's wrapper unwrapped, and the datasets are unknown, which
    makes the run not resumable). Never raises for what cannot be pickled.
    """
    from wgstore.orchestration.ray_train.translate import jsonable

    blobs: list[bytes] = list(part.blobs) if part is not None else []
    problems: list[str] = list(part.problems) if part is not None else []
    if part is None:
        problems.append("the trainer was not found when fit() started: its datasets are unknown")
        trainer = qualified_name(type(backend_config))
        train_loop, train_loop_pickle = _encode_train_loop(fallback_train_loop, blobs, problems)
        datasets: Mapping[str, Pickled] = {}
    else:
        trainer = part.trainer
        train_loop, train_loop_pickle = part.train_loop, part.train_loop_pickle
        datasets = part.datasets
    pickled: dict[str, Pickled | None] = {}
    for name, value in (
        ("train_loop_config", train_loop_config),
        ("scaling_config", scaling_config),
        ("backend_config", backend_config),
    ):
        if value is None:
            pickled[name] = None
            continue
        try:
            pickled[name] = _pickle(value, blobs)
        except Exception as error:  # noqa: BLE001
            pickled[name] = None
            problems.append(f"the {name} cannot be pickled ({_why(error)})")
    try:
        run_fields = _run_config_fields(run_config, problems)
    except Exception as error:  # noqa: BLE001 - a RunConfig of another shape
        run_fields = {}
        problems.append(f"the run_config cannot be read ({_why(error)})")
    event = TrainerRecorded(
        trainer=trainer,
        train_loop=train_loop,
        train_loop_pickle=train_loop_pickle,
        train_loop_config=pickled["train_loop_config"],
        train_loop_config_json=jsonable(train_loop_config or {}),
        scaling_config=pickled["scaling_config"],
        run_config=run_fields,
        backend_config=pickled["backend_config"],
        datasets=dict(datasets),
        resumable=not problems,
        not_resumable_reason="; ".join(problems) or None,
    )
    return event, tuple(blobs)


# ------------------------------------------------------------------------------------ decoding


@dataclass(frozen=True, slots=True, kw_only=True)
class ResumeSpec:
    """A recorded Ray Train run, rebuilt: what its trainer is constructed from again.

    ``run_config`` holds ``RunConfig`` keyword arguments (``failure_config`` and
    ``checkpoint_config`` as Ray's classes); ``other_callbacks`` the qualified names of the
    callbacks other than wgstore's that the run had (not rebuilt: a resume passes its own).
    """

    trainer_class: type
    train_loop: Callable[..., Any]
    train_loop_config: Any
    scaling_config: Any
    backend_config: Any
    run_config: Mapping[str, Any]
    other_callbacks: tuple[str, ...]
    datasets: Mapping[str, Any]


def _load(pickled: Pickled | None, what: str, load_blob: Callable[[str], bytes]) -> Any:
    import cloudpickle

    if pickled is None:
        return None
    data = pickled.data
    if data is None:
        try:
            data = load_blob(pickled.sha256)
        except Exception as error:  # noqa: BLE001 - a missing blob: not resumable
            raise NotResumableError(
                f"the {what} ({pickled.sha256}) cannot be read: {error}"
            ) from None
    digest = hashlib.sha256(data).hexdigest()
    if digest != pickled.sha256:
        raise NotResumableError(
            f"the {what}'s bytes no longer match their hash (recorded {pickled.sha256}, "
            f"they hash to {digest}); nothing was loaded"
        )
    try:
        return cloudpickle.loads(data)
    except Exception as error:  # noqa: BLE001 - e.g. a module the pickle needs is gone
        raise NotResumableError(f"the {what} cannot be unpickled ({_why(error)})") from None


def _import(path: str, what: str) -> Any:
    module_name, _, qualname = path.partition(":")
    try:
        target: Any = importlib.import_module(module_name)
        for part in qualname.split("."):
            target = getattr(target, part)
    except Exception as error:  # noqa: BLE001
        raise NotResumableError(f"the {what} {path} cannot be imported ({_why(error)})") from None
    return target


def decode_run_spec(event: TrainerRecorded, load_blob: Callable[[str], bytes]) -> ResumeSpec:
    """What a resume needs, from the recorded event; ``load_blob(sha256)`` reads ``wg_blobs``.

    Raises:
        NotResumableError: the run was recorded as not resumable (the reason says why), or a
            part no longer loads (bytes that do not match their hash, a class that is gone).
    """
    if not event.resumable:
        raise NotResumableError(f"not resumable: {event.not_resumable_reason}")
    trainer_class = _import(event.trainer, "trainer class")
    if event.train_loop_pickle is not None:
        train_loop = _load(event.train_loop_pickle, "train loop", load_blob)
    else:
        train_loop = _import(event.train_loop, "train loop")
    if not callable(train_loop):
        raise NotResumableError(f"the train loop {event.train_loop} is not callable")
    fields = dict(event.run_config)
    from ray.train.v2.api.config import CheckpointConfig, FailureConfig

    run_config = {
        "name": fields.get("name"),
        "storage_path": fields.get("storage_path"),
        "failure_config": FailureConfig(**fields.get("failure_config", {})),
        "checkpoint_config": CheckpointConfig(**fields.get("checkpoint_config", {})),
        "worker_runtime_env": fields.get("worker_runtime_env") or None,
    }
    return ResumeSpec(
        trainer_class=trainer_class,
        train_loop=train_loop,
        train_loop_config=_load(event.train_loop_config, "train_loop_config", load_blob),
        scaling_config=_load(event.scaling_config, "scaling_config", load_blob),
        backend_config=_load(event.backend_config, "backend_config", load_blob),
        run_config=run_config,
        other_callbacks=tuple(fields.get("callbacks", ())),
        datasets={
            name: _load(pickled, f"dataset {name!r}", load_blob)
            for name, pickled in event.datasets.items()
        },
    )


def build_trainer(spec: ResumeSpec, *, callbacks: list[Any]) -> Any:
    """The trainer of ``spec``, constructed again with ``callbacks`` in its ``RunConfig``.

    The backend config goes to the trainer's own keyword for it (``backend_config`` for
    ``DataParallelTrainer``, ``torch_config`` for ``TorchTrainer``, ...).
    """
    from ray.train.v2.api.config import RunConfig

    run_config = RunConfig(
        **{k: v for k, v in spec.run_config.items() if v is not None}, callbacks=callbacks
    )
    kwargs: dict[str, Any] = {
        "train_loop_config": spec.train_loop_config,
        "scaling_config": spec.scaling_config,
        "run_config": run_config,
        "datasets": dict(spec.datasets) or None,
    }
    if spec.backend_config is not None:
        parameters = inspect.signature(spec.trainer_class).parameters
        if "backend_config" in parameters:
            kwargs["backend_config"] = spec.backend_config
        else:
            named = [
                name
                for name in parameters
                if name.endswith("_config") and name not in (*kwargs, "dataset_config")
            ]
            if len(named) == 1:
                kwargs[named[0]] = spec.backend_config
    return spec.trainer_class(spec.train_loop, **kwargs)
