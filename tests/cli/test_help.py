"""``--help`` reads well at 80 columns: what to type after each flag (no Python types), and every
flag's full name."""

from __future__ import annotations

import itertools
import re
from typing import Any

import pytest
import typer

from wgstore.cli import app

PYTHON_TYPE = re.compile(r"<(bool|str|int|float|list\[[a-z]+\]|path)>")


def _leaves(command: Any, path: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    if getattr(command, "commands", None):
        found: list[tuple[str, ...]] = [path]
        for name, sub in command.commands.items():
            found += _leaves(sub, (*path, name))
        return found
    return [path]


COMMANDS = _leaves(typer.main.get_command(app))


@pytest.mark.parametrize("path", COMMANDS, ids=[" ".join(p) or "wgstore" for p in COMMANDS])
def test_help_at_80_columns_shows_no_python_types_and_every_flag_in_full(
    cli: Any, path: tuple[str, ...]
) -> None:
    result = cli(*path, "--help", env={"COLUMNS": "80", "TERM": "dumb"})
    assert result.exit_code == 0, result.stderr
    assert not PYTHON_TYPE.findall(result.stdout), result.stdout
    command: Any = typer.main.get_command(app)
    for name in path:
        command = command.commands[name]
    for param in command.params:
        for flag in [*param.opts, *param.secondary_opts]:
            if flag.startswith("--"):
                assert re.search(rf"{re.escape(flag)}(?![\w-])", result.stdout), (
                    flag,
                    result.stdout,
                )


def _description(text: str) -> list[list[str]]:
    """The paragraphs of a command's description in its ``--help`` (between the usage line and
    the first box), each a list of its lines."""
    body = text.split("Usage:", 1)[1].split("\n", 1)[1].split("╭", 1)[0]
    paragraphs: list[list[str]] = [[]]
    for line in body.splitlines():
        if line.strip():
            paragraphs[-1].append(line.strip())
        elif paragraphs[-1]:
            paragraphs.append([])
    return [p for p in paragraphs if p]


@pytest.mark.parametrize("path", COMMANDS, ids=[" ".join(p) or "wgstore" for p in COMMANDS])
def test_help_paragraphs_wrap_to_the_terminal_not_mid_sentence(
    cli: Any, path: tuple[str, ...]
) -> None:
    """Every line of a description is as full as the terminal allows: no line ends where the
    next word would have fit (the source's line breaks kept made ``resume --help`` break each
    line twice at 80 columns; issue 41, item 16)."""
    result = cli(*path, "--help", env={"COLUMNS": "80", "TERM": "dumb"})
    assert result.exit_code == 0, result.stderr
    width = 78  # Rich pads the description by one column on each side
    for paragraph in _description(result.stdout):
        for line, following in itertools.pairwise(paragraph):
            assert len(line) + 1 + len(following.split()[0]) > width, (line, following)
