"""Mutation testing of wgstore's pure modules: how much of a broken core do the fast tests notice?

Each module in :data:`MODULES` is mutated one change at a time (see ``scripts/mutants.py`` for
the changes), and the fast, non-Ray, non-Postgres tests listed beside it run against each mutant
until one fails (the mutant is *killed*) or all pass (it *survived*). The score of a module is
killed / (mutants - equivalent), where the equivalent mutants are those listed, with the reason,
in ``scripts/mutate_equivalents.txt``: changes no test can see because nothing observable
changes (``slots=False`` on a frozen dataclass, a default never used, ...).

Why a script of its own: mutmut names mutants by file path and cannot map ``events/`` to
``wgstore.events`` (setuptools ``package-dir``); cosmic-ray can, by rewriting the file in place,
but it starts the test command afresh for every mutant (2 to 6 s of pytest start-up here, ~700
mutants). This script imports the third-party libraries once, then forks a child per mutant that
imports wgstore afresh with the one mutated module served from memory (an import hook), and runs
pytest in the child: nothing on disk changes, and a mutant costs only its tests.

Usage::

    python scripts/mutate.py                      # every module (make mutate)
    python scripts/mutate.py wgstore.events.codec # some modules
    python scripts/mutate.py --list wgstore.orchestration.runtimes.ranks   # the mutants, not run
    python scripts/mutate.py --fail-under 95      # exit 1 if a module scores below 95%

To add a module: one row in MODULES, the module and the fast test files that cover it.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import importlib.abc
import importlib.machinery
import os
import signal
import sys
import time
import tomllib
import traceback
from collections.abc import Sequence
from dataclasses import dataclass
from importlib.metadata import entry_points
from pathlib import Path
from types import CodeType, ModuleType

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))

from mutants import Mutant, mutants_of  # noqa: E402

EQUIVALENTS_FILE = REPO / "scripts" / "mutate_equivalents.txt"

MODULES: dict[str, tuple[str, ...]] = {
    # module: the fast test files that cover it, quickest first (no Ray; Postgres deselected)
    "wgstore.events.hashing": ("tests/events/test_hash_vectors.py", "tests/events/test_tamper.py"),
    "wgstore.events.codec": (
        "tests/events/test_codec_mutants.py",
        "tests/events/test_codec_properties.py",
        "tests/events/test_unknown_events_and_clean_errors.py",
    ),
    "wgstore.projections.state": (
        "tests/projections/test_state.py",
        "tests/projections/test_state_mutants.py",
        "tests/projections/test_event_time.py",
    ),
    "wgstore.projections.event_time": ("tests/projections/test_event_time.py",),
    "wgstore.projections.poll_history": (
        "tests/projections/test_poll_history.py",
        "tests/projections/test_state_mutants.py",
    ),
    "wgstore.projections.run_state": (
        "tests/projections/test_run_state.py",
        "tests/projections/test_run_state_mutants.py",
        "tests/projections/test_is_orphaned.py",
        "tests/projections/test_state_mutants.py",
        "tests/projections/test_event_time.py",
    ),
    "wgstore.orchestration.runtimes.ranks": ("tests/orchestration/test_ranks.py",),
    "wgstore.orchestration.polling.recorder": (
        "tests/orchestration/test_poll_recorder.py",
        "tests/orchestration/test_poll_recorder_errors.py",
    ),
    "wgstore.orchestration.executor.commands": ("tests/orchestration/test_commands.py",),
    "wgstore.orchestration.run.decide": (
        "tests/orchestration/test_decide_mutants.py",
        "tests/orchestration/test_decide.py",
    ),
    "wgstore.orchestration.executor.step": (
        "tests/orchestration/test_executor_step.py",
        "tests/orchestration/test_executor_step_mutants.py",
    ),
    "wgstore.orchestration.executor.poll_times": ("tests/orchestration/test_poll_times.py",),
    "wgstore.projections.run_rows": (
        "tests/projections/test_run_rows_mutants.py",
        "tests/projections/test_run_read_model.py",
    ),
    "wgstore.projections.values": ("tests/projections/test_values.py",),
    "wgstore.orchestration.ray_train.translate": (
        "tests/orchestration/test_ray_train_translate_mutants.py",
        "tests/orchestration/test_ray_train_translate.py",
    ),
    "wgstore.projections.run_filter": ("tests/projections/test_run_filter.py",),
    "wgstore.projections.run_facts": ("tests/projections/test_run_facts.py",),
    "wgstore.projections.progress": ("tests/projections/test_progress.py",),
    "wgstore.projections.report_html": ("tests/projections/test_report_html.py",),
    "wgstore.orchestration.run.outcome": ("tests/orchestration/test_run_outcome.py",),
    "wgstore.orchestration.executor.group_polls": ("tests/orchestration/test_polling.py",),
}
"""The pure modules under mutation, each with the test files run against its mutants."""

PYTEST_ARGS = (
    "-x",
    "-q",
    "-p",
    "no:cacheprovider",
    "-k",
    "not postgres",  # the store fixtures' Postgres case (and tests naming Postgres)
    "-m",
    "not ray and not slow",
    "-o",
    "timeout=120",
    # modules imported before pytest starts (see _preimport) cannot have their asserts rewritten
    "-W",
    "ignore::pytest.PytestAssertRewriteWarning",
)


@dataclass(frozen=True, slots=True)
class Outcome:
    """What one mutant run came to: ``killed``, ``survived``, ``timeout`` or ``equivalent``."""

    mutant: Mutant
    result: str
    seconds: float


def source_path(module: str) -> Path:
    """The file of ``module``, through pyproject's ``[tool.setuptools.package-dir]``."""
    mapping: dict[str, str] = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"][
        "setuptools"
    ]["package-dir"]
    package, _, name = module.rpartition(".")
    parts = package.split(".")
    for cut in range(len(parts), 0, -1):  # a subpackage lives under its nearest mapped parent
        root = ".".join(parts[:cut])
        if root in mapping:
            path = REPO / mapping[root] / Path(*parts[cut:]) / f"{name}.py"
            if not path.is_file():
                raise SystemExit(
                    f"{module}: no file {path.relative_to(REPO)} (package {root!r} is "
                    f"{mapping[root]!r} in pyproject's package-dir); check the module's name"
                )
            return path
    raise SystemExit(f"{module}: package {package!r} is not in pyproject's package-dir")


