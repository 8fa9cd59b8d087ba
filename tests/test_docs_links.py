"""The design document stays true to the tree: its links and file names exist, and every
citation of it in the code names one of its sections.

docs/architecture.md names modules by path and is cited from code comments by section
("docs/architecture.md, "Layers""); a file moved or a section renamed would leave them pointing
nowhere. The Markdown links of every document (README.md, docs/, bench/README.md and the
bench journal, bench/history/) are checked the same way, anchors included, and so is every
citation of a section of README.md, a docs/ page or bench/README.md by name.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
ARCHITECTURE = REPO / "docs" / "architecture.md"
DOCUMENTS = sorted(
    [
        REPO / "README.md",
        REPO / "bench" / "README.md",
        *REPO.glob("docs/*.md"),
        *REPO.glob("bench/history/*.md"),
    ]
)

_LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
_HEADING = re.compile(r"^#{1,6} (.+)$", re.MULTILINE)
_FENCE = re.compile(r"^```.*?^```", re.MULTILINE | re.DOTALL)
_PATH = re.compile(
    r"`((?:_wgstore|bench|cli|docs|events|examples|migrations|orchestration|"
    r"projections|scripts|tests)/[\w./-]+)`"
)
_CITATION = re.compile(r"docs/architecture\.md\W{0,3}\"([^\"]+)\"")
_ANY_CITATION = re.compile(
    r"(?<![\w/.-])((?:docs/[\w-]+|bench/README|README)\.md)\W{0,3}\"([A-Za-z][^\"]*)\""
)


_SKIP = {".git", ".venv", "__pycache__", "node_modules", "test-artifacts", "build"}
_JOURNAL = REPO / "bench" / "history"  # what was written then, kept verbatim: not cited from


def _files(*suffixes: str) -> Iterator[Path]:
    """The repository's files with these suffixes, outside version control and the venv."""
    for folder, subfolders, names in os.walk(REPO):
        subfolders[:] = [d for d in subfolders if d not in _SKIP and not d.endswith(".egg-info")]
        for name in names:
            if name.endswith(suffixes):
                yield Path(folder) / name


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces as hyphens."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def _headings(path: Path) -> list[str]:
    return _HEADING.findall(_FENCE.sub("", path.read_text()))


def _links(path: Path) -> list[str]:
    return _LINK.findall(_FENCE.sub("", path.read_text()))


@pytest.mark.parametrize("document", DOCUMENTS, ids=lambda p: str(p.relative_to(REPO)))
def test_every_relative_link_of_a_document_reaches_a_file_and_heading(document: Path) -> None:
    broken = []
    for link in _links(document):
        if re.match(r"[a-z]+:", link):  # https:, mailto:: not ours to check offline
            continue
        target, _, anchor = link.partition("#")
        path = (document.parent / target).resolve() if target else document
        if not path.exists():
            broken.append(f"{link}: no file {path.relative_to(REPO)}")
        elif anchor and path.suffix == ".md" and anchor not in map(_slug, _headings(path)):
            broken.append(f"{link}: no heading #{anchor} in {path.relative_to(REPO)}")
    assert not broken, f"{document.relative_to(REPO)}: " + "; ".join(broken)


def test_every_file_the_design_names_exists() -> None:
    named = set(_PATH.findall(ARCHITECTURE.read_text()))
    assert len(named) > 20, "the pattern no longer finds the file names the document uses"
    missing = sorted(name for name in named if not (REPO / name).exists())
    assert not missing, f"docs/architecture.md names files that do not exist: {missing}"


def _citations() -> list[tuple[str, str]]:
    found = []
    for path in _files(".py", ".toml", ".md"):
        if path == ARCHITECTURE:
            continue
        for section in _CITATION.findall(path.read_text(errors="replace")):
            found.append((str(path.relative_to(REPO)), section))
    return found


def test_every_citation_of_the_design_names_one_of_its_sections() -> None:
    citations = _citations()
    assert {path for path, _ in citations} >= {"events/store.py", "pyproject.toml"}
    sections = set(_headings(ARCHITECTURE))
    wrong = [f'{path}: "{section}"' for path, section in citations if section not in sections]
    assert not wrong, f"cited sections that docs/architecture.md does not have: {wrong}"


def test_nothing_cites_the_design_note_that_lived_outside_the_repository() -> None:
    stale = [
        str(path.relative_to(REPO))
        for path in _files(".py", ".toml", ".md", ".cfg", ".txt", ".mako", "Makefile")
        if path != Path(__file__).resolve() and "DESIGN.md" in path.read_text(errors="replace")
    ]
    assert not stale, f"cite docs/architecture.md instead of DESIGN.md in: {stale}"


def _link_texts(path: Path) -> list[str]:
    return re.findall(r"\[([^\]]*)\]\(", _FENCE.sub("", path.read_text()))


def _words(text: str) -> str:
    return " ".join(text.split()).casefold()


def test_every_citation_of_a_document_section_names_one_of_its_sections() -> None:
    """``docs/verify.md, "Against a digest"``: a heading of that page. bench/README.md's are
    entries of its journal: a heading there, or the title of an entry it links to."""
    cited = []
    for path in _files(".py", ".toml", ".md"):
        if _JOURNAL in path.parents or path == Path(__file__).resolve():
            continue
        for document, section in _ANY_CITATION.findall(path.read_text(errors="replace")):
            cited.append((str(path.relative_to(REPO)), document, _words(section)))
    assert {document for _, document, _ in cited} >= {"bench/README.md", "docs/python-api.md"}
    wrong = []
    for path, document, section in cited:
        target = REPO / document
        if not target.exists():
            wrong.append(f"{path}: {document} does not exist")
            continue
        names = [_words(h) for h in _headings(target)]
        if document == "bench/README.md":
            names += [_words(text) for text in _link_texts(target)]
            found = any(section in name for name in names)
        else:
            found = section in names
        if not found:
            wrong.append(f'{path}: {document}, "{section}"')
    assert not wrong, f"cited sections that do not exist: {wrong}"
