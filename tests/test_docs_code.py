"""Every code block of every document is run or checked, and the README starts with its two commands.

tests/doc_blocks.py says which test takes which kind of block. Here: the README opens with
``make demo`` and ``make test``; no block lacks its kind; ``python`` blocks run as written in a
fresh process against a fresh SQLite file; ``python ray`` blocks (they need a cluster or a
trainer of your own) compile, import what they import and call every imported name with
arguments its signature takes; every line of a ``bash`` block that is not a ``wgstore`` command
(those run in tests/cli/test_readme_commands.py) names a real ``make`` target, ``pip`` extra,
script option or environment variable; and every bench command the documents print names a
script and options it has.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import os
import re
import shlex
import subprocess
import sys
import tomllib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.doc_blocks import DOCS, KINDS, REPO, Block, all_blocks, blocks, command_lines, env_prefix

STORE_URL = "sqlite:///wgstore.db"
PACKAGE_DIRS = ("_wgstore", "events", "projections", "orchestration", "cli", "serve", "migrations")


def _ids(block: Block) -> str:
    return block.where()


def test_the_readme_starts_with_the_two_commands_that_work_on_a_fresh_machine() -> None:
    readme = (REPO / "README.md").read_text()
    first = blocks(REPO / "README.md")[0]
    assert first.kind == "bash"
    assert [line.split("#")[0].strip() for line in command_lines(first.code)] == [
        "make demo",
        "make test",
    ]
    assert readme.index("```bash\nmake demo") < readme.index("\n## "), "before any section"
    ci = (REPO / ".ci" / "run").read_text()
    assert re.search(r"^make test$", ci, flags=re.MULTILINE), ".ci/run calls `make test`"


def test_every_block_says_what_it_is() -> None:
    found = all_blocks()
    assert len(found) > 40
    unknown = [f"{b.where()}: {b.kind!r}" for b in found if b.kind not in KINDS]
    assert not unknown, f"blocks of no kind the tests take (tests/doc_blocks.py): {unknown}"


# --- python blocks -------------------------------------------------------------------------


@pytest.mark.parametrize("block", all_blocks("python"), ids=_ids)
def test_every_python_block_runs_as_written(block: Block, tmp_path: Path) -> None:
    assert STORE_URL in block.code, "the blocks that run use the default store"
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")])
    env.pop("WGSTORE_URL", None)
    env.pop("RAY_ADDRESS", None)
    done = subprocess.run(
        [sys.executable, "-c", block.code],
        cwd=tmp_path,  # sqlite:///wgstore.db lands here
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, f"{block.where()}:\n{block.code}\n{done.stderr[-3000:]}"
    assert (tmp_path / "wgstore.db").exists()


def _imported(tree: ast.Module, names: dict[str, Any]) -> None:
    """Resolve the block's ``from wgstore... import`` names into ``names`` (each must exist)."""
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("wgstore"):
            module = importlib.import_module(node.module)
            for alias in node.names:
                assert hasattr(module, alias.name), f"{node.module} has no {alias.name}"
                names[alias.asname or alias.name] = getattr(module, alias.name)


def _call_shapes(
    tree: ast.Module, names: dict[str, Any]
) -> list[tuple[str, Callable[..., Any], int, list[str]]]:
    """Every call of an imported name (or its attribute): its name, target, positionals, keywords."""
    calls = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call) or any(isinstance(a, ast.Starred) for a in node.args):
            continue
        func = node.func
        if isinstance(func, ast.Name) and func.id in names:
            target, label = names[func.id], func.id
        elif (
            isinstance(func, ast.Attribute)
            and isinstance(func.value, ast.Name)
            and func.value.id in names
            and inspect.isclass(names[func.value.id])
        ):
            target = getattr(names[func.value.id], func.attr, None)
            assert target is not None, f"{func.value.id} has no {func.attr}"
            label = f"{func.value.id}.{func.attr}"
        else:
            continue
        keywords = [k.arg for k in node.keywords if k.arg is not None]
        calls.append((label, target, len(node.args), keywords))
    return calls


def _ray_blocks_by_page() -> list[tuple[Path, list[Block]]]:
    pages = [
        (path, [b for b in blocks(path) if b.kind in ("python", "python ray")]) for path in DOCS
    ]
    return [(path, found) for path, found in pages if any(b.kind == "python ray" for b in found)]


