"""Event types of the stream ``worker-group-<group_id>``.

One event per builder step and per lifecycle transition of a worker group, named in the past
tense. Field names are stable: stored events are read back by these names.
"""

from __future__ import annotations

import enum
import hashlib
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from wgstore.events.registry import event_type
from wgstore.events.streams import group_stream

__all__ = [
    "GROUP_RESOURCES",
    "CallbackFailed",
    "ErrorInfo",
    "PlacementGroupReserved",
    "StartStage",
    "SyncActorStarted",
    "TrainingLaunched",
    "WorkerEnding",
    "WorkerGroupContext",
    "WorkerGroupPolled",
    "WorkerGroupShutDown",
    "WorkerGroupShutdownRequested",
    "WorkerGroupStartFailed",
    "WorkerGroupStartRequested",
    "WorkerGroupStarted",
    "WorkerInfo",
    "WorkerReported",
    "WorkerShutdown",
    "WorkerStatusChange",
    "stream_id_for_group",
    "strip_ansi",
]

# ANSI escape sequences: CSI (colours, cursor moves: ESC [ ... final byte), OSC (ESC ] ... ended
# by BEL or ESC backslash), and the two-character escapes (ESC and one of @ to Z, backslash to _).
_ANSI = re.compile(r"\x1b(?:\][^\x07\x1b]*(?:\x07|\x1b\\)|\[[0-?]*[ -/]*[@-~]|[@-Z\\-_])")
_TRAIN_FN = re.compile(r"^[A-Za-z_][\w]*(\.[A-Za-z_][\w]*)*:[A-Za-z_][\w]*(\.[A-Za-z_][\w]*)*$")
_STRATEGIES = ("PACK", "SPREAD", "STRICT_PACK", "STRICT_SPREAD")
_HEALTH_CHECK_ERRORS = frozenset({"WorkerHealthCheckFailedError", "WorkerHealthCheckTimeoutError"})


def strip_ansi(text: str) -> str:
    """``text`` without ANSI escape sequences (terminal colours, cursor movement, titles)."""
    return _ANSI.sub("", text)


