"""The documentation, checked in the fast tier: README.md is the front door (short), docs/ holds the rest; the module
reference is generated from the modules themselves (tests/module_docs.py), and every relative link of README.md and
docs/ reaches a file, and its #anchor a heading of that file."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests import module_docs
from tests.conftest import ROOT

DOCS = sorted([ROOT / "README.md", *(ROOT / "docs").rglob("*.md")])
LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^```.*?^```", re.S | re.M)


def anchors(path: Path) -> set[str]:
    """The anchors GitHub gives the headings of a Markdown file (lower case, punctuation dropped, blanks as -)."""
    found: set[str] = set()
    for line in FENCE.sub("", path.read_text()).splitlines():
        heading = re.match(r"#{1,6} (.+)", line)
        if heading:
            slug = re.sub(r"[^\w\- ]", "", heading.group(1).strip().lower()).replace(" ", "-")
            found.add(slug)
    return found


@pytest.mark.parametrize("page", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_reaches_a_file_and_its_anchor_a_heading(page: Path) -> None:
    broken = []
    for target in LINK.findall(FENCE.sub("", page.read_text())):
        if re.match(r"[a-z]+:", target):  # http(s):, mailto:
            continue
        path, _, anchor = target.partition("#")
        where = (page.parent / path).resolve() if path else page
        if not where.exists():
            broken.append(f"{target}: no such file")
        elif anchor and where.suffix == ".md" and anchor not in anchors(where):
            broken.append(f"{target}: no heading #{anchor} in {where.relative_to(ROOT)}")
    assert not broken, f"{page.relative_to(ROOT)}: broken links: {broken}"


def test_the_module_reference_is_generated_from_the_modules_and_current() -> None:
    stale = [str(page.relative_to(ROOT)) for page, text in module_docs.pages().items()
             if not page.is_file() or page.read_text() != text]
    assert not stale, f"out of date: {stale}: run {module_docs.WRITE}"
    pages = {p.name for p in module_docs.OUT.glob("*.md")}
    assert pages == {f"{p.stem}.md" for p in module_docs.modules()} | {"index.md"}


CLAIM = re.compile(r"^\| .+ \| `(tests/[^`:]+)(?:::(\w+))?` \|$")


def test_every_claim_of_the_development_guide_names_a_test_that_exists() -> None:
    """docs/guides/development.md's table of claims: each row names a test module, or a test function in it, that
    exists; a claim cannot outlive its proof."""
    lines = [line for line in (ROOT / "docs" / "guides" / "development.md").read_text().splitlines()
             if line.startswith("| ") and "`tests/" in line]
    rows = [CLAIM.match(line) for line in lines]
    assert len(rows) >= 30 and all(rows), [line for line, row in zip(lines, rows) if not row]
    missing = []
    for row in rows:
        module, name = ROOT / row.group(1), row.group(2)
        if not module.is_file():
            missing.append(row.group(1))
        elif name and not re.search(rf"^def {name}\(", module.read_text(), re.M):
            missing.append(f"{row.group(1)}::{name}")
    assert not missing, f"claims whose test no longer exists: {missing}"
