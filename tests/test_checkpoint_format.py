"""The checkpoint folder, framework-free (parbench.run.checkpoint): a checkpoint appears whole or
not at all, its files are checked against their checksums before a run resumes from it, and
--resume-from DIR finds the latest whole one. The options' rules are one line and exit 2 before
anything is written. The training state itself, in each framework's format, is
tests/test_checkpoints_torch.py's."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from parbench.cli.main import main
from parbench.run.checkpoint import (
    MANIFEST,
    CheckpointError,
    Checkpoints,
    Saver,
    latest,
    read,
    step_folder,
)
from parbench.run.registry import BACKENDS


class NumpyStrategy:
    """One process whose training state is one array, saved with numpy."""

    rank, num_processes = 0, 1

    def __init__(self, value: float):
        self.state = np.full(4, value)

    def save_checkpoint(self, folder: Path) -> None:
        folder.mkdir(parents=True)
        np.save(folder / "state.npy", self.state)

    def load_checkpoint(self, folder: Path) -> None:
        self.state = np.load(folder / "state.npy")


def _plan(directory: Path, resume_from: Path | None = None) -> Checkpoints:
    return Checkpoints(every=2, directory=str(directory), resume_from=resume_from and
                       str(resume_from), framework="numpy", api="numpy.save", run_id="run-a",
                       spec_sha256="abc", config={"steps": 8}, tensors={"w": [4]})


def _saver(directory: Path, resume_from: Path | None = None) -> Saver:
    return Saver(_plan(directory, resume_from), "numpy-single", 1, total_steps=8,
                 steps_per_epoch=3)


def _write_steps(directory: Path, steps: list[int]) -> None:
    saver = _saver(directory)
    for step in steps:
        saver.save(NumpyStrategy(float(step)), step, [0.5] * step, rows=32)


def test_a_checkpoint_holds_the_state_the_position_and_its_files_checksums(tmp_path):
    saver = _saver(tmp_path)
    assert [step for step in range(1, 9) if saver.due(step)] == [2, 4, 6, 8]
    written = saver.save(NumpyStrategy(7.0), 4, [1.0, 0.9, 0.8, 0.7], rows=32)
    assert written["step"] == 4 and written["save_s"] >= 0
    assert written["bytes"] == (step_folder(tmp_path, 4) / "state" / "state.npy").stat().st_size
    manifest = read(step_folder(tmp_path, 4))
    assert manifest["step"] == 4 and (manifest["epoch"], manifest["step_in_epoch"]) == (1, 1)
    assert manifest["losses"] == [1.0, 0.9, 0.8, 0.7] and manifest["run_id"] == "run-a"
    assert set(manifest["files"]) == {"state/state.npy"}
    assert [p.name for p in tmp_path.iterdir()] == ["step-4"]  # no partial folder left

    resumed = NumpyStrategy(0.0)
    resuming = _saver(tmp_path, step_folder(tmp_path, 4))
    assert resuming.resume(resumed) == 4 and resumed.state.tolist() == [7.0] * 4
    again = resuming.save(NumpyStrategy(8.0), 6, [0.6, 0.5], rows=32)  # the losses go on from the 4
    assert read(step_folder(tmp_path, 6))["losses"] == [1.0, 0.9, 0.8, 0.7, 0.6, 0.5]
    assert again["step"] == 6


def test_the_latest_whole_checkpoint_is_found_and_half_written_ones_passed_over(tmp_path):
    _write_steps(tmp_path, [2, 4, 10])
    (tmp_path / ".step-12.partial").mkdir()  # a writer that crashed before the rename
    (tmp_path / "step-14").mkdir()  # no manifest: not a checkpoint
    (tmp_path / "step-x").mkdir()  # not a step's number
    (tmp_path / "empty").mkdir()
    assert latest(tmp_path) == step_folder(tmp_path, 10)  # 10 > 4 as numbers, not as text
    assert latest(step_folder(tmp_path, 2)) == step_folder(tmp_path, 2)
    with pytest.raises(CheckpointError, match="has no parbench.json"):
        read(latest(tmp_path / "step-14"))
    with pytest.raises(CheckpointError, match="no checkpoint in it"):
        latest(tmp_path / "empty")
    with pytest.raises(CheckpointError, match="no such folder"):
        latest(tmp_path / "absent")


def test_rewriting_a_step_replaces_it_whole(tmp_path):
    _write_steps(tmp_path, [2])
    _saver(tmp_path).save(NumpyStrategy(9.0), 2, [0.1, 0.2], rows=32)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["step-2"]
    assert np.load(step_folder(tmp_path, 2) / "state" / "state.npy").tolist() == [9.0] * 4


@pytest.mark.parametrize("damage,message", [
    (lambda f: (f / "state" / "state.npy").write_bytes(b"other"), "does not match its checksum"),
    (lambda f: (f / "state" / "state.npy").unlink(), "state/state.npy is missing"),
    (lambda f: (f / "state" / "extra.bin").write_bytes(b"1"), "not one of the checkpoint's"),
    (lambda f: (f / MANIFEST).write_text("{"), "cannot be read"),
    (lambda f: (f / MANIFEST).write_text('{"format": "x"}'), "not a parbench checkpoint"),
    (lambda f: (f / MANIFEST).write_text('{"format": "parbench-checkpoint", "version": 1}'),
     "lacks step, total_steps"),
])
def test_a_damaged_checkpoint_is_refused_with_what_is_wrong(tmp_path, damage, message):
    _write_steps(tmp_path, [2])
    damage(step_folder(tmp_path, 2))
    with pytest.raises(CheckpointError, match=message):
        read(step_folder(tmp_path, 2))


def test_a_newer_version_is_refused(tmp_path):
    _write_steps(tmp_path, [2])
    manifest = step_folder(tmp_path, 2) / MANIFEST
    manifest.write_text(json.dumps({**json.loads(manifest.read_text()), "version": 99}))
    with pytest.raises(CheckpointError, match="version 99"):
        read(step_folder(tmp_path, 2))


RUN = ["run", "torch-single", "--dataset", "digits", "--model", "mlp", "--steps", "4",
       "--global-batch", "32"]


@pytest.mark.parametrize("extra,message", [
    (["--checkpoint-every", "2"], "--checkpoint-every N and --checkpoint-dir DIR go together"),
    (["--checkpoint-dir", "ck"], "--checkpoint-every N and --checkpoint-dir DIR go together"),
    (["--checkpoint-every", "0", "--checkpoint-dir", "ck"], "--checkpoint-every must be at "
     "least 1, got 0"),
    (["--checkpoint-every", "2", "--checkpoint-dir", "ck", "--repeats", "2"],
     "--repeats 2: the repeats would write and resume the same checkpoints"),
    (["--checkpoint-every", "2", "--checkpoint-dir", "ck", "--profile"], "with --profile"),
    (["--resume-from", "absent"], "--resume-from absent: no such folder"),
    (["--resume-from", "."], "no checkpoint in it"),
])
def test_checkpoint_options_refused_in_one_line_before_anything_is_written(
        tmp_path, monkeypatch, capsys, extra, message):
    monkeypatch.chdir(tmp_path)
    assert main([*RUN, *extra, "--out", "out"]) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.splitlines()) == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # no out/, no ck/


def test_a_backend_without_checkpoints_is_refused_with_those_that_have_them(
        tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setitem(BACKENDS, "tf-single", replace(BACKENDS["tf-single"], checkpoint=None))
    assert main(["run", "tf-single", "--steps", "4", "--checkpoint-every", "2",
                 "--checkpoint-dir", "ck"]) == 2
    err = capsys.readouterr().err
    assert "tf-single writes no checkpoints yet" in err and "torch-ddp" in err
    assert list(tmp_path.iterdir()) == []


def test_a_checkpoint_dir_of_another_configuration_is_refused(tmp_path, monkeypatch, capsys):
    _write_steps(tmp_path / "ck", [2])  # spec_sha256 "abc": no run's
    monkeypatch.chdir(tmp_path)
    assert main([*RUN, "--checkpoint-every", "2", "--checkpoint-dir", "ck", "--out", "out"]) == 2
    assert "step-2 is another configuration's checkpoint" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def _segment(run_id: str, steps: int, resumed_from: str | None = None, at: int = 0) -> dict:
    resumed = {"resumed": {"run_id": resumed_from, "step": at}} if resumed_from else {}
    return {"run_id": run_id, "backend": "torch-ddp", "world_size": 2, "steps": steps,
            "status": "ok", "duration_s": 1.0, "metrics": None, **resumed}


def test_the_report_joins_segments_by_the_run_each_continues():
    from parbench.results.segments import chains, rows

    first, second = _segment("a", 40), _segment("b", 30, "a", 40)
    third, alone = _segment("c", 30, "b", 70), _segment("d", 100)
    orphan = _segment("e", 10, "gone", 90)  # its first segment's record is elsewhere
    found = chains([third, alone, orphan, second, first])
    assert [[r["run_id"] for r in chain] for chain in found] == [["e"], ["a", "b", "c"]]
    assert [row["steps"] for row in rows([third, second, first])] == ["1-40", "41-70", "71-100"]


@pytest.mark.parametrize("command", [["compare", "torch-single"],
                                     ["explain", "torch-ddp", "--devices", "2"]])
def test_checkpoints_from_a_config_file_are_refused_by_the_sweeps(tmp_path, monkeypatch, capsys,
                                                                  command):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "c.toml").write_text('checkpoint_every = 2\ncheckpoint_dir = "ck"\nsteps = 4\n')
    assert main([*command, "--config", "c.toml", "--out", "out"]) == 2
    assert f"--checkpoint-every is for 'parbench run': {command[0]} runs several" \
        in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c.toml"]


def test_a_checkpoint_of_another_model_is_refused_naming_the_first_tensor_that_differs(
        tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    plan = replace(_plan(tmp_path / "ck"), framework="torch",
                   tensors={"hidden.0.weight": [64, 64], "hidden.0.bias": [64]})
    Saver(plan, "torch-single", 1, 8, 3).save(NumpyStrategy(1.0), 2, [0.5, 0.4], rows=32)
    assert main([*RUN, "--resume-from", "ck", "--out", "out"]) == 2
    err = capsys.readouterr().err
    assert "written for another model: its hidden.0.weight is [64, 64], this model's is [" in err
    assert len(err.splitlines()) == 1 and not (tmp_path / "out").exists()
