"""Train functions named by import path: resolve a path to a function, a function to a path.

A train function must be a plain function defined at module level, so that the log alone
(``"package.module:function"`` plus its JSON config) is enough to start the same group again.
Lambdas, closures and methods are refused with a clear error. No Ray here.
"""

from __future__ import annotations

import importlib
import inspect
import json
import os
import re
import subprocess
import sys
from collections.abc import Callable, Sequence
from typing import Any, NoReturn

__all__ = [
    "IMPORT_PATH",
    "check_train_fn_imports",
    "check_train_fn_path",
    "import_path_of",
    "load_pickled_train_fn",
    "resolve_train_fn",
]


def _fail(message: str, cause: BaseException | None = None) -> NoReturn:
    # imported here: Ray worker processes load this module, and the error tree pulls in the
    # store's dependencies, which only a failure needs
    from wgstore.orchestration.errors import TrainFnError

    raise TrainFnError(message) from cause


TrainFn = Callable[[dict[str, Any]], Any]


def _refuse_unnamed(fn: Any, where: str) -> None:
    name = getattr(fn, "__name__", "")
    qualname = getattr(fn, "__qualname__", "")
    if name == "<lambda>":
        _fail(
            f"{where} is a lambda; a train function must be a plain function defined at module "
            "level (def train_fn(config): ...) so it can be named as 'package.module:function'"
        )
    if "<locals>" in qualname:
        _fail(
            f"{where} ({qualname}) is a closure or nested function; define it at module level "
            "so it can be named as 'package.module:function' and started again from the log"
        )


IMPORT_PATH = re.compile(r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)*:[A-Za-z_]\w*(\.[A-Za-z_]\w*)*$")
"""``module.sub:function`` (or ``:Class.method``): the form of a train function's import path."""


def check_train_fn_path(path: str) -> str:
    """Check the form of an import path ``"package.module:function"`` (nothing is imported).

    Raises:
        TrainFnError: not of that form (e.g. a file path, or no ``:function``).
    """
    if not isinstance(path, str) or not IMPORT_PATH.match(path):
        hint = ""
        if isinstance(path, str) and (path.endswith(".py") or "/" in path):
            hint = " (a module path with dots, not a file path)"
        _fail(
            f"train_fn must be an import path 'package.module:function'{hint}, got {path!r}; "
            "e.g. examples.train:train_fn"
        )
    return path


def import_path_of(fn: TrainFn | str) -> str:
    """The ``"package.module:function"`` path of a module-level function (a string passes through).

    Raises:
        TrainFnError: ``fn`` is a lambda, a closure, a method, defined in ``__main__``, or not
            reachable again through its module under its name.
    """
    if isinstance(fn, str):
        return check_train_fn_path(fn)
    if not callable(fn):
        _fail(f"train_fn must be a function or an import path, got {fn!r}")
    if not inspect.isfunction(fn):
        _fail(
            f"train_fn {fn!r} is not a plain function; pass a module-level function or its "
            "import path 'package.module:function'"
        )
    _refuse_unnamed(fn, f"train_fn {fn!r}")
    module = fn.__module__
    if module == "__main__":
        _fail(
            f"train_fn {fn.__qualname__} is defined in __main__, which workers cannot import; "
            "move it into a module and pass 'package.module:function'"
        )
    path = f"{module}:{fn.__qualname__}"
    found = getattr(sys.modules.get(module), fn.__qualname__, None)
    if found is not fn:
        _fail(
            f"train_fn {path} is not reachable as an attribute of its module; pass a "
            "module-level function"
        )
    return path


def resolve_train_fn(path: str, *, extra_sys_path: Sequence[str] = ()) -> TrainFn:
    """Import ``"package.module:function"`` and return the function.

    Args:
        path: the import path.
        extra_sys_path: folders added to ``sys.path`` first (e.g. the executor's working folder).

    Raises:
        TrainFnError: the module does not import, the attribute is missing, or it is not a
            plain module-level function. The import error is chained.
    """
    for folder in extra_sys_path:
        if folder and folder not in sys.path:
            sys.path.insert(0, folder)
    module_name, sep, attr = path.partition(":")
    if not sep or not module_name or not attr:
        _fail(f"train_fn must be 'package.module:function', got {path!r}")
    try:
        module = importlib.import_module(module_name)
    except Exception as error:  # noqa: BLE001 - any import failure is the train fn's
        _fail(
            f"cannot import module {module_name!r} of train_fn {path!r}: "
            f"{type(error).__name__}: {error}. Check the path and that the module is importable "
            "on every Ray worker (installed, or on PYTHONPATH)",
            error,
        )
    target: Any = module
    for part in attr.split("."):
        try:
            target = getattr(target, part)
        except AttributeError as error:
            _fail(f"module {module_name!r} has no attribute {attr!r} (train_fn {path!r})", error)
    if not inspect.isfunction(target):
        _fail(f"train_fn {path!r} is {type(target).__name__}, not a function")
    _refuse_unnamed(target, f"train_fn {path!r}")
    fn: TrainFn = target
    return fn


