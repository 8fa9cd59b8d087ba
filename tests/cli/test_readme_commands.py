"""Every ``wgstore`` command line the documents and the examples print works as printed.

The lines are taken from the files themselves (so the test follows them as they change): the
``bash`` blocks and inline spans of a command with arguments of README.md, every page of docs/
and bench/README.md (tests/doc_blocks.py reads them), and the examples' literal blocks and quoted
spans. Each runs against a real recorded store whose group and run ids start with the
placeholders the documents use (``3f2a``, ``7c1e``, ``GROUP``, ``RUN``), with the URL the line
names (or ``WGSTORE_URL`` when it names none), and must exit 0. Commands that start Ray or never
end (``run``, ``executor``, ``resume``, ``serve``, ``gc`` and ``supervise`` without
``--dry-run``, ``events --follow``, ``projections catch-up --follow``), ``ingest`` (it reads a
Ray session's files: tests/cli/test_ingest.py runs it), synopses with elided
parts (``"SELECT ..."``) and spans that name an option rather than use it (``wgstore runs
--since``: the option must exist) are parsed only: no usage error. ``wgstore --url URL groups``
is what users write (issue 24), so the root accepts ``--url`` before the command too.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import typer

from tests.doc_blocks import DOCS, INLINE, REPO, wgstore_lines
from wgstore.cli import app
from wgstore.events import EventStore

GROUP = "3f2a9c0e5b7d41a8"
FAILED_GROUP = "b4d2e6f8a0c21357"
RUN = "7c1e5a3b9d0f2468"
RUN_ONLY_PARSED = {"run", "executor", "resume", "serve"}  # start Ray, a server or a run


def readme_lines() -> list[str]:
    """The ``wgstore`` command lines of README.md."""
    return wgstore_lines(REPO / "README.md")


def doc_lines() -> list[str]:
    """The ``wgstore`` command lines of every document: README.md, docs/*.md, bench/README.md."""
    return [line for path in DOCS for line in wgstore_lines(path)]


def example_lines() -> list[str]:
    """The ``wgstore`` command lines examples/*.py print: literal blocks and quoted spans."""
    lines = []
    for path in sorted((REPO / "examples").glob("*.py")):
        text = path.read_text()
        lines += INLINE.findall(text)
        lines += [m.strip() for m in re.findall(r"^ {4,}(wgstore .+)$", text, flags=re.MULTILINE)]
    return lines


def _argv(line: str, url: str, digest: str = "") -> list[str]:
    """The arguments of ``line``, its placeholders replaced by the recorded store's values.

    The store was recorded seconds ago, so a time ``10m`` ago is before it: ``--at`` asks for
    now (``0s`` ago) instead; the README's example digest becomes the store's own.
    """
    line = line.replace("<group id>", GROUP[:6]).replace("{url}", url)
    line = line.replace("RUN_ID", RUN[:4]).replace("sqlite:///ray-train.db", url)
    line = re.sub(r"\bRUN\b", RUN[:4], re.sub(r"\bGROUP\b", GROUP[:6], line))
    line = re.sub(r"\[(--[^\]]+)\]", r"\1", line)  # a synopsis's optional parts: given
    line = re.sub(r"--url (URL|<[^>]*URL>)", f"--url {url}", line)
    line = line.replace("DIGEST", digest or "wgs1:0:0")
    line = re.sub(r"--at \S+", "--at 0s", line)
    line = re.sub(r"wgs1:\S+", digest or "wgs1:0:0", line)
    args = shlex.split(line, comments=True)
    assert args[0] == "wgstore", line
    return args[1:]


def _command_path(args: list[str]) -> list[str]:
    """The command names of ``args`` (``["db", "check"]``), options before them skipped."""
    group: Any = typer.main.get_command(app)
    names: list[str] = []
    rest = list(args)
    while rest and hasattr(group, "commands"):
        if rest[0] == "--url":
            rest = rest[2:]
            continue
        name = rest.pop(0)
        assert name in group.commands, f"{name!r} is not a wgstore command ({args})"
        names.append(name)
        group = group.commands[name]
    return names


def _parse_only(args: list[str]) -> None:
    """Parse ``args`` as ``wgstore`` would, without running the command (a usage error raises)."""
    command: Any = typer.main.get_command(app)
    ctx = command.make_context("wgstore", list(args))
    while hasattr(command, "commands"):
        name, command, rest = command.resolve_command(ctx, [*ctx._protected_args, *ctx.args])
        ctx = command.make_context(name, rest, parent=ctx)


def _names_an_option(args: list[str]) -> bool:
    """A span like ``wgstore runs --since``: the last word is an option that takes a value."""
    if not args or not args[-1].startswith("--"):
        return False
    command: Any = typer.main.get_command(app)
    for name in _command_path(args):
        command = command.commands[name]
    options = {o: p for p in command.params for o in p.opts}
    assert args[-1] in options, f"{args[-1]} is not an option of wgstore {' '.join(args)}"
    return not options[args[-1]].is_flag


def _only_parsed(path: list[str], args: list[str]) -> bool:
    if path[0] in RUN_ONLY_PARSED or any("..." in arg for arg in args):
        return True  # a synopsis: `wgstore sql "SELECT ..."`
    if path[0] in ("gc", "supervise") and "--dry-run" not in args:
        return True  # they act (abort, resume) or never end
    if path[0] == "ingest":
        return True  # they read the export files of a Ray session this machine may not have
    # they never end by themselves
    return path[0] in ("events", "projections") and ("--follow" in args or "-f" in args)


EXPECTED_EXIT = {
    # a key the store's events were not MACed with: every event is named
    ("verify", "--key"): 1,
    # SQLite has no roles to prepare (PostgreSQL only)
    ("db", "reader"): None,
}


def _expected(path: list[str], args: list[str]) -> int | None:
    for (name, word), code in EXPECTED_EXIT.items():
        if path[0] == name and word in args:
            return code
    return 0


@pytest.fixture
def readme_store(store_url: str, history: Any) -> str:
    """A store holding a run of two attempts (an errored group, a failed start) and its stream."""
    with EventStore.open(store_url) as store:
        history.record_errored_group(store, group_id=GROUP, run_id=RUN)
        history.record_failed_group(store, group_id=FAILED_GROUP, run_id=RUN)
        history.record_run(store, run_id=RUN)
    return store_url


def test_the_documents_and_examples_print_the_command_lines_this_test_runs() -> None:
    readme, docs, examples = readme_lines(), doc_lines(), example_lines()
    assert len(readme) >= 15, readme
    assert len(docs) >= 90, docs
    assert "wgstore --url sqlite:///ray-train.db groups" in readme
    after_a_variable = [line for line in docs if line.startswith("wgstore serve --host 0.0.0.0")]
    assert after_a_variable, "the line after an environment variable and a continuation"
    assert any(line.startswith("wgstore --url") for line in examples), examples
    assert any("report <group id>" in line for line in examples), examples


def test_the_root_takes_url_before_the_command_and_refuses_two_different_ones(
    readme_store: str, cli: Callable[..., Any], tmp_path: Path
) -> None:
    before = cli("--url", readme_store, "groups", "--json")
    assert before.exit_code == 0, before.output
    assert GROUP in before.stdout
    other = f"sqlite:///{tmp_path / 'other.db'}"
    env = {"WGSTORE_URL": other}
    assert cli("--url", readme_store, "runs", env=env).exit_code == 0, "--url beats WGSTORE_URL"
    assert cli("--url", readme_store, "db", "check", env=env).exit_code == 0
    both = cli("--url", readme_store, "groups", "--url", other)
    assert both.exit_code == 2
    assert "given twice" in both.output
    assert cli("--url", readme_store, "groups", "--url", readme_store).exit_code == 0


@pytest.mark.parametrize("source", [*(str(path.relative_to(REPO)) for path in DOCS), "examples"])
def test_every_printed_command_line_works_against_a_recorded_store(
    source: str,
    readme_store: str,
    cli: Callable[..., Any],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.chdir(tmp_path)  # `-o timeline.html` and the like land here
    lines = example_lines() if source == "examples" else wgstore_lines(REPO / source)
    postgres = readme_store.startswith("postgresql")
    with EventStore.open(readme_store, read_only=True) as store:
        digest = store.digest()
    failures = []
    for line in lines:
        args = _argv(line, readme_store, digest)
        path = _command_path(args)
        if _names_an_option(args):
            continue  # the option exists (checked above); its value is the prose's
        if _only_parsed(path, args):
            _parse_only(args)
            continue
        expected = _expected(path, args)
        if expected is None and not postgres:
            _parse_only(args)
            continue
        result = cli(*args, env={"WGSTORE_URL": readme_store})
        if result.exit_code != (expected or 0):
            failures.append(f"{line}\n  -> exit {result.exit_code}: {result.output[-600:]}")
    assert not failures, "\n".join(failures)