stream_id_for_group = group_stream
"""The stream of a worker group: :func:`wgstore.events.streams.group_stream` (kept name)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class WorkerGroupContext:
    """The configuration a worker group starts from; enough, with the log, to start it again.

    Args:
        num_workers: how many worker actors (one placement-group bundle each).
        resources_per_worker: Ray resources of one worker, e.g. ``{"CPU": 1, "GPU": 1}``.
        train_fn: the train function: an import path ``"package.module:function"`` (the
            readable default), or any callable. A module-level function becomes its import
            path; anything else (a lambda, a closure, a callable object) is pickled with
            cloudpickle: ``train_fn`` then holds its qualified name, ``train_fn_pickle`` the
            bytes (stored in the log, so an executor on another machine can start it again)
            and ``train_fn_digest`` their SHA-256, checked before the bytes are loaded.
        train_fn_config: JSON-able keyword config handed to the train function.
        placement_strategy: ``PACK``, ``SPREAD``, ``STRICT_PACK`` or ``STRICT_SPREAD``.
        resume_checkpoint: a checkpoint path the workers start from, if any.
        placement_timeout_s: how long to wait for the placement group before failing the start.
        poll_interval_s: seconds between polls of a running group.
        health_check_timeout_s: how long a poll may hang before the worker is marked failed.
        shutdown_patience_s: how long a shutdown waits for the workers' shutdown hooks before it
            kills them (Ray Train's ``patience_s``, 5 s); 0 kills at once.
        runtime_env: the workers' Ray ``runtime_env`` (``env_vars``, ``working_dir``, ``pip``,
            ...; Ray Train's ``RunConfig.worker_runtime_env``). ``WorkerGroup.create()`` merges
            the driver's Ray Train variables (``RAY_TRAIN_*``) into ``env_vars``, so the log
            holds what the workers got.
    """

    num_workers: int
    resources_per_worker: Mapping[str, float] = field(default_factory=lambda: {"CPU": 1.0})
    train_fn: str
    """The import path, or the qualified name of a pickled callable (``train_fn_pickle``)."""
    train_fn_config: Mapping[str, Any] = field(default_factory=dict)
    placement_strategy: str = "PACK"
    resume_checkpoint: str | None = None
    placement_timeout_s: float = 60.0
    poll_interval_s: float = 1.0
    health_check_timeout_s: float = 600.0
    shutdown_patience_s: float = 5.0
    runtime_env: Mapping[str, Any] = field(default_factory=dict)
    train_fn_pickle: bytes | None = None
    train_fn_digest: str | None = None

    def __post_init__(self) -> None:
        if callable(self.train_fn):
            for name, value in _train_fn_fields(self.train_fn).items():
                object.__setattr__(self, name, value)
        if isinstance(self.num_workers, bool) or not isinstance(self.num_workers, int):
            raise ValueError(f"num_workers must be an int >= 1, got {self.num_workers!r}")
        if self.num_workers < 1:
            raise ValueError(f"num_workers must be at least 1, got {self.num_workers}")
        if self.train_fn_pickle is not None:
            digest = hashlib.sha256(self.train_fn_pickle).hexdigest()
            if self.train_fn_digest != digest:
                raise ValueError(
                    f"train_fn_digest does not match the pickled train function {self.train_fn!r} "
                    f"(recorded {self.train_fn_digest!r}, the bytes hash to {digest!r}); the "
                    "bytes were changed: pass the function again"
                )
        elif not isinstance(self.train_fn, str) or not _TRAIN_FN.match(self.train_fn):
            raise ValueError(
                f"train_fn must be a callable or an import path 'package.module:function', got "
                f"{self.train_fn!r}"
            )
        if self.placement_strategy not in _STRATEGIES:
            raise ValueError(
                f"placement_strategy must be one of {', '.join(_STRATEGIES)}, "
                f"got {self.placement_strategy!r}"
            )
        for name, amount in dict(self.resources_per_worker).items():
            if not isinstance(amount, int | float) or isinstance(amount, bool) or amount < 0:
                raise ValueError(
                    f"resources_per_worker[{name!r}] must be a number >= 0, got {amount!r}"
                )
        for name in ("placement_timeout_s", "poll_interval_s", "health_check_timeout_s"):
            value = getattr(self, name)
            if not isinstance(value, int | float) or value <= 0:
                raise ValueError(f"{name} must be a number > 0, got {value!r}")
        _check_runtime_env(self.runtime_env)
        patience = self.shutdown_patience_s
        if not isinstance(patience, int | float) or isinstance(patience, bool) or patience < 0:
            raise ValueError(
                f"shutdown_patience_s must be a number >= 0 (0 kills the workers at once), "
                f"got {patience!r}"
            )


def _train_fn_fields(fn: Any) -> dict[str, Any]:
    """The context fields for callable ``fn``: its import path when it is a module-level
    function reachable again by that path, else its pickle (cloudpickle), name and digest."""
    import inspect
    import sys

    module = getattr(fn, "__module__", None) or "__main__"
    qualname = getattr(fn, "__qualname__", None) or type(fn).__qualname__
    path = f"{module}:{qualname}"
    if (
        inspect.isfunction(fn)
        and module != "__main__"
        and _TRAIN_FN.match(path)
        and getattr(sys.modules.get(module), qualname, None) is fn
    ):
        return {"train_fn": path}
    try:
        import cloudpickle
    except ImportError as error:
        raise ValueError(
            f"train_fn {path} is not a module-level function, and pickling it needs cloudpickle "
            "(pip install cloudpickle); or pass a module-level function"
        ) from error
    try:
        data = cloudpickle.dumps(fn)
    except Exception as error:
        raise ValueError(
            f"train_fn {path} cannot be pickled ({type(error).__name__}: {error}); make it a "
            "module-level function, or keep what it captures picklable"
        ) from error
    return {
        "train_fn": path,
        "train_fn_pickle": data,
        "train_fn_digest": hashlib.sha256(data).hexdigest(),
    }


def _check_runtime_env(runtime_env: Any) -> None:
    if not isinstance(runtime_env, Mapping):
        raise ValueError(
            f"runtime_env must be a mapping like {{'env_vars': {{'NAME': 'value'}}}}, "
            f"got {type(runtime_env).__name__}"
        )
    env_vars = runtime_env.get("env_vars", {})
    if not isinstance(env_vars, Mapping) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in env_vars.items()
    ):
        raise ValueError(
            f"runtime_env['env_vars'] must map names to string values, got {env_vars!r}; "
            "quote numbers, e.g. {'OMP_NUM_THREADS': '1'}"
        )
    working_dir = runtime_env.get("working_dir")
    if working_dir is not None and not isinstance(working_dir, str):
        raise ValueError(
            f"runtime_env['working_dir'] must be a path or URI string, got {working_dir!r}"
        )
    pip = runtime_env.get("pip")
    if pip is not None and not isinstance(pip, str | list | tuple | Mapping):
        raise ValueError(
            f"runtime_env['pip'] must be a list of requirements, a requirements file path or a "
            f"mapping with 'packages', got {pip!r}"
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class ErrorInfo:
    """An exception as data: its type, message and formatted traceback.

    Terminal escape sequences (Ray colours actor names, e.g. ``\\x1b[36mray::WgstoreWorker``)
    are removed from every field when the ``ErrorInfo`` is made, whoever makes it; the text is
    otherwise kept whole.
    """

    type: str
    message: str
    traceback: str = ""

    def __post_init__(self) -> None:
        for name in ("type", "message", "traceback"):
            value = getattr(self, name)
            if isinstance(value, str) and "\x1b" in value:
                object.__setattr__(self, name, strip_ansi(value))

    @classmethod
    def from_exception(cls, error: BaseException) -> ErrorInfo:
        """Capture ``error`` with its traceback."""
        import traceback

        return cls(
            type=type(error).__name__,
            message=str(error),
            traceback="".join(traceback.format_exception(error)),
        )

    def __str__(self) -> str:
        return f"{self.type}: {self.message}"

    @property
    def is_health_check_error(self) -> bool:
        """True for a worker the executor marked dead (its poll raised or hung), not a user error."""
        return self.type in _HEALTH_CHECK_ERRORS

    def ray_text(self) -> str:
        """The text Ray Train 2.60 shows for this error (``str()`` of its exception).

        A health-check error shows its message (which names the worker and the failure); an
        error raised by the train function shows the user's traceback, as Ray's
        ``UserExceptionWithTraceback`` does; anything without a traceback shows
        ``Type: message``.
        """
        if self.is_health_check_error:
            return self.message
        return self.traceback or str(self)


@dataclass(frozen=True, slots=True, kw_only=True)
class WorkerInfo:
    """One worker actor with its place in the group (ranks as Ray Train assigns them)."""

    world_rank: int
    local_rank: int
    node_rank: int
    local_world_size: int
    world_size: int
    node_id: str
    node_ip: str
    pid: int
    actor_id: str
    actor_name: str
    gpu_ids: tuple[str, ...] = ()


class StartStage(enum.StrEnum):
    """The step of a start that failed."""

    PLACEMENT_GROUP = "placement_group"
    SYNC_ACTOR = "sync_actor"
    WORKERS = "workers"
    INIT_TRAIN_CONTEXT = "init_train_context"
    LAUNCH = "launch"


@event_type("WorkerGroupStartRequested", version=1)
@dataclass(frozen=True, slots=True, kw_only=True)
class WorkerGroupStartRequested:
    """``WorkerGroup.create()`` asked for a new worker group."""

    group_id: str
    run_id: str
    attempt: int = 1
    context: WorkerGroupContext


@event_type("PlacementGroupReserved", version=1)
@dataclass(frozen=True, slots=True, kw_only=True)
class PlacementGroupReserved:
    """Builder step: the placement group is ready."""

    placement_group_id: str
    name: str
    bundles: tuple[Mapping[str, float], ...]
    strategy: str
    wait_s: float = 0.0


@event_type("SyncActorStarted", version=1)
@dataclass(frozen=True, slots=True, kw_only=True)
class SyncActorStarted:
    """Builder step: the synchronization actor is alive."""

    actor_id: str
    name: str


@event_type("WorkersStarted", version=1)
@dataclass(frozen=True, slots=True, kw_only=True)
class WorkersStarted:
    """Builder step: every worker actor is alive, sorted by node then GPU id, ranks assigned."""

    workers: tuple[WorkerInfo, ...]


@event_type("WorkerGroupStarted", version=1)
@dataclass(frozen=True, slots=True, kw_only=True)
class WorkerGroupStarted:
    """``build()``: the group is active."""

    start_time: datetime
    startup_s: float


@event_type("TrainingLaunched", version=1)
@dataclass(frozen=True, slots=True, kw_only=True)
class TrainingLaunched:
    """The train function started on every worker."""

    train_fn: str


@event_type("WorkerGroupStartFailed", version=1)
@dataclass(frozen=True, slots=True, kw_only=True)
class WorkerGroupStartFailed:
    """A start step raised; everything acquired so far was released."""

    stage: StartStage
    error: ErrorInfo
    released: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class WorkerStatusChange:
    """The new status of one worker whose status differs from the previous recorded poll."""

    world_rank: int
    running: bool
    error: ErrorInfo | None = None
    return_value: Any = None
    """What the train function returned (JSON-able), once it finished without error."""


@event_type("WorkerGroupPolled", version=1)
@dataclass(frozen=True, slots=True, kw_only=True)
class WorkerGroupPolled:
    """A poll that found something new, standing also for the unchanged polls before it.

    ``poll_seq`` counts every poll of the group, recorded or not; ``unchanged_polls`` is how many
    polls since the previous recorded one found nothing new, the first of them at
    ``unchanged_since``. ``changes`` holds only workers whose status changed.
    """

    poll_seq: int
    polled_at: datetime
    changes: tuple[WorkerStatusChange, ...] = ()
    unchanged_polls: int = 0
    unchanged_since: datetime | None = None


@event_type("WorkerReported", version=1)
@dataclass(frozen=True, slots=True, kw_only=True)
class WorkerReported:
    """A worker called ``report()``."""

    world_rank: int
    index: int
    metrics: Mapping[str, Any] = field(default_factory=dict)
    checkpoint: str | None = None


@event_type("WorkerGroupShutdownRequested", version=1)
@dataclass(frozen=True, slots=True, kw_only=True)
class WorkerGroupShutdownRequested:
    """``shutdown()`` was called (or the controller gave up on the group); ``abort`` for
    ``abort()`` (Ray's ``WorkerGroup.abort()``: the abort hooks run instead of the shutdown
    hooks). ``resized_to``: the group stops so that the run starts again at this size (an
    elastic run's resize: training did not fail and was not aborted)."""

    reason: str
    abort: bool = False
    resized_to: int | None = None


@event_type("CallbackFailed", version=1)
@dataclass(frozen=True, slots=True, kw_only=True)
class CallbackFailed:
    """A ``WorkerGroupCallback`` hook raised in the executor; the group went on regardless."""

    hook: str
    callback: str
    error: ErrorInfo


class WorkerEnding(enum.StrEnum):
    """How a worker ended at shutdown."""

    STOPPED = "stopped"
    """Its shutdown hooks ran to the end within the patience; then its actor was released."""
    KILLED = "killed"
    """The patience ran out first: the actor was killed with its hooks unfinished."""
    DEAD = "dead"
    """The actor was already gone (it crashed, or another process released it)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class WorkerShutdown:
    """How one worker ended at shutdown, and the error of its shutdown hooks, if any."""

    world_rank: int
    ending: WorkerEnding
    hook_error: ErrorInfo | None = None


GROUP_RESOURCES = ("workers", "sync_actor", "placement_group")
"""What a group recorded from Ray Train held on Ray, as the recorders (the callback, the export's
ingester) name it in ``WorkerGroupShutDown.released`` once Ray released it (wgstore's own
executor names each actor and placement group instead)."""


@event_type("WorkerGroupShutDown", version=1)
@dataclass(frozen=True, slots=True, kw_only=True)
class WorkerGroupShutDown:
    """Every resource of the group is released.

    ``workers`` says, per rank, whether the worker ended on its own (its shutdown hooks ran
    within ``patience_s``) or was killed; empty for a group whose workers never started, and
    in events written before graceful shutdown existed.
    """

    duration_s: float
    released: tuple[str, ...] = ()
    workers: tuple[WorkerShutdown, ...] = ()
    patience_s: float | None = None
