"""docs/porting.md quotes the strategy files verbatim, and the pages of docs/porting/ the
examples' scripts; this fails when a quote goes stale."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from parbench.cli.excerpts import MARKER, refresh

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "porting.md"


def test_every_excerpt_matches_its_source():
    _, stale = refresh(DOC, ROOT)
    assert stale == [], "run: python -m parbench.cli.excerpts docs/porting.md"


PAGES = sorted((ROOT / "docs" / "porting").glob("*.md"))


@pytest.mark.parametrize("page", [p for p in PAGES if p.name != "README.md"], ids=str)
def test_every_page_quotes_the_four_frameworks_examples_as_they_are(page):
    _, stale = refresh(page, ROOT)
    assert stale == [], f"run: python -m parbench.cli.excerpts {page.relative_to(ROOT)}"
    text = page.read_text()
    quoted = {m["path"] for m in MARKER.finditer(text)}
    # a framework without the concept is named, with the reason, in a "no <script> example" marker
    absent = set(re.findall(r"<!-- no (\w+) example: \w.+ -->", text))
    assert absent <= {"torch", "tf", "paddle", "jax"}, absent
    for script in {"torch", "tf", "paddle", "jax"} - absent:
        assert any(path.startswith("examples/") and path.endswith(f"_{script}.py")
                   for path in quoted), (page.name, script)


def test_the_index_links_every_page_and_only_pages_that_exist():
    index = (ROOT / "docs" / "porting" / "README.md").read_text()
    linked = set(re.findall(r"\]\(([\w-]+\.md)\)", index))
    assert linked == {p.name for p in PAGES if p.name != "README.md"}


def headings(text: str) -> list[tuple[int, str, str]]:
    """(level, title, GitHub's anchor) of every heading outside code blocks, in order."""
    found, seen, code = [], {}, False
    for line in text.splitlines():
        code ^= line.startswith("```")
        heading = None if code else re.match(r"^(#{1,6}) (.+)$", line)
        if heading:
            anchor = re.sub(r"[^\w\- ]", "", heading[2].strip().lower()).replace(" ", "-")
            count = seen.get(anchor, 0)
            seen[anchor] = count + 1
            found.append((len(heading[1]), heading[2], f"{anchor}-{count}" if count else anchor))
    return found


def test_the_references_contents_list_its_sections_in_order():
    text = DOC.read_text()
    contents = re.findall(r"^ *- \[(.+)\]\(#([\w-]+)\)$", text, re.M)
    sections = [(title, anchor) for level, title, anchor in headings(text)
                if level in (2, 3) and title != "Contents"]
    assert contents == sections


def test_every_link_into_the_reference_finds_its_section():
    anchors = {anchor for *_, anchor in headings(DOC.read_text())}
    for page in [*PAGES, ROOT / "examples" / "README.md", ROOT / "README.md"]:
        for anchor in re.findall(r"porting\.md#([\w-]+)\)", page.read_text()):
            assert anchor in anchors, (page.name, anchor)


def test_the_reference_quotes_every_framework():
    paths = [m["path"] for m in MARKER.finditer(DOC.read_text())]
    for framework in ("torch", "tensorflow", "paddle"):
        assert sum(p.startswith(f"frameworks/{framework}/") for p in paths) >= 8


def test_a_changed_source_makes_its_excerpt_stale(tmp_path):
    source = tmp_path / "strategy.py"
    source.write_text("class S:\n    # --- step: one\n    def step(self):\n        return 1\n\n"
                      "    # --- eval\n    def ev(self):\n        return 2\n")
    doc = tmp_path / "doc.md"
    doc.write_text("<!-- excerpt: strategy.py#step -->\n```python\n```\n")
    text, stale = refresh(doc, tmp_path)
    assert len(stale) == 1 and "return 1" in text and "return 2" not in text
    doc.write_text(text)
    assert refresh(doc, tmp_path)[1] == []
    source.write_text(source.read_text().replace("return 1", "return 3"))
    assert len(refresh(doc, tmp_path)[1]) == 1


def test_a_section_ends_before_a_scripts_entry_point(tmp_path):
    (tmp_path / "s.py").write_text("# --- model\ndef f():\n    return 1\n\n\n"
                                   "if __name__ == \"__main__\":\n    f()\n")
    doc = tmp_path / "doc.md"
    doc.write_text("<!-- excerpt: s.py#model -->\n```python\n```\n")
    text, _ = refresh(doc, tmp_path)
    assert "return 1" in text and "__main__" not in text


def test_a_missing_section_is_an_error(tmp_path):
    (tmp_path / "s.py").write_text("x = 1\n")
    doc = tmp_path / "doc.md"
    doc.write_text("<!-- excerpt: s.py#setup -->\n```python\n```\n")
    with pytest.raises(ValueError, match="'# --- setup' markers"):
        refresh(doc, tmp_path)
