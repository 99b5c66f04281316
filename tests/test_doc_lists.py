"""The lists in the docs are made from the code (the modes, which backend takes which mode, the
backends, the record's schema versions and fields, the launchers' ports) and each folder of
records says where its records were made; these fail when a committed list differs from what
the code and the records give today (python -m parbench.cli.doc_tables README.md docs/*.md
--folders results rewrites them), and show that each list follows its source."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from dataclasses import replace
from pathlib import Path

import pytest

from parbench.cli import doc_ports, doc_schema
from parbench.cli.doc_folders import record_folders
from parbench.cli.doc_lists import NO_GPU_RUN, backends_list, mode_support
from parbench.cli.doc_tables import LIST, LISTS, main, refresh
from parbench.results.records import SCHEMA
from parbench.run.registry import BACKENDS

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "results"
READMES = sorted(RESULTS.rglob("README.md"))
FIX = "run: python -m parbench.cli.doc_tables README.md docs/*.md --folders results"
RECORD = next((RESULTS / "reference" / "runs").glob("jax-single-*-r0.json"))


def lists_in(doc: Path) -> list[str]:
    return [line for line in doc.read_text().splitlines() if LIST.fullmatch(line)]


@pytest.mark.parametrize("readme", READMES, ids=lambda p: str(p.relative_to(RESULTS)))
def test_every_readme_under_results_is_current(readme):
    _, stale = refresh(readme, ROOT)
    assert stale == [], FIX


def test_every_folder_of_records_has_its_provenance():
    for folder in record_folders(RESULTS):
        marker = f"<!-- list: provenance {folder.relative_to(ROOT).as_posix()} -->"
        readme = folder / "README.md"
        assert readme.exists() and marker in lists_in(readme), f"{folder}: {FIX}"


def test_every_reference_folder_of_records_says_what_it_holds():
    table = (RESULTS / "reference" / "README.md").read_text().split("<!-- list:")[0]
    for folder in record_folders(RESULTS / "reference"):
        name = folder.relative_to(RESULTS / "reference").as_posix()
        assert f"[{name}/]({name}/README.md)" in table, f"reference/README.md: a row for {name}"


def test_the_docs_hold_the_lists_generated_not_written():
    wanted = {"docs/backends.md": ["backends"], "docs/modes.md": ["modes", "mode-support"],
              "docs/input-pipelines.md": ["mode-support input loader_workers"],
              "docs/records.md": ["schema-versions", "record-fields"],
              "docs/security.md": ["launchers"],
              "results/reference/README.md": ["folders results/reference"]}
    for doc, names in wanted.items():
        for name in names:
            assert f"<!-- list: {name} -->" in lists_in(ROOT / doc), doc


def test_a_refusal_added_to_the_registry_reaches_the_mode_table(monkeypatch):
    monkeypatch.setitem(BACKENDS["torch-ddp"].refusals, "grad_accum", "a reason of the test")
    text = mode_support(["grad_accum"], ROOT)
    row = next(line for line in text.splitlines() if line.startswith("| torch-ddp "))
    note = re.search(r"no \[(\d+)\]", row)
    assert note and f"{note[1]}. a reason of the test" in text
    assert "| torch-single | one (1 device) | yes |" in text


def test_a_gpu_record_is_what_says_a_gpu_path_ran(tmp_path):
    assert NO_GPU_RUN in backends_list([], tmp_path)
    record = json.loads(RECORD.read_text())
    record["env"]["gpus"] = ["NVIDIA H100"]
    (tmp_path / "results" / "gpu").mkdir(parents=True)
    (tmp_path / "results" / "gpu" / "r.json").write_text(json.dumps(record))
    rows = {line.split(" | ")[0]: line for line in backends_list([], tmp_path).splitlines()}
    assert "1 GPU record(s) committed" in rows["| `jax-single`"]
    assert NO_GPU_RUN in rows["| `jax-pmap`"]


def test_a_gpu_record_in_a_folder_git_ignores_is_not_committed(tmp_path):
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    (tmp_path / ".gitignore").write_text("results/runs/\n")
    record = json.loads(RECORD.read_text())
    record["env"]["gpus"] = ["NVIDIA H100"]
    (tmp_path / "results" / "runs").mkdir(parents=True)
    (tmp_path / "results" / "runs" / "r.json").write_text(json.dumps(record))
    assert "GPU record(s) committed" not in backends_list([], tmp_path)


def test_every_schema_version_needs_its_line_in_the_comment(monkeypatch):
    added, _ = doc_schema.version_comment()
    assert sorted(added) == list(range(2, doc_schema.SCHEMA_VERSION + 1))
    monkeypatch.setattr(doc_schema, "version_comment", lambda: ({2: "x"}, ""))
    with pytest.raises(ValueError, match="make them agree"):
        doc_schema.versions_list([], ROOT)


def test_every_field_of_the_schema_is_listed_and_described():
    """The generated table names every field; the prose of records.md says what each
    top-level one holds (outside the generated blocks)."""
    listed = doc_schema.fields_list([], ROOT)
    prose = re.sub(r"<!-- list:.*?<!-- end list -->", "", (ROOT / "docs" / "records.md")
                   .read_text(), flags=re.DOTALL)
    for name in SCHEMA["properties"]:
        assert f"| `{name}` |" in listed
        assert f"`{name}`" in prose, f"docs/records.md does not describe {name}"
    for name in ("run_id", "created", "duration_s", "notes"):
        assert f"| `{name}` | " in listed


def test_a_launcher_without_its_ports_fails_the_list(monkeypatch):
    text = doc_ports.launchers_list([], ROOT)
    assert "`--rdzv-endpoint=127.0.0.1:PORT`" in text and "coordinator" in text
    monkeypatch.setitem(doc_ports.LAUNCHERS, "jax-distributed",
                        replace(doc_ports.LAUNCHERS["jax-distributed"], listens=""))
    with pytest.raises(ValueError, match="jax-distributed"):
        doc_ports.launchers_list([], ROOT)


def _folder(root: Path, *parts: str, records: int = 1) -> Path:
    folder = root.joinpath(*parts)
    folder.mkdir(parents=True)
    for i in range(records):
        shutil.copy(RECORD, folder / f"r{i}.json")
    return folder


def test_folders_of_records_and_their_parts(tmp_path):
    runs = tmp_path / "x-runs"
    _folder(tmp_path, "x-runs", "round0")
    _folder(tmp_path, "x-runs", "round1")
    plain = _folder(tmp_path, "explain", "one")
    _folder(tmp_path, "explain", "one", "inner")
    (tmp_path / "empty").mkdir()
    assert record_folders(tmp_path) == [plain, runs]


def test_a_folder_git_ignores_needs_no_readme(tmp_path, capsys):
    """A user's own runs (git-ignored results/runs/, written by `tox -e torch-ddp`) are not the
    project's records: neither the list of folders nor --check asks them for a README."""
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    (tmp_path / ".gitignore").write_text("results/runs/\n")
    kept = _folder(tmp_path, "results", "kept-runs")
    _folder(tmp_path, "results", "runs", "torch-ddp")
    assert record_folders(tmp_path / "results") == [kept]
    args = ["--root", str(tmp_path), "--folders", str(tmp_path / "results")]
    assert main(args) == 0 and main([*args, "--check"]) == 0
    assert (kept / "README.md").exists()
    assert not (tmp_path / "results" / "runs" / "README.md").exists()
    assert not (tmp_path / "results" / "runs" / "torch-ddp" / "README.md").exists()