def load_equivalents() -> dict[str, dict[str, str]]:
    """``module -> {mutant id: reason}`` from :data:`EQUIVALENTS_FILE` (``module | id | reason``)."""
    table: dict[str, dict[str, str]] = {}
    for number, line in enumerate(EQUIVALENTS_FILE.read_text().splitlines(), 1):
        if not line.strip() or line.startswith("#"):
            continue
        module, _, rest = line.partition(" | ")
        mutant_id, _, reason = rest.rpartition(" | ")  # an id may hold " | " (X | None)
        parts = [module.strip(), mutant_id.strip(), reason.strip()]
        if not all(parts):
            raise SystemExit(
                f"{EQUIVALENTS_FILE.name}:{number}: expected `module | mutant id | reason`"
            )
        table.setdefault(parts[0], {})[parts[1]] = parts[2]
    return table


class _MutantFinder(importlib.abc.MetaPathFinder):
    """Serves one module's mutated code object in place of its file."""

    def __init__(self, module: str, path: Path, code: CodeType) -> None:
        self.module, self.path, self.code = module, path, code

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname != self.module:
            return None
        loader = _MutantLoader(fullname, str(self.path), self.code)
        return importlib.util.spec_from_file_location(fullname, self.path, loader=loader)


class _MutantLoader(importlib.machinery.SourceFileLoader):
    def __init__(self, fullname: str, path: str, code: CodeType) -> None:
        super().__init__(fullname, path)
        self.mutated = code

    def get_code(self, fullname: str) -> CodeType:
        return self.mutated


