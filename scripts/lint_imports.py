"""Run import-linter's contracts (``[tool.importlinter]`` in pyproject.toml) on this tree.

The repository maps its top-level folders onto one import package with setuptools'
``package-dir`` (``events/`` is ``wgstore.events``, ...), a layout import-linter cannot walk: it
looks for every subpackage inside the root package's folder. So this builds that folder for it
(``wgstore/`` with a symlink per subpackage, in a temporary directory), puts it first on
``sys.path`` and runs ``lint-imports`` with this repository's pyproject.toml.

Usage: ``python scripts/lint_imports.py`` (``make lint`` runs it); exit status as lint-imports'.
"""

from __future__ import annotations

import sys
import tempfile
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def build_layout(target: Path) -> Path:
    """Lay out ``target/wgstore`` as setuptools' ``package-dir`` maps it; return ``target``."""
    mapping: dict[str, str] = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"][
        "setuptools"
    ]["package-dir"]
    root = target / "wgstore"
    root.mkdir()
    for source in (REPO / mapping["wgstore"]).iterdir():
        if source.suffix in (".py", ".typed"):
            (root / source.name).symlink_to(source)
    for package, folder in sorted(mapping.items()):
        parts = package.split(".")
        if len(parts) == 2:  # wgstore.events, ...: nested ones come along inside their folder
            (root / parts[1]).symlink_to(REPO / folder, target_is_directory=True)
    return target


def main() -> int:
    """Check every contract; print import-linter's report; return its exit status."""
    from importlinter.cli import lint_imports

    with tempfile.TemporaryDirectory(prefix="wgstore-layout-") as tmp:
        sys.path.insert(0, str(build_layout(Path(tmp))))
        for name in [m for m in sys.modules if m == "wgstore" or m.startswith("wgstore.")]:
            del sys.modules[name]
        return lint_imports(config_filename=str(REPO / "pyproject.toml"), no_cache=True)


if __name__ == "__main__":
    sys.exit(main())
