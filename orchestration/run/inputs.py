"""A new run's inputs, checked before Ray starts (what ``wgstore run`` checks first).

:func:`check_run_inputs`: the train function's form, its JSON config, then that the function
imports as a worker would import it; :func:`check_new_run_id`: a run id of the allowed form that
no run has yet. Messages are worded for the command line (they name ``--config`` and
``--run-id``) and say how to fix what is wrong. Nothing here imports Ray.
"""

from __future__ import annotations

import json
import os
import re
from typing import Any

from wgstore.events import EventStore, InvalidArgumentError
from wgstore.events.streams import run_stream
from wgstore.orchestration.train_fn.loading import check_train_fn_imports, check_train_fn_path

__all__ = [
    "RUN_ID_PATTERN",
    "check_new_run_id",
    "check_run_inputs",
    "parse_train_config",
    "parse_workers",
]

RUN_ID_PATTERN = re.compile(r"^[A-Za-z0-9_.-]{1,128}$")
"""What a run id may be: 1-128 letters, digits, ``_``, ``.`` or ``-``."""


def parse_train_config(text: str | None) -> dict[str, Any]:
    """The train function's config from JSON text (``{}`` for none or empty).

    Raises:
        InvalidArgumentError: not JSON, or JSON but not an object.
    """
    try:
        config = json.loads(text) if text else {}
    except (json.JSONDecodeError, RecursionError) as error:
        raise InvalidArgumentError(f"--config is not valid JSON: {error}") from None
    if not isinstance(config, dict):
        raise InvalidArgumentError("--config must be a JSON object, e.g. '{\"steps\": 50}'")
    return config


def parse_workers(text: str) -> int | tuple[int, int]:
    """``--workers``: ``N`` workers, or ``MIN..MAX`` for an elastic run (``2..4``).

    Raises:
        InvalidArgumentError: not a whole number or a range of two, a count below 1, or a
            minimum above the maximum, named with what to write instead.
    """
    low, dots, high = text.strip().partition("..")
    parts = (low, high) if dots else (low,)
    try:
        numbers = [int(part) for part in parts]
    except ValueError:
        raise InvalidArgumentError(
            f"--workers takes a whole number (4) or a range MIN..MAX (2..4), got {text!r}"
        ) from None
    if any(n < 1 for n in numbers):
        raise InvalidArgumentError(f"--workers {text}: a run needs at least 1 worker")
    if len(numbers) == 1:
        return numbers[0]
    if numbers[0] > numbers[1]:
        raise InvalidArgumentError(
            f"--workers {text}: the minimum ({numbers[0]}) is above the maximum ({numbers[1]}); "
            f"write {numbers[1]}..{numbers[0]}"
        )
    return numbers[0], numbers[1]


def check_run_inputs(
    train_fn: str, config: str | None, *, folder: str, external_executor: bool = False
) -> dict[str, Any]:
    """Check ``train_fn`` (``"package.module:function"``) and its JSON ``config``; return the
    config.

    The function is imported once in a child interpreter working in ``folder``, as the workers
    import it (they add that folder to ``sys.path``). On a cluster at ``RAY_ADDRESS``, or with an
    ``external_executor``, the workers may have modules this machine has not: a module missing
    here is then left to them.

    Raises:
        TrainFnError: ``train_fn`` is not of that form, or does not import.
        InvalidArgumentError: ``config`` is not a JSON object.
    """
    check_train_fn_path(train_fn)
    train_config = parse_train_config(config)
    workers_may_differ = external_executor or bool(os.environ.get("RAY_ADDRESS"))
    check_train_fn_imports(train_fn, folder, workers_may_differ=workers_may_differ)
    return train_config


def check_new_run_id(store: EventStore, run_id: str) -> None:
    """Check that ``run_id`` can name a new run in ``store``.

    Raises:
        InvalidArgumentError: not of :data:`RUN_ID_PATTERN`'s form, or a run has that id.
    """
    if not RUN_ID_PATTERN.match(run_id):
        raise InvalidArgumentError(
            f"--run-id must be 1-128 letters, digits, '_', '.' or '-', got {run_id!r}"
        )
    if store.stream_version(run_stream(run_id)):
        raise InvalidArgumentError(
            f"run {run_id} exists already; continue it with `wgstore run --resume {run_id}`, "
            "or choose another --run-id"
        )