def _run_child(module: str, path: Path, code: CodeType | None, tests: Sequence[str]) -> int:
    """In the forked child: import wgstore afresh (mutated if ``code``), run the tests."""
    import pytest

    if code is not None:
        sys.meta_path.insert(0, _MutantFinder(module, path, code))
    if not os.environ.get("MUTATE_SHOW_OUTPUT"):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 1)
        os.dup2(devnull, 2)
    return int(pytest.main([*tests, *PYTEST_ARGS]))


def run_one(
    module: str, path: Path, code: CodeType | None, tests: Sequence[str], timeout_s: float
) -> tuple[str, float]:
    """Run ``tests`` against one mutant (``code``; None: the module unchanged) in a child."""
    started = time.monotonic()
    pid = os.fork()
    if pid == 0:  # child
        status = 3
        try:
            status = _run_child(module, path, code, tests)
        except BaseException:  # noqa: BLE001 - the child must never return into the parent's loop
            traceback.print_exc()
        finally:
            os._exit(status)
    deadline = started + timeout_s
    try:
        while True:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                break
            if time.monotonic() > deadline:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
                return "timeout", time.monotonic() - started
            time.sleep(0.02)
    except BaseException:  # interrupted: leave no child behind
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        raise
    seconds = time.monotonic() - started
    code_ = os.waitstatus_to_exitcode(status)
    if code_ == 0:
        return "survived", seconds
    if code_ in (4, 5):
        raise SystemExit(f"{module}: pytest could not run {list(tests)} (exit {code_})")
    return "killed", seconds


