"""scripts/mutants.py makes the mutants `make mutate` runs; scripts/mutate.py's table stays valid.

Pure: mutants are generated and executed in memory, nothing is run under pytest-in-pytest.
"""

from __future__ import annotations

import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

SCRIPTS = Path(__file__).resolve().parents[1] / "scripts"
sys.path.insert(0, str(SCRIPTS))

import mutate  # noqa: E402
from mutants import mutants_of  # noqa: E402

SOURCE = '''"""Module docstring."""
from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Sequence

__all__ = ["clamp"]


def clamp(value: int, low: int = 0) -> int:
    """Docstring."""
    if value < low:
        raise ValueError("too low")
    total = value + 1
    return total if value and low else low
'''


def _run(code: object) -> ModuleType:
    module = ModuleType("sample")
    exec(code, module.__dict__)
    return module


def test_every_kind_of_mutant_is_made_and_named_by_scope_not_line() -> None:
    ids = [m.id for m in mutants_of(SOURCE, "sample.py")]
    assert ids == [
        "clamp: constant: 0 -> 1",
        "clamp: negate: value < low -> not value < low",
        "clamp: compare: value < low -> value <= low",
        "clamp: remove: raise ValueError('too low') -> pass",
        "clamp: remove: total = value + 1 -> pass",
        "clamp: binop: value + 1 -> value - 1",
        "clamp: constant: 1 -> 2",
        "clamp: return: return total if value and low else low -> return None",
        "clamp: negate: value and low -> not (value and low)",
        "clamp: boolop: value and low -> value or low",
    ]
    shifted = mutants_of("\n\n# moved\n" + SOURCE, "sample.py")
    assert [m.id for m in shifted] == ids
    assert [m.line for m in shifted] == [m.line + 3 for m in mutants_of(SOURCE, "sample.py")]


def test_docstrings_type_checking_all_and_error_texts_are_left_alone() -> None:
    text = " ".join(m.id for m in mutants_of(SOURCE, "sample.py"))
    for untouched in ("Docstring", "Sequence", "__all__", "too low'XX", "XXtoo low"):
        assert untouched not in text


def _outcomes(module: ModuleType) -> list[Any]:
    results: list[Any] = []
    for args in ((5, 1), (-1, 0), (0, 0), (3, 3), (5,)):
        try:
            results.append(module.clamp(*args))
        except Exception as error:  # noqa: BLE001 - which error is part of the outcome
            results.append(type(error))
    return results


def test_each_mutant_runs_and_changes_behaviour() -> None:
    original = _outcomes(_run(compile(SOURCE, "sample.py", "exec")))
    assert original == [6, ValueError, 0, 4, 0]
    for mutant in mutants_of(SOURCE, "sample.py"):
        assert _outcomes(_run(mutant.code)) != original, mutant.id


def test_keyword_constants_are_named_and_class_fields_are_not_removed() -> None:
    source = (
        "from dataclasses import dataclass\n"
        "@dataclass(frozen=True, slots=True)\n"
        "class Point:\n    x: int = 0\n    y: int\n"
    )
    ids = [m.id for m in mutants_of(source, "p.py")]
    assert ids == [
        "Point: constant: 0 -> 1",
        "Point: constant: frozen=True -> frozen=False",
        "Point: constant: slots=True -> slots=False",
    ]


def test_the_module_table_names_existing_files_and_every_equivalent_matches_a_mutant() -> None:
    equivalents = mutate.load_equivalents()
    assert set(equivalents) <= set(mutate.MODULES)
    for module, tests in mutate.MODULES.items():
        path = mutate.source_path(module)
        assert path.is_file(), module
        for test in tests:
            assert (mutate.REPO / test).is_file(), test
        ids = {m.id for m in mutants_of(path.read_text(), str(path), compiled=False)}
        stale = set(equivalents.get(module, {})) - ids
        assert not stale, f"{module}: equivalent entries that match no mutant: {stale}"


def test_a_module_outside_the_package_dirs_is_refused() -> None:
    with pytest.raises(SystemExit, match="not in pyproject's package-dir"):
        mutate.source_path("elsewhere.module")
    with pytest.raises(SystemExit, match=r"no file _wgstore/nowhere/module\.py"):
        mutate.source_path("wgstore.nowhere.module")


def test_a_module_of_a_subpackage_is_found_under_its_mapped_parent() -> None:
    path = mutate.source_path("wgstore.orchestration.ray_train.translate")
    assert path == mutate.REPO / "orchestration" / "ray_train" / "translate.py"
