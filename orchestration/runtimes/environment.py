"""What environment the workers of a group get: Ray Train's propagated variables and a runtime_env.

Ray Train copies a fixed set of environment variables (``RAY_TRAIN_*`` and a few others,
``ENV_VARS_TO_PROPAGATE``) from the driver to every worker, merged under the user's
``worker_runtime_env`` (the user's ``env_vars`` win). wgstore does the same at
``WorkerGroup.create()``: the variables set in the creating process then are merged into the
context's ``runtime_env`` and so recorded in ``WorkerGroupStartRequested``, and the executor
starts every worker actor with that ``runtime_env``. A restarted executor on another machine
applies what the log says, not its own environment. No Ray import here.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

__all__ = ["PROPAGATED_ENV_VARS", "env_vars_to_propagate", "worker_runtime_env"]

PROPAGATED_ENV_VARS: frozenset[str] = frozenset(
    {
        "RAY_TRAIN_V2_ENABLED",
        "RAY_TRAIN_HEALTH_CHECK_INTERVAL_S",
        "RAY_TRAIN_WORKER_HEALTH_CHECK_TIMEOUT_S",
        "RAY_TRAIN_WORKER_GROUP_START_TIMEOUT_S",
        "RAY_TRAIN_COLLECTIVE_TIMEOUT_S",
        "RAY_TRAIN_COLLECTIVE_WARN_INTERVAL_S",
        "RAY_TRAIN_CHECKPOINT_UPLOAD_WARN_INTERVAL_S",
        "RAY_TRAIN_ENABLE_PRINT_PATCH",
        "RAY_TRAIN_ENABLE_CONTROLLER_STRUCTURED_LOGGING",
        "RAY_TRAIN_ENABLE_WORKER_STRUCTURED_LOGGING",
        "RAY_TRAIN_ENABLE_STATE_ACTOR_RECONCILIATION",
        "RAY_TRAIN_STATE_ACTOR_RECONCILIATION_INTERVAL_S",
        "RAY_WARN_BLOCKING_GET_INSIDE_ASYNC",
        "TORCHFT_LIGHTHOUSE",
        "RAY_TRAIN_ENABLE_PREEMPTION_WATCHER",
        "RAY_TRAIN_PREEMPTION_POLL_INTERVAL_S",
        "NCCL_RAS_ADDR",
    }
)
"""Ray Train 2.60's ``ENV_VARS_TO_PROPAGATE`` (checked against Ray's own set by the tests).
Besides these, every variable whose name starts with ``RAY_TRAIN_`` is propagated."""


def env_vars_to_propagate(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The variables of ``environ`` (default: this process's) that workers get, sorted by name."""
    env = os.environ if environ is None else environ
    return {
        name: env[name]
        for name in sorted(env)
        if name in PROPAGATED_ENV_VARS or name.startswith("RAY_TRAIN_")
    }


def worker_runtime_env(
    runtime_env: Mapping[str, Any], environ: Mapping[str, str] | None = None
) -> dict[str, Any]:
    """``runtime_env`` with the propagated variables merged under its own ``env_vars``.

    As Ray's ``WorkerGroup._get_worker_runtime_env``: the user's ``env_vars`` win over the
    propagated ones. Returns ``runtime_env`` unchanged (a copy) when nothing is propagated.
    """
    merged = dict(runtime_env)
    env_vars = {**env_vars_to_propagate(environ), **dict(runtime_env.get("env_vars") or {})}
    if env_vars:
        merged["env_vars"] = env_vars
    return merged
