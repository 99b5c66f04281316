"""Nothing lost: records of different configurations never share a file, a place that cannot
take the results is refused before anything trains, a record that cannot be written at the end
goes to a fallback that the error names, and a report over a folder with bad files still
reports the good ones."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from conftest import needs, parbench, records_in
from parbench.results.records import FALLBACK_FOLDERS, check_record, name_of, save_record

REFERENCE = Path(__file__).resolve().parents[1] / "results" / "claims" / "runs"
# A fault at the very first step: a run that started training would fail (exit 1), so exit 2
# proves the refusal came before any training.
NOT_EVEN_ONE_STEP = {"PARBENCH_TEST_FAULT": "crash:0:0"}


def one_line_refusal(result, fragment: str) -> None:
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2 and len(lines) == 1, result.stderr
    assert lines[0].startswith("parbench: error:") and fragment in lines[0], lines[0]


@pytest.mark.slow
@needs("torch")
def test_records_of_two_launchers_coexist_and_resume_tells_them_apart(tmp_path):
    common = ["torch-ddp", "--devices", "2", "--steps", "2", "--global-batch", "32",
              "--model", "mlp", "--out", str(tmp_path)]
    for launcher in ("torchrun", "spawn"):
        assert parbench("run", *common, "--launcher", launcher).returncode == 0
    records = records_in(tmp_path)
    assert sorted(r["launcher"] for r in records) == ["spawn", "torchrun"]
    assert len({r["spec_sha256"] for r in records}) == 1  # same computation, two files
    resumed = parbench("compare", *common, "--launcher", "spawn", "--resume", "--report-dir",
                       str(tmp_path / "report"))
    assert resumed.returncode == 0 and "kept (an ok record exists)" in resumed.stderr
    assert len(records_in(tmp_path)) == 2


@pytest.mark.slow
@needs("torch")
def test_thread_count_is_part_of_the_record_name(tmp_path):
    common = ["torch-single", "--steps", "2", "--global-batch", "32", "--model", "mlp", "--out",
              str(tmp_path)]
    for threads in ("1", "2"):
        assert parbench("run", *common, "--threads", threads).returncode == 0
    assert sorted(r["variant"]["threads"] for r in records_in(tmp_path)) == [1, 2]


@pytest.mark.slow
@needs("torch")
@pytest.mark.parametrize("option", ["--out", "--save-weights", "--report-dir"])
def test_unwritable_destination_is_refused_before_training(tmp_path, option):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    command = "compare" if option == "--report-dir" else "run"
    args = [command, "torch-single", "--steps", "2", "--global-batch", "32"]
    if option != "--out":
        args += ["--out", str(tmp_path / "runs")]
    result = parbench(*args, option, str(blocker / "x"), env=NOT_EVEN_ONE_STEP)
    one_line_refusal(result, f"{option} {blocker}")
    assert "cannot write there" in result.stderr
    assert not (tmp_path / "runs").is_dir() or not records_in(tmp_path / "runs")


@pytest.mark.slow
@needs("torch")
def test_save_weights_into_a_folder_is_refused(tmp_path):
    result = parbench("run", "torch-single", "--steps", "2", "--out", str(tmp_path / "runs"),
                      "--save-weights", str(tmp_path), env=NOT_EVEN_ONE_STEP)
    one_line_refusal(result, "is a folder; give a file name")


def test_record_that_cannot_be_written_goes_to_a_named_fallback(tmp_path):
    record = json.loads(next(REFERENCE.glob("*.json")).read_text())
    record.update(schema_version=2, variant={"threads": 2, "nnodes": 1},
                  run_id="fallback-test")
    record["env"].update(network_isolated=False, load_1m_start=0.0, load_1m_end=0.0,
                         other_cpu_s=None)
    assert check_record(record) == []
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    path, problem = save_record(blocker / "runs", record)
    try:
        assert path.parent == FALLBACK_FOLDERS[0] and path.name == name_of(record)
        assert json.loads(path.read_text())["run_id"] == "fallback-test"
        assert problem.startswith(f"could not write the record into {blocker / 'runs'}")
        assert problem.endswith(f"it was saved to {path} instead")
    finally:
        path.unlink()


@pytest.mark.slow
def test_report_skips_bad_files_and_strict_refuses_them(tmp_path):
    for record in sorted(REFERENCE.glob("*.json"))[:3]:  # schema v1 records: still read
        shutil.copy(record, tmp_path)
    (tmp_path / "garbage.json").write_text("{")
    (tmp_path / "foreign.json").write_text(json.dumps({"schema_version": 99}))
    result = parbench("report", str(tmp_path))
    assert result.returncode == 0, result.stderr
    skipped = result.stderr.strip().splitlines()
    assert len(skipped) == 2 and all(line.startswith("skipped ") for line in skipped)
    assert "garbage.json: not readable JSON" in result.stderr and "foreign.json" in result.stderr
    assert "| torch-" in result.stdout
    one_line_refusal(parbench("report", str(tmp_path), "--strict"),
                     "2 invalid file(s) of the 5 under")
    assert parbench("check", str(tmp_path)).returncode == 1  # check stays strict


@pytest.mark.slow
@needs("torch")
def test_compare_without_matplotlib_writes_markdown_and_says_so(tmp_path):
    shadow = tmp_path / "shadow" / "matplotlib"
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text(
        "raise ModuleNotFoundError(\"No module named 'matplotlib'\", name='matplotlib')\n")
    report = tmp_path / "report"
    result = parbench("compare", "torch-single", "--steps", "2", "--global-batch", "32",
                      "--out", str(tmp_path / "runs"), "--report-dir", str(report),
                      env={"PYTHONPATH": str(shadow.parent)})
    assert result.returncode == 0, result.stderr
    first = result.stderr.splitlines()[0]
    assert "matplotlib is not installed" in first and "parbench[report]" in first
    assert (report / "report.md").is_file() and not (report / "report.html").exists()