def _preimport(module: str, path: Path, tests: Sequence[str]) -> None:
    """Import in this (parent) process the third-party modules the tests use, so children share
    them; learnt from one child run that reports what it imported."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read)
        try:
            _run_child(module, path, None, tests)
            names = [name for name, mod in list(sys.modules.items()) if not _ours(name, mod)]
            os.write(write, "\n".join(names).encode())
        finally:
            os._exit(0)
    os.close(write)
    chunks = []
    while chunk := os.read(read, 65536):
        chunks.append(chunk)
    os.close(read)
    os.waitpid(pid, 0)
    # pytest plugins must be imported by pytest itself (it rewrites their asserts)
    plugins = {ep.value.split(":")[0].split(".")[0] for ep in entry_points(group="pytest11")}
    for name in b"".join(chunks).decode().splitlines():
        if name in sys.modules or name.split(".")[0] in plugins:
            continue
        with contextlib.suppress(Exception):  # some private modules only import in context
            importlib.import_module(name)


def _ours(name: str, mod: object) -> bool:
    if name.split(".")[0] in ("wgstore", "tests", "conftest", "examples", "__main__"):
        return True
    file = getattr(mod, "__file__", None) or ""
    return file.startswith(str(REPO)) and "/.venv/" not in file


def mutate_module(
    module: str,
    tests: Sequence[str],
    equivalents: dict[str, str],
    only: set[str] | None = None,
) -> list[Outcome]:
    """Every mutant of ``module`` run against ``tests``; the equivalent ones are not run.

    With ``only`` (the survivors of an earlier run), the other mutants are not run but counted
    as killed (``killed-before``): tests that were only added since can kill no fewer.
    """
    path = source_path(module)
    mutants = mutants_of(path.read_text(), str(path))
    _preimport(module, path, tests)
    result, baseline = run_one(module, path, None, tests, timeout_s=600)
    if result != "survived":
        raise SystemExit(f"{module}: the tests fail on the unchanged code; fix them first")
    timeout_s = max(60.0, 10 * baseline)  # generous: the machine may be busy
    outcomes = []
    for mutant in mutants:
        if mutant.id in equivalents:
            outcomes.append(Outcome(mutant, "equivalent", 0.0))
            continue
        if only is not None and mutant.id not in only:
            outcomes.append(Outcome(mutant, "killed-before", 0.0))
            continue
        result, seconds = run_one(module, path, mutant.code, tests, timeout_s)
        outcomes.append(Outcome(mutant, result, seconds))
    return outcomes


def summarize(module: str, outcomes: Sequence[Outcome]) -> tuple[int, int, int, float]:
    """(mutants, equivalent, killed, score %) of one module."""
    total = len(outcomes)
    equivalent = sum(1 for o in outcomes if o.result == "equivalent")
    killed = sum(1 for o in outcomes if o.result in ("killed", "killed-before", "timeout"))
    counted = total - equivalent
    score = 100.0 * killed / counted if counted else 100.0
    return total, equivalent, killed, score


def read_survivors(output: Path) -> dict[str, set[str]]:
    """``module -> surviving mutant ids`` from the printed output of an earlier run."""
    survivors: dict[str, set[str]] = {}
    module = None
    for line in output.read_text().splitlines():
        if line.startswith("wgstore.") and " killed (" in line:
            module = line.split(":", 1)[0]
            survivors[module] = set()
        elif module and line.startswith(("  survived ", "  timeout ")):
            survivors[module].add(line.split("  ", 3)[3])
    return survivors


def _exit_on_sigterm(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)  # unwinds through run_one, which kills its child


def main(argv: Sequence[str] | None = None) -> int:
    """Run the mutation tests; print each module's survivors and the score table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("modules", nargs="*", help="modules to mutate (default: every module)")
    parser.add_argument("--list", action="store_true", help="list the mutants, run nothing")
    parser.add_argument(
        "--fail-under", type=float, default=0.0, help="exit 1 if a module scores below this %%"
    )
    parser.add_argument(
        "--survivors-of",
        type=Path,
        metavar="OUTPUT",
        help="run only the mutants an earlier run's output lists as survived (the rest of the "
        "modules it scored count as killed); quicker after adding tests",
    )
    args = parser.parse_args(argv)
    unknown = [m for m in args.modules if m not in MODULES]
    if unknown:
        parser.error(f"not in MODULES: {', '.join(unknown)}; known: {', '.join(MODULES)}")
    modules = args.modules or list(MODULES)
    equivalents = load_equivalents()
    os.chdir(REPO)
    signal.signal(signal.SIGTERM, _exit_on_sigterm)
    os.environ["CI"] = "true"  # derandomized Hypothesis profile: the same score every run
    if args.list:
        for module in modules:
            path = source_path(module)
            for mutant in mutants_of(path.read_text(), str(path)):
                mark = "  (equivalent)" if mutant.id in equivalents.get(module, {}) else ""
                print(f"{module}:{mutant.line}: {mutant.id}{mark}")
        return 0
    earlier = read_survivors(args.survivors_of) if args.survivors_of else {}
    rows = []
    started = time.monotonic()
    for module in modules:
        module_started = time.monotonic()
        known = equivalents.get(module, {})
        only = earlier.get(module) if args.survivors_of else None
        outcomes = mutate_module(module, MODULES[module], known, only)
        ids = {o.mutant.id for o in outcomes}
        for stale in sorted(set(known) - ids):
            print(f"  note: equivalent entry matches no mutant (remove it): {stale}")
        survivors = [o for o in outcomes if o.result in ("survived", "timeout")]
        total, equivalent, killed, score = summarize(module, outcomes)
        print(
            f"{module}: {killed}/{total - equivalent} killed ({score:.1f}%), "
            f"{equivalent} equivalent, {time.monotonic() - module_started:.0f}s",
            flush=True,
        )
        for outcome in survivors:  # timeouts count as killed, but are shown
            print(
                f"  {outcome.result:9} {source_path(module).relative_to(REPO)}:"
                f"{outcome.mutant.line}  {outcome.mutant.id}",
                flush=True,
            )
        rows.append((module, total, equivalent, killed, score))
    print()
    print(f"{'module':40} {'mutants':>8} {'equiv.':>7} {'killed':>7} {'score':>7}")
    for module, total, equivalent, killed, score in rows:
        print(f"{module:40} {total:8} {equivalent:7} {killed:7} {score:6.1f}%")
    print(f"total time {time.monotonic() - started:.0f}s")
    return 1 if any(row[4] < args.fail_under for row in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
