"""Each package's public surface is a sorted ``__all__`` of names that exist."""

from __future__ import annotations

import importlib

import pytest


def _isort_style(name: str) -> tuple[int, str]:
    """CONSTANTS, then Classes, then functions, each alphabetical (ruff's RUF022 order)."""
    kind = 0 if name.isupper() else 1 if name[0].isupper() else 2
    return (kind, name)


@pytest.mark.parametrize(
    "package", ["wgstore.events", "wgstore.projections", "wgstore.orchestration"]
)
def test_all_is_sorted_and_every_name_exists(package: str) -> None:
    module = importlib.import_module(package)
    exported = list(getattr(module, "__all__", []))
    assert exported, f"{package} has no __all__"
    assert exported == sorted(exported, key=_isort_style), "keep __all__ sorted (ruff RUF022)"
    missing = [name for name in exported if not hasattr(module, name)]
    assert not missing


def test_the_design_contract_names_are_exported() -> None:
    from wgstore import events

    for name in (
        "EventStore",
        "NewEvent",
        "ANY",
        "NO_STREAM",
        "STREAM_EXISTS",
        "ConcurrencyError",
        "event_type",
    ):
        assert name in events.__all__