@pytest.mark.parametrize(
    ("page", "page_blocks"),
    _ray_blocks_by_page(),
    ids=lambda v: str(v.relative_to(REPO)) if isinstance(v, Path) else "",
)
def test_every_python_ray_block_imports_and_calls_what_exists(
    page: Path, page_blocks: list[Block]
) -> None:
    """A page's blocks read in order: a later block may use what an earlier one imported."""
    names: dict[str, Any] = {}
    checked = 0
    for block in page_blocks:
        tree = ast.parse(block.code, filename=block.where())
        _imported(tree, names)
        if block.kind != "python ray":
            continue
        for label, target, positional, keywords in _call_shapes(tree, names):
            signature = inspect.signature(target)
            try:
                signature.bind(*([None] * positional), **dict.fromkeys(keywords))
            except TypeError as error:
                pytest.fail(f"{block.where()}: {label}(...) does not fit {signature}: {error}")
            checked += 1
    assert checked, f"{page.relative_to(REPO)}: no call of wgstore's was checked"


# --- bash blocks and bench commands ---------------------------------------------------------


def _make_targets() -> set[str]:
    makefile = (REPO / "Makefile").read_text()
    return set(re.findall(r"^([a-z][\w-]*):", makefile, flags=re.MULTILINE))


def _extras() -> set[str]:
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text())
    return set(pyproject["project"]["optional-dependencies"])


def _environment_variables() -> set[str]:
    """The ``WGSTORE_*`` variables the package reads (named as a string in its source)."""
    found: set[str] = set()
    for folder in PACKAGE_DIRS:
        for path in (REPO / folder).rglob("*.py"):
            found |= set(re.findall(r"[\"'](WGSTORE_[A-Z_]+)[\"']", path.read_text()))
    return found


def _ray_variables() -> set[str]:
    """The ``RAY_*`` variables the package's source names (those a user sets for wgstore's
    sake, such as the export events ``wgstore ingest ray-export`` reads)."""
    found: set[str] = set()
    for folder in PACKAGE_DIRS:
        for path in (REPO / folder).rglob("*.py"):
            found |= set(re.findall(r"\b(RAY_[A-Za-z0-9_]+)=", path.read_text()))
    return found


def _script_problems(args: list[str]) -> list[str]:
    """A ``python path/to/script.py --option ...`` line: the script exists and has each option."""
    script = REPO / args[0]
    if not script.is_file():
        return [f"no script {args[0]}"]
    text = script.read_text()
    options = {arg.split("=")[0] for arg in args[1:] if arg.startswith("--")}
    return [f"{args[0]} has no {o}" for o in sorted(options) if f'"{o}"' not in text]


def _line_problems(line: str) -> list[str]:
    names, command = env_prefix(line)
    problems = [f"wgstore reads no {n}" for n in names if n not in _environment_variables()]
    if command.startswith("wgstore "):
        return problems  # run by tests/cli/test_readme_commands.py
    args = shlex.split(command, comments=True)
    if args[0] == "make":
        return problems + [f"no make target {t}" for t in args[1:] if t not in _make_targets()]
    if args[:2] == ["pip", "install"]:
        extras = re.fullmatch(r"wgstore\[([\w,-]+)\]", args[2])
        assert extras, line
        return problems + [
            f"no extra {e}" for e in extras.group(1).split(",") if e not in _extras()
        ]
    if args[0] == "export":
        names = [arg.split("=")[0] for arg in args[1:]]
        known = _environment_variables() | _ray_variables()
        return problems + [f"wgstore reads or names no {n}" for n in names if n not in known]
    if args[0] in ("python", ".venv/bin/python"):
        return problems + _script_problems(args[1:])
    return [*problems, "a command no test runs or checks"]


@pytest.mark.parametrize("block", all_blocks("bash"), ids=_ids)
def test_every_bash_line_is_run_or_names_what_exists(block: Block) -> None:
    lines = command_lines(block.code)
    assert lines, block.where()
    problems = [f"{line}: {p}" for line in lines for p in _line_problems(line)]
    assert not problems, f"{block.where()}: " + "; ".join(problems)


@pytest.mark.parametrize("block", all_blocks("yaml"), ids=_ids)
def test_every_yaml_block_parses(block: Block) -> None:
    import yaml

    assert yaml.safe_load(block.code), block.where()


_BENCH = re.compile(r"`(?:\.venv/bin/python )?(bench/\w+\.py(?: [^`]*)?)`")


def test_every_bench_command_the_documents_print_names_a_script_and_its_options() -> None:
    spans = [span for path in DOCS for span in _BENCH.findall(path.read_text())]
    assert len(spans) > 20, spans
    problems = [f"{span}: {p}" for span in spans for p in _script_problems(shlex.split(span))]
    assert not problems, problems
