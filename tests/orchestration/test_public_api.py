"""The public surface of ``wgstore.orchestration``: sorted, complete, and cheap to import."""

from __future__ import annotations

import subprocess
import sys

import wgstore.orchestration as orchestration


def test_all_is_sorted_and_every_name_resolves() -> None:
    names = list(orchestration.__all__)
    kind = [(0 if n.isupper() else 1 if n[0].isupper() else 2, n) for n in names]
    assert kind == sorted(kind)
    for name in (
        "WorkerGroup",
        "ActiveWorkerGroup",
        "WorkerGroupContext",
        "RayExecutor",
        "WorkerGroupStartError",
        "get_context",
        "report",
        "derive_commands",
        "run_executor",
        "run_training",
    ):
        assert name in names
    assert all(getattr(orchestration, name) is not None for name in names)


def test_a_ray_worker_imports_the_worker_class_and_train_api_without_the_store() -> None:
    code = (
        "import sys\n"
        "import wgstore.orchestration.runtimes.actors\n"
        "from wgstore.orchestration import get_context, report\n"
        "heavy = [m for m in sys.modules if m.startswith(('sqlalchemy', 'wgstore.events', 'ray'))]\n"
        "print(heavy)"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    assert result.stdout.strip() == "[]"
