"""docs/architecture.md "Layers": dependencies point one way, table metadata depends on nothing,
Ray only in orchestration. The import contracts live in pyproject.toml ([tool.importlinter]); this
runs them (so `make test`, hence CI, holds them as `make lint` does)."""

from __future__ import annotations

import ast
import subprocess
import sys
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())


def test_every_import_contract_in_pyproject_holds() -> None:
    result = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "lint_imports.py")],
        capture_output=True,
        text=True,
        timeout=240,
        cwd=REPO,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 broken" in result.stdout


def test_every_subpackage_is_named_by_a_contract() -> None:
    packages = {p for p in PYPROJECT["tool"]["setuptools"]["packages"] if p.count(".") == 1}
    named: set[str] = set()
    for contract in PYPROJECT["tool"]["importlinter"]["contracts"]:
        for key in ("layers", "source_modules", "forbidden_modules"):
            named.update(contract.get(key, ()))
    assert packages - named == set()


def test_every_room_and_module_of_orchestration_is_a_layer_of_its_rooms_contract() -> None:
    """A new room (subpackage) or top-level module of orchestration takes a place in the rooms'
    layers, so its dependencies are checked one way like the others'."""
    contract = next(
        c
        for c in PYPROJECT["tool"]["importlinter"]["contracts"]
        if c.get("containers") == ["wgstore.orchestration"]
    )
    layered = {name.strip() for layer in contract["layers"] for name in layer.split("|")}
    folder = REPO / "orchestration"
    members = {p.name for p in folder.iterdir() if (p / "__init__.py").exists()}
    members |= {p.stem for p in folder.glob("*.py") if p.stem != "__init__"}
    assert members == layered


def test_no_module_of_wgstore_is_in_an_import_circle() -> None:
    """Every module depends one way: no chain of imports (those under TYPE_CHECKING and inside
    functions included) leads from a module back to itself. A helper that needs its owner
    names a Protocol of it (``events.log_access.LogAccess``, ``stream_watch.Waker``). Read from
    the installed package (the strict editable install's link tree: every module, as built)."""
    import grimp

    graph = grimp.build_graph("wgstore")
    circles = []
    for module in sorted(graph.modules):
        for imported in graph.find_modules_directly_imported_by(module):
            related = imported.startswith(module + ".") or module.startswith(imported + ".")
            back = (
                None if related else graph.find_shortest_chain(importer=imported, imported=module)
            )
            if back:
                circles.append(" -> ".join((module, *back)))
    assert len(graph.modules) > 150
    assert circles == []


def test_table_metadata_imports_nothing_from_wgstore() -> None:
    tree = ast.parse((REPO / "events" / "schema.py").read_text())
    imported = {
        alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.Import)
        for alias in node.names
    } | {node.module or "." for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
    assert {name for name in imported if name.startswith(("wgstore", "."))} == set()


def test_migrations_env_reads_only_the_table_metadata() -> None:
    tree = ast.parse((REPO / "migrations" / "env.py").read_text())
    top_level = {
        node.module
        for node in tree.body
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("wgstore")
    } | {
        alias.name
        for node in tree.body
        if isinstance(node, ast.Import)
        for alias in node.names
        if alias.name.startswith("wgstore")
    }
    assert top_level == {"wgstore.events.schema"}


def _python(code: str) -> str:
    """What a fresh interpreter prints running ``code`` (which must succeed)."""
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    return result.stdout.strip()


def test_events_and_projections_import_and_open_a_store_with_ray_unavailable(
    tmp_path: Path,
) -> None:
    code = (
        "import sys; sys.modules['ray'] = None\n"
        "import wgstore.events, wgstore.projections\n"
        f"store = wgstore.events.EventStore.open('sqlite:///{tmp_path / 'w.db'}')\n"
        "store.close()\n"
        "assert 'ray' not in [m for m in sys.modules if sys.modules[m] is not None and m == 'ray']\n"
        "print('ok')"
    )
    assert _python(code) == "ok"


def test_the_ray_train_callback_imports_without_sqlalchemy() -> None:
    # Ray unpickles the callback in the controller on its critical path; the store (and with it
    # SQLAlchemy, ~0.25 s) loads later, in the writer's thread.
    code = (
        "import sys\n"
        "import wgstore.orchestration.ray_train.callback\n"
        "import wgstore.projections, wgstore.events\n"
        "print(sorted({m.split('.')[0] for m in sys.modules} & {'sqlalchemy', 'alembic', "
        "'psycopg'}))"
    )
    assert _python(code) == "[]"
