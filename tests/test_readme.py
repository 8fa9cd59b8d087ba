"""The docs, followed as a new user would: the Python snippets, then ``make demo``, then every audit command.

The Python snippets of docs/python-api.md "Using it" are taken from the page itself (so the test
follows it as it changes) and run in order, in fresh processes, against one database: the first
runs a real worker group on the session's Ray, the second appends a custom event type
(``CheckpointPinned``) that the ``wgstore`` command has never heard of. Then the demo command
from the Makefile runs against the same database, and every audit command must exit 0, with the
read models equal to a rebuild (``wgstore verify`` checks that).
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

REPO = Path(__file__).resolve().parents[1]
README_URL = "sqlite:///wgstore.db"


def readme_snippets() -> list[str]:
    """The Python code blocks of docs/python-api.md "Using it", in order (``python ray`` too)."""
    text = (REPO / "docs" / "python-api.md").read_text()
    section = text.split("\n## Using it\n", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"^```python(?: ray)?\n(.*?)^```", section, flags=re.DOTALL | re.MULTILINE)


def demo_command() -> list[str]:
    """The arguments of ``wgstore`` in the Makefile's ``demo`` target."""
    makefile = (REPO / "Makefile").read_text()
    line = re.search(r"^demo:.*\n\t\$\(BIN\)/wgstore (.+)$", makefile, flags=re.MULTILINE)
    assert line is not None, "the Makefile has no `demo` target running wgstore"
    return shlex.split(line.group(1))


# The snippet's and the demo's training, shortened: the test checks that they run and finish
# (and what the audit commands say of the groups), not how many steps they take; a 0.2 s poll
# (the default is 1 s) notices the end sooner.
SNIPPET_STEPS = 'train_fn_config={"steps": 20})'
SHORT_SNIPPET_STEPS = 'train_fn_config={"steps": 3}, poll_interval_s=0.2)'
SHORT_DEMO = ["--config", '{"steps": 3}', "--poll-interval", "0.2", "--cpus-per-worker", "0.25"]


def _subprocess_env(ray_address: str) -> dict[str, str]:
    env = dict(os.environ)
    env["RAY_ADDRESS"] = ray_address
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")])
    env.pop("WGSTORE_URL", None)
    return env


def test_the_readme_has_the_two_snippets_this_test_follows() -> None:
    snippets = readme_snippets()
    assert len(snippets) == 2
    assert all(README_URL in snippet for snippet in snippets)
    assert SNIPPET_STEPS in snippets[0], "the worker group snippet's config this test shortens"
    assert demo_command()[:1] == ["run"]


@pytest.mark.ray
@pytest.mark.slow
def test_the_readme_snippets_the_demo_and_every_audit_command_work_on_one_database(
    store_url: str, ray_session: None, tmp_path: Path
) -> None:
    import ray

    from wgstore.cli import app

    env = _subprocess_env(ray.get_runtime_context().gcs_address)
    for snippet in readme_snippets():
        code = snippet.replace(README_URL, store_url).replace(SNIPPET_STEPS, SHORT_SNIPPET_STEPS)
        done = subprocess.run(
            [sys.executable, "-c", code],
            cwd=REPO,
            env=env,
            capture_output=True,
            text=True,
            timeout=240,
        )
        assert done.returncode == 0, (
            f"docs/python-api.md snippet failed:\n{code}\n{done.stderr[-3000:]}"
        )

    wgstore = Path(sys.executable).with_name("wgstore")
    demo = subprocess.run(
        [str(wgstore), *demo_command(), *SHORT_DEMO, "--url", store_url],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert demo.returncode == 0, demo.stdout[-2000:] + demo.stderr[-3000:]
    group_id = re.search(r"worker group (\w+) ended: finished", demo.stdout)
    assert group_id is not None, demo.stdout[-2000:]
    group = group_id.group(1)

    runner = CliRunner()

    def wgstore_cli(*args: str) -> str:
        result = runner.invoke(app, [*args, "--url", store_url], catch_exceptions=False)
        assert result.exit_code == 0, f"wgstore {' '.join(args)}:\n{result.stdout}{result.stderr}"
        return result.stdout

    for args in [
        ("groups",),
        ("runs",),
        ("state", group),
        ("replay", group),
        ("polls", group),
        ("events",),
        ("events", "--json"),
        ("export", "-o", str(tmp_path / "log.jsonl")),
        ("export", "-o", str(tmp_path / "log.parquet")),
        ("report", group, "-o", str(tmp_path / "timeline.html")),
        ("projections", "catch-up"),
        ("projections", "rebuild"),
        ("projections", "status"),
        ("db", "check"),
    ]:
        wgstore_cli(*args)

    types = [json.loads(line)["type"] for line in wgstore_cli("events", "--json").splitlines()]
    assert "CheckpointPinned" in types, "the custom event is shown, not dropped"
    assert wgstore_cli("verify")  # hash chains and read models equal to a scratch rebuild
    if store_url.startswith("postgresql"):  # `wgstore sql` reads as the role this makes, once
        assert "wgstore_reader_" in wgstore_cli("db", "reader")
    rows = [
        json.loads(line)
        for line in wgstore_cli(
            "sql", "SELECT status, outcome FROM wg_worker_groups ORDER BY status", "--json"
        ).splitlines()
    ]
    assert rows == [
        {"status": "SHUT_DOWN", "outcome": "finished"},
        {"status": "SHUT_DOWN", "outcome": "finished"},
    ]