def test_provenance_names_every_machine_and_each_dirty_record(tmp_path, capsys):
    folder = _folder(tmp_path, "results", "some-runs", records=2)
    record = json.loads((folder / "r1.json").read_text())
    record["env"]["git_commit"] += "-dirty"
    record["env"]["cpu_model"] = "Another CPU"
    (folder / "r1.json").write_text(json.dumps(record))
    args = ["--root", str(tmp_path), "--folders", str(tmp_path / "results")]
    assert main([*args, "--check"]) == 1
    assert "missing: " in capsys.readouterr().out
    assert main(args) == 0 and main([*args, "--check"]) == 0
    text = (folder / "README.md").read_text()
    assert "`AMD EPYC`" in text and "`Another CPU`" in text
    assert "1 of 2 ran with uncommitted changes" in text
    (folder / "r1.json").unlink()  # the records changed: the README is stale
    assert main([*args, "--check"]) == 1


def test_list_markers_are_checked_like_table_markers(tmp_path):
    doc = tmp_path / "doc.md"
    doc.write_text("<!-- list: nonesuch -->\n<!-- end list -->\n")
    with pytest.raises(ValueError, match=f"no list 'nonesuch'; name one of: {', '.join(LISTS)}"):
        refresh(doc, tmp_path)
    doc.write_text("<!-- list: modes -->\n<!-- end table -->\n")
    with pytest.raises(ValueError, match="without a table marker"):
        refresh(doc, tmp_path)
    doc.write_text("<!-- list: modes -->\n")
    with pytest.raises(ValueError, match="has no '<!-- end list -->'"):
        refresh(doc, tmp_path)
    doc.write_text("text\n<!-- list: modes -->\n<!-- end list -->\n")
    text, stale = refresh(doc, tmp_path)
    assert stale == [f"{doc}:2: <!-- list: modes -->"] and "`--reshard-after-forward`" in text


LINK = re.compile(r"\]\((?!https?://|#|mailto:)([^)#\s]+)")


@pytest.mark.parametrize("readme", READMES, ids=lambda p: str(p.relative_to(RESULTS)))
def test_every_link_of_a_results_readme_exists(readme):
    for target in LINK.findall(readme.read_text()):
        path = (readme.parent / target).resolve()
        assert path.is_relative_to(ROOT) and path.exists(), f"{readme}: {target}"
