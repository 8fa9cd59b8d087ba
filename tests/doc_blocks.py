"""The documents' code, as the tests that run or check it read it.

The documents are README.md, every page of docs/ and bench/README.md (bench/history/ is a
journal: what was run then, kept verbatim, not checked). A fenced block's info string says what
it is and so which test takes it:

- ``bash``: command lines. ``wgstore ...`` lines run against a recorded store
  (tests/cli/test_readme_commands.py); every other line is checked (a ``make`` target, a
  ``pip install`` extra, a script and its options, an environment variable wgstore reads) by
  tests/test_docs_code.py.
- ``python``: runs as written, in a fresh process against a fresh SQLite store, no Ray
  (tests/test_docs_code.py).
- ``python ray``: needs a Ray cluster or a trainer of your own: compiled, its imports resolved
  and every call of an imported name bound to its signature (tests/test_docs_code.py); the two
  blocks of docs/python-api.md "Using it" also run on Ray (tests/test_readme.py).
- ``sql``, ``sql sqlite``, ``sql postgresql``: docs/sql.md's queries (tests/projections/test_sql_docs.py).
- ``yaml``: a configuration to adapt (a Kubernetes manifest): parsed (tests/test_docs_code.py).
- ``text``: output or a listing, nothing to run.

A block without an info string is refused (tests/test_docs_code.py), so a new command cannot
slip in unchecked.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md")), REPO / "bench" / "README.md"]
KINDS = {"bash", "python", "python ray", "sql", "sql sqlite", "sql postgresql", "text", "yaml"}
INLINE = re.compile(r"`+(wgstore [^`]+)`+")
_ENV_PREFIX = re.compile(r"^([A-Z][A-Z0-9_]*)=(\$\(.*\)|\S+)\s+")


@dataclass(frozen=True)
class Block:
    """One fenced block: its document, first line (1-based), info string and text."""

    path: Path
    line: int
    kind: str
    code: str

    def where(self) -> str:
        return f"{self.path.relative_to(REPO)}:{self.line}"


def blocks(path: Path) -> list[Block]:
    """The fenced blocks of ``path``, in order."""
    found: list[Block] = []
    start: tuple[int, str] | None = None
    body: list[str] = []
    for number, line in enumerate(path.read_text().splitlines(), 1):
        if not line.startswith("```"):
            if start is not None:
                body.append(line)
            continue
        if start is None:
            start, body = (number, line[3:].strip()), []
        else:
            found.append(Block(path, start[0], start[1], "\n".join(body) + "\n"))
            start = None
    assert start is None, f"{path.relative_to(REPO)}:{start[0]}: a block that never ends"
    return found


def all_blocks(kind: str | None = None) -> list[Block]:
    """Every fenced block of every document, or those of one kind."""
    return [b for path in DOCS for b in blocks(path) if kind is None or b.kind == kind]


def command_lines(code: str) -> list[str]:
    """The command lines of a ``bash`` block: continuations joined, comments and blanks dropped."""
    lines: list[str] = []
    pending = ""
    for raw in code.splitlines():
        if raw.rstrip().endswith("\\"):
            pending += raw.rstrip()[:-1].strip() + " "
            continue
        line = (pending + raw.strip()).strip()
        pending = ""
        if line and not line.startswith("#"):
            lines.append(line)
    return lines


def env_prefix(line: str) -> tuple[list[str], str]:
    """The ``NAME=value`` assignments a command line starts with, and the command after them."""
    names: list[str] = []
    while match := _ENV_PREFIX.match(line):
        names.append(match.group(1))
        line = line[match.end() :]
    return names, line


def wgstore_lines(path: Path) -> list[str]:
    """The ``wgstore`` command lines of a document: bash blocks, and inline commands with arguments.

    An inline span of three words or more (``wgstore db check``) is a command; a shorter one
    (``wgstore sql``) names a command in prose.
    """
    lines = []
    for block in blocks(path):
        if block.kind == "bash":
            lines += [
                c for _, c in map(env_prefix, command_lines(block.code)) if c.startswith("wgstore ")
            ]
    prose = re.sub(r"^```.*?^```", "", path.read_text(), flags=re.DOTALL | re.MULTILINE)
    lines += [" ".join(span.split()) for span in INLINE.findall(prose) if len(span.split()) >= 3]
    return lines
