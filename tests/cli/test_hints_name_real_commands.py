"""Every ```wgstore X``` an error message or docstring tells people to run is a real command."""

from __future__ import annotations

import re
from pathlib import Path

import typer

from wgstore.cli import app

REPO = Path(__file__).resolve().parents[2]
HINT = re.compile(r"`wgstore ([a-z][a-z-]*)")


def _commands() -> set[str]:
    click_group = typer.main.get_command(app)
    return set(click_group.commands)  # type: ignore[attr-defined]


def test_every_command_named_in_a_hint_exists() -> None:
    commands = _commands()
    named: dict[str, list[str]] = {}
    for folder in ("events", "projections", "orchestration", "cli", "migrations"):
        for path in (REPO / folder).rglob("*.py"):
            for match in HINT.finditer(path.read_text()):
                named.setdefault(match.group(1), []).append(str(path.relative_to(REPO)))
    assert named, "no hints found: the pattern is wrong"
    unknown = {name: places for name, places in named.items() if name not in commands}
    assert not unknown, f"hints name commands that do not exist: {unknown}"