def load_pickled_train_fn(
    name: str, data: bytes, digest: str | None, *, extra_sys_path: Sequence[str] = ()
) -> TrainFn:
    """Unpickle a train function recorded with its pickle (a lambda, closure, callable object).

    Raises:
        TrainFnError: the bytes do not hash to ``digest`` (they were changed), or unpickling
            fails (e.g. a module the function refers to is not importable on this worker).
    """
    import hashlib
    import pickle

    actual = hashlib.sha256(data).hexdigest()
    if actual != digest:
        _fail(
            f"the pickled train function {name} does not match its recorded digest "
            f"({digest!r} recorded, {actual!r} found); start the group again from the function"
        )
    for folder in extra_sys_path:
        if folder and folder not in sys.path:
            sys.path.insert(0, folder)
    try:
        fn = pickle.loads(data)
    except Exception as error:  # noqa: BLE001 - any unpickling failure is the train fn's
        _fail(
            f"cannot unpickle train function {name}: {type(error).__name__}: {error}. "
            "Everything it refers to must be importable on every Ray worker (cloudpickle "
            "installed, its modules on PYTHONPATH)",
            error,
        )
    if not callable(fn):
        _fail(f"the pickled train function {name} is a {type(fn).__name__}, not a callable")
    loaded: TrainFn = fn
    return loaded


def check_train_fn_imports(path: str, folder: str, *, workers_may_differ: bool = False) -> None:
    """Import ``path``'s function once as a worker would, before Ray starts, and fail as it would.

    Runs :func:`resolve_train_fn` in a fresh interpreter whose working folder and extra
    ``sys.path`` entry is ``folder`` (workers put the executor's working folder there): a module
    that is missing, does not import (a syntax error, an exception at import), or has no such
    function fails here in a fraction of a second with the message a worker would give, instead
    of after Ray, a placement group and the workers have started.

    In a child process, not in this one: the caller (``wgstore run``) stays up for the whole run
    and handles Ctrl-C, and a train module's import side effects (signal handlers, logging
    setup, threads, a framework's memory) must not change it; the workers import it anyway.

    Args:
        path: ``"package.module:function"`` (its form checked already).
        folder: the folder workers add to ``sys.path`` (the executor's working folder).
        workers_may_differ: the workers may have modules this machine has not (a Ray cluster
            at ``RAY_ADDRESS``, an executor elsewhere): a module not found here is then left to
            the workers' own check, which records a start failure if they cannot import it
            either. Any other failure is the same everywhere the code is the same.

    Raises:
        TrainFnError: the message a worker would give.
    """
    child = subprocess.run(
        [sys.executable, "-P", "-c", _PROBE, path, folder],
        cwd=folder,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        check=False,
    )
    lines = child.stdout.strip().splitlines()
    try:
        found = json.loads(lines[-1]) if lines else None
    except ValueError:
        found = None
    if not isinstance(found, dict):  # the module ended the process (sys.exit, a crash)
        last = (child.stderr.strip().splitlines() or [""])[-1]
        _fail(
            f"cannot import module {path.partition(':')[0]!r} of train_fn {path!r}: importing "
            f"it ended the process (exit status {child.returncode}){': ' + last if last else ''}"
        )
    error = found.get("error")
    if error is None or (workers_may_differ and found.get("not_found")):
        return
    _fail(str(error))


_PROBE = "from wgstore.orchestration.train_fn.loading import _probe; _probe()"


def _probe() -> None:
    """The child of :func:`check_train_fn_imports`: one JSON line on the original stdout."""
    path, folder = sys.argv[1], sys.argv[2]
    result = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)  # what the module prints at import goes to stderr, not into the result
    sys.stdout = sys.stderr
    found: dict[str, Any] = {"error": None}
    try:
        resolve_train_fn(path, extra_sys_path=[folder])
    except Exception as error:  # noqa: BLE001 - TrainFnError, whose cause tells a missing module
        found = {
            "error": str(error),
            "not_found": isinstance(error.__cause__, ModuleNotFoundError),
        }
    result.write(json.dumps(found) + "\n")
    result.flush()
