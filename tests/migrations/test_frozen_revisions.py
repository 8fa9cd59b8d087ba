"""Migrations are history: a revision imports nothing of today's code.

What revision 0004 installs on an empty database must not change when today's ``wg_append``
does, so every revision holds its own SQL. Read from each revision's source (static imports and
``importlib.import_module`` calls alike, which the import contracts cannot see): the only
wgstore modules a revision may name are its sibling revisions.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

VERSIONS = Path(__file__).resolve().parents[2] / "migrations" / "versions"
ALLOWED = "wgstore.migrations.versions."


def wgstore_imports(source: str) -> list[str]:
    """Every module under ``wgstore`` (or relative, beyond the revisions' own folder) that
    ``source`` imports, dynamic imports with a literal (or f-string) name included."""
    found: list[str] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level > 1:  # from .. import x: beyond versions/
                found.append("." * node.level + (node.module or ""))
            elif node.level == 0 and node.module:
                found.append(node.module)
        elif isinstance(node, ast.Call) and _is_dynamic_import(node.func) and node.args:
            found.append(_literal_prefix(node.args[0]))
    return [
        name
        for name in found
        if name.startswith(("wgstore", ".", "<")) and not name.startswith(ALLOWED)
    ]


def _is_dynamic_import(func: ast.expr) -> bool:
    if isinstance(func, ast.Attribute):
        return func.attr == "import_module"
    return isinstance(func, ast.Name) and func.id in ("import_module", "__import__")


def _literal_prefix(argument: ast.expr) -> str:
    """The module name a dynamic import names, up to its first computed part; ``<computed>``
    when it starts computed (which no revision may do: nobody can tell what it imports)."""
    if isinstance(argument, ast.Constant) and isinstance(argument.value, str):
        return argument.value
    if isinstance(argument, ast.JoinedStr) and argument.values:
        first = argument.values[0]
        if isinstance(first, ast.Constant) and isinstance(first.value, str):
            return first.value
    return "<computed>"


REVISIONS = sorted(path for path in VERSIONS.glob("*.py") if path.name != "__init__.py")


def test_the_revisions_are_found() -> None:
    assert len(REVISIONS) >= 13


@pytest.mark.parametrize("revision", REVISIONS, ids=lambda path: path.stem)
def test_a_revision_imports_nothing_from_wgstore_outside_the_revisions(revision: Path) -> None:
    assert wgstore_imports(revision.read_text()) == []


@pytest.mark.parametrize(
    "source",
    [
        "from wgstore.events.postgres_recorder import APPEND_FUNCTION",
        "import wgstore.events.schema",
        "from wgstore.migrations import runner",
        "from ..runner import HEAD_REVISION",
        "import importlib\nimportlib.import_module('wgstore.events.postgres_functions')",
        "import importlib\nimportlib.import_module(name)",
        "__import__('wgstore.projections')",
    ],
)
def test_the_check_finds_an_import_of_todays_code(source: str) -> None:
    assert wgstore_imports(source) != []


def test_the_check_lets_a_revision_read_a_sibling() -> None:
    source = (
        "import importlib\nimport sqlalchemy as sa\nfrom alembic import op\n"
        "importlib.import_module('wgstore.migrations.versions.0001_event_log')\n"
        "importlib.import_module(f'wgstore.migrations.versions.{name}')"
    )
    assert wgstore_imports(source) == []
