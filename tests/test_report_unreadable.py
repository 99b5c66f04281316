"""Records this version cannot read (a newer schema, a task, model or framework it does not
know: written by a newer parbench, or edited by hand) are named by 'parbench check' and listed
apart by 'parbench report', with the reason, while the report is made from the rest; never a
traceback. Built from reference records, each spoilt in one field."""

from __future__ import annotations

import copy
import json
import shutil
from pathlib import Path

import pytest

from conftest import parbench
from parbench.cli.main import build_parser
from parbench.results.records import (
    SCHEMA_VERSION,
    check_folder,
    check_record,
    task_of_record,
    unreadable_reasons,
)
from parbench.run.registry import FRAMEWORKS

RUNS = Path(__file__).resolve().parents[1] / "results" / "reference" / "runs"
GOOD = sorted([*RUNS.glob("torch-single-*.json"), *RUNS.glob("torch-ddp-torchrun-n2-*.json")])
SPOILT = {  # file -> (field, value, what the reason says)
    "unknown-model.json": (
        "model", "resnet-9000", "model 'resnet-9000' is not one of the image-classification"),
    "unknown-task.json": ("task", "segmentation", "task 'segmentation' is not one this version"),
    "future-schema.json": (
        "schema_version", SCHEMA_VERSION + 1, f"schema_version {SCHEMA_VERSION + 1} is newer"),
}
NOT_VISION = ("model 'gpt' is not one of the image-classification models this version knows "
              "(resnet, resnet-nonorm, resnet50, mlp, vit)")


def good() -> dict:
    return json.loads(GOOD[0].read_text())


def spoilt(field: str, value: object) -> dict:
    record = good()
    record[field] = value
    return record


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> Path:
    """The good records, and one record for each way of being unreadable."""
    path = tmp_path_factory.mktemp("unreadable")
    for file in GOOD:
        shutil.copy(file, path)
    for name, (field, value, _) in SPOILT.items():
        (path / name).write_text(json.dumps(spoilt(field, value)))
    return path


def command(capsys, *argv: str) -> tuple[int, str, str]:
    """(exit code, stdout, stderr) of a parbench command run in this process, as main runs it
    but without taking over the process's signals."""
    args = build_parser().parse_args(list(argv))
    code = args.func(args)
    out, err = capsys.readouterr()
    return code, out, err


def test_a_readable_record_has_no_reason_and_its_task_is_the_one_it_names() -> None:
    assert unreadable_reasons(good()) == []
    assert task_of_record(good()).name == "image-classification"
    language = json.loads(next((RUNS.parent / "gpt-runs").glob("*.json")).read_text())
    assert unreadable_reasons(language) == []
    assert task_of_record(language).name == "language-modeling"


def test_a_record_before_schema_7_is_of_image_classification() -> None:
    record = good()
    del record["task"]
    record["schema_version"] = 6
    assert unreadable_reasons(record) == []
    assert task_of_record(record).name == "image-classification"
    record["model"] = "gpt"  # no task named: image classification, which has no gpt
    assert unreadable_reasons(record) == [NOT_VISION]


def test_a_later_record_without_its_task_is_invalid_not_guessed() -> None:
    record = good()
    del record["task"]
    assert unreadable_reasons(record) == []
    assert any("'task' is a required property" in p for p in check_record(record))


@pytest.mark.parametrize("name", SPOILT)
def test_each_unreadable_record_has_its_reason_only(name: str) -> None:
    field, value, reason = SPOILT[name]
    record = spoilt(field, value)
    [found] = unreadable_reasons(record)
    assert found.startswith(reason)
    assert check_record(record) == [found]  # the schema's verdicts on it would be noise


def test_a_model_of_another_task_and_an_unknown_framework_are_unreadable() -> None:
    assert unreadable_reasons(spoilt("model", "gpt")) == [NOT_VISION]
    assert unreadable_reasons(spoilt("framework", "mxnet")) == [
        f"framework 'mxnet' is not one this version knows ({', '.join(FRAMEWORKS)})"]


def test_an_unknown_backend_launcher_or_dataset_is_readable() -> None:
    """The report places such a row after the known ones; nothing in it needs to know them."""
    for field, value in (("backend", "torch-zero"), ("launcher", "mpirun"),
                         ("dataset", "imagenet")):
        assert check_record(spoilt(field, value)) == [], field


def test_a_record_that_is_not_a_mapping_is_invalid_not_a_crash() -> None:
    assert check_record(["not", "a", "record"])
    broken = copy.deepcopy(good())
    broken["task"] = 7
    assert check_record(broken) and unreadable_reasons(broken) == []


def test_the_reason_a_report_gives_is_one_line(folder: Path, tmp_path: Path) -> None:
    found = check_folder(folder)
    assert sorted(Path(f).name for f in found.reasons) == sorted(SPOILT)
    assert all("\n" not in reason for reason in found.reasons.values())
    (tmp_path / "bad.json").write_text(json.dumps({"status": "ok"}))
    [reason] = check_folder(tmp_path).reasons.values()
    assert "\n" not in reason and reason.endswith("more problem(s))")


def test_check_names_each_unreadable_file_and_why(capsys, folder: Path) -> None:
    code, out, _ = command(capsys, "check", str(folder))
    assert code == 1
    for name, (_, _, reason) in SPOILT.items():
        assert f"{folder / name}: {reason}" in out
    assert out.strip().endswith(f"{len(GOOD) + len(SPOILT)} record(s) checked, "
                                f"{len(SPOILT)} problem(s)")


@pytest.mark.parametrize("fmt", ("md", "html"))
def test_the_report_lists_them_apart_and_reports_the_rest(capsys, folder: Path,
                                                          tmp_path: Path, fmt: str) -> None:
    output = tmp_path / f"report.{fmt}"
    code, _, err = command(capsys, "report", str(folder), "--output", str(output))
    text = output.read_text()
    assert code == 0
    assert "Records this version cannot read" in text
    assert f"{len(SPOILT)} file(s) this version cannot read are in no table" in text
    for name, (_, _, reason) in SPOILT.items():
        assert name in text and reason.replace("'", "&#x27;" if fmt == "html" else "'") in text
        assert f"skipped {folder / name}: {reason}" in err
    assert f"{len(GOOD)} record(s) of 1 spec(s)." in text
    assert "torch-single" in text and "torch-ddp" in text and "Performance" in text


def test_the_csv_has_the_readable_records_only(capsys, folder: Path) -> None:
    code, out, err = command(capsys, "report", str(folder), "--format", "csv")
    assert code == 0
    assert "torch-ddp" in out and not any(name in out for name in SPOILT)
    assert all(f"skipped {folder / name}" in err for name in SPOILT)


def test_a_folder_of_readable_records_has_no_such_section(capsys, folder: Path,
                                                          tmp_path: Path) -> None:
    for file in GOOD:
        shutil.copy(file, tmp_path)
    code, out, err = command(capsys, "report", str(tmp_path))
    assert code == 0 and err == ""
    assert "cannot read" not in out


@pytest.mark.slow  # two parbench processes: what a user sees, exit codes and stderr included
def test_no_traceback_from_the_command_line(folder: Path) -> None:
    checked = parbench("check", str(folder))
    assert checked.returncode == 1 and "Traceback" not in checked.stderr
    reported = parbench("report", str(folder))
    assert reported.returncode == 0, reported.stderr
    assert "Traceback" not in reported.stderr
    assert "## Records this version cannot read" in reported.stdout
