"""The dependency direction of DESIGN.md: events and projections work without Ray."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def _imported_modules(folder: Path) -> set[str]:
    names: set[str] = set()
    for path in folder.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names.add(node.module)
    return names


def test_events_and_projections_never_import_ray_or_upper_layers() -> None:
    for folder, forbidden in (
        ("events", ("ray", "wgstore.projections", "wgstore.orchestration", "wgstore.cli")),
        ("projections", ("ray", "wgstore.orchestration", "wgstore.cli")),
    ):
        imported = _imported_modules(REPO / folder)
        bad = {
            name
            for name in imported
            if name.split(".")[0] == "ray" or name.startswith(forbidden[1:])
        }
        assert not bad, f"{folder}/ imports {sorted(bad)}"


def test_events_and_projections_import_with_ray_unavailable() -> None:
    code = (
        "import sys; sys.modules['ray'] = None\n"
        "import wgstore.events, wgstore.projections\n"
        "assert 'ray' not in [m for m in sys.modules if sys.modules[m] is not None and m == 'ray']\n"
        "print('ok')"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "ok"
