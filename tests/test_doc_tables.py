"""README.md and docs/ show tables of parbench report over committed records; each sits under a
'<!-- table: FOLDER NAME -->' marker, and this fails when one differs from what the records
give today (python -m parbench.cli.doc_tables rewrites them)."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from parbench.cli.doc_tables import START, main, refresh
from parbench.results.records import check_folder
from parbench.results.report import render

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
RECORDS = ROOT / "results" / "reference" / "runs"
FIX = "run: python -m parbench.cli.doc_tables README.md docs/*.md --folders results"


def markers(doc: Path) -> list[str]:
    return [line for line in doc.read_text().splitlines() if START.fullmatch(line)]


@pytest.mark.parametrize("doc", DOCS, ids=lambda doc: doc.name)
def test_every_table_in_the_docs_is_current(doc):
    _, stale = refresh(doc, ROOT)
    assert stale == [], FIX


def test_the_readme_headline_and_the_reference_tables_are_generated():
    # the README's headline is the headline sweep's (each framework's representative, rounds
    # until every comparison was clear); docs/results.md has it and every backend's sweep
    assert ("<!-- table: results/reference/headline-runs Headline -->"
            in markers(ROOT / "README.md"))
    results = markers(ROOT / "docs" / "results.md")
    assert "<!-- table: results/reference/headline-runs Headline -->" in results
    for folder in ("runs", "vit-runs", "multinode-runs"):
        for name in ("Headline", "Accuracy and memory"):
            assert f"<!-- table: results/reference/{folder} {name} -->" in results


@pytest.fixture
def records(tmp_path):
    """A folder of three real records: two repeats of jax-single and one of jax-pmap x2."""
    folder = tmp_path / "results" / "runs"
    folder.mkdir(parents=True)
    for pattern in ("jax-single-python-n1-*-r0.json", "jax-single-python-n1-*-r1.json",
                    "jax-pmap-python-n2-*-r0.json"):
        (source,) = RECORDS.glob(pattern)
        shutil.copy(source, folder)
    return folder


def test_a_block_is_the_reports_own_markdown_of_that_table(tmp_path, records):
    doc = tmp_path / "doc.md"
    doc.write_text("# Doc\n\n<!-- table: results/runs Performance -->\n<!-- end table -->\n"
                   "\ntext after\n")
    text, stale = refresh(doc, tmp_path)
    assert stale == [f"{doc}:3: <!-- table: results/runs Performance -->"]
    block = text.split("<!-- table: results/runs Performance -->\n")[1].split(
        "<!-- end table -->")[0]
    report = render(check_folder(records).records)
    assert block.strip() and f"### Performance\n{block}" in report
    assert "jax-pmap" in block and text.endswith("<!-- end table -->\n\ntext after\n")
    doc.write_text(text)
    assert refresh(doc, tmp_path)[1] == []


def test_a_changed_table_is_stale_and_check_writes_nothing(tmp_path, records, capsys):
    doc = tmp_path / "doc.md"
    doc.write_text("<!-- table: results/runs Headline -->\n<!-- end table -->\n")
    assert main([str(doc), "--root", str(tmp_path)]) == 0
    assert main([str(doc), "--root", str(tmp_path), "--check"]) == 0
    current = doc.read_text()
    doc.write_text(current.replace("jax-single", "jax-singel"))  # a hand edit of the table
    capsys.readouterr()
    assert main([str(doc), "--root", str(tmp_path), "--check"]) == 1
    assert "stale: " in capsys.readouterr().out
    assert "jax-singel" in doc.read_text()  # --check wrote nothing
    # jax-pmap is not jax's representative: the headline says what is missing at 2 devices
    assert "at 2 device(s): jax (its representative jax-sharded" in current
    next(records.glob("jax-pmap*")).unlink()  # the records changed
    assert main([str(doc), "--root", str(tmp_path)]) == 0
    assert "2 device(s)" not in doc.read_text()


def test_an_unknown_table_name_is_a_clear_error(tmp_path, records, capsys):
    doc = tmp_path / "doc.md"
    doc.write_text("<!-- table: results/runs Perfomance -->\n<!-- end table -->\n")
    with pytest.raises(ValueError, match=r"no table 'Perfomance'; name one of: 'Headline'; "
                       r"\"Other approaches against their framework's representative\"; "
                       r"'Performance'; 'Accuracy and memory'; 'Environment'"):
        refresh(doc, tmp_path)
    assert main([str(doc), "--root", str(tmp_path)]) == 2
    assert "doc_tables: error: results/runs: no table" in capsys.readouterr().err


def test_a_marker_without_its_end_and_a_folder_without_records_are_errors(tmp_path, records):
    doc = tmp_path / "doc.md"
    doc.write_text("<!-- table: results/runs Headline -->\n\n<!-- table: results/runs "
                   "Performance -->\n<!-- end table -->\n")
    with pytest.raises(ValueError, match="doc.md:1: .* has no '<!-- end table -->'"):
        refresh(doc, tmp_path)
    doc.write_text("text\n<!-- end table -->\n")
    with pytest.raises(ValueError, match="doc.md:2: '<!-- end table -->' without"):
        refresh(doc, tmp_path)
    (tmp_path / "empty").mkdir()
    doc.write_text("<!-- table: empty Headline -->\n<!-- end table -->\n")
    with pytest.raises(ValueError, match="empty: no records"):
        refresh(doc, tmp_path)


def test_an_invalid_record_is_an_error_not_a_smaller_table(tmp_path, records):
    (records / "broken.json").write_text("{}")
    doc = tmp_path / "doc.md"
    doc.write_text("<!-- table: results/runs Headline -->\n<!-- end table -->\n")
    with pytest.raises(ValueError, match="1 invalid record"):
        refresh(doc, tmp_path)


def test_headline_is_ambiguous_with_two_specs_and_heading_caption_picks_one(tmp_path,
                                                                            records):
    vit = sorted((ROOT / "results" / "reference" / "vit-runs").glob("jax-single-*-r0.json"))
    shutil.copy(vit[0], records)
    doc = tmp_path / "doc.md"
    doc.write_text("<!-- table: results/runs Headline -->\n<!-- end table -->\n")
    with pytest.raises(ValueError, match="2 tables match 'Headline'; name one of: "
                       "'Headline > spec "):
        refresh(doc, tmp_path)
    groups = [line for line in render(check_folder(records).records).splitlines()
              if line.startswith("### spec ")]
    doc.write_text(f"<!-- table: results/runs Headline > {groups[0][4:]} -->\n"
                   "<!-- end table -->\n")
    text, stale = refresh(doc, tmp_path)
    assert len(stale) == 1 and "| jax " in text


LINK = re.compile(r"\]\((?!https?://|#|mailto:)([^)#\s]+)")
CODE = re.compile(r"```.*?```|`[^`\n]*`", re.S)


@pytest.mark.parametrize("doc", DOCS, ids=lambda doc: doc.name)
def test_every_relative_link_stays_in_the_repository_and_exists(doc):
    """Nothing cites a file outside the repository (a reader of a clone has no other)."""
    for target in LINK.findall(CODE.sub("", doc.read_text())):
        path = (doc.parent / target).resolve()
        assert path.is_relative_to(ROOT) and path.exists(), f"{doc.name}: {target}"
