"""Portable checkpoints, framework-free (parbench.run.portable, parbench.run.convert,
parbench.launch.convert): the safetensors files and their checks, the loop's side of resuming
from one, and parbench convert's refusals, each one line and exit 2 with nothing written. The
frameworks' conversions and resumes across frameworks are tests/test_portable_*.py's."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import save_file

from parbench.base.errors import CheckpointError
from parbench.cli.main import main
from parbench.launch.options import RunConfig
from parbench.run import registry
from parbench.run.checkpoint import MANIFEST, STATE, Checkpoints, Saver, read, step_folder
from parbench.run.convert import write_portable
from parbench.run.portable import (
    MODEL_FILE,
    OPTIMIZER_FILE,
    PORTABLE,
    TrainingState,
    check_state,
    read_state,
    write_state,
)

TENSORS = {"hidden.0.weight": [3, 4], "hidden.0.bias": [3], "norm.running_mean": [3]}
TRAINABLE = ["hidden.0.weight", "hidden.0.bias"]


def _state(step: int = 2) -> TrainingState:
    rng = np.random.default_rng(0)
    weights = {name: rng.standard_normal(shape).astype(np.float32)
               for name, shape in TENSORS.items()}
    slots = {slot: {name: rng.standard_normal(TENSORS[name]).astype(np.float32)
                    for name in TRAINABLE} for slot in ("exp_avg", "exp_avg_sq")}
    return TrainingState(weights, slots, step)


def test_the_state_round_trips_through_safetensors_with_its_rule_and_step(tmp_path):
    state = _state()
    write_state(tmp_path, state, "adamw")
    check_state(tmp_path, TENSORS, TRAINABLE, "adamw", 2)
    back = read_state(tmp_path)
    assert back.step == 2 and back.weights.keys() == state.weights.keys()
    for name, array in state.weights.items():
        assert np.array_equal(back.weights[name], array) and back.weights[name].dtype == np.float32
    for slot, arrays in state.slots.items():
        for name, array in arrays.items():
            assert np.array_equal(back.slots[slot][name], array), (slot, name)
    assert (tmp_path / MODEL_FILE).stat().st_mode & 0o777 == 0o644


@pytest.mark.parametrize("change,message", [
    (lambda t: t.update({"head.bias": [2]}), "model.safetensors has no tensor head.bias"),
    (lambda t: t.update({"hidden.0.bias": [4]}),
     r"hidden.0.bias is \[3\], this model's is \[4\]"),
    (lambda t: t.pop("norm.running_mean"), "norm.running_mean is none of this model's"),
])
def test_a_state_of_another_model_is_refused_naming_the_tensor(tmp_path, change, message):
    write_state(tmp_path, _state(), "adamw")
    expected = dict(TENSORS)
    change(expected)
    trainable = [name for name in TRAINABLE if name in expected]
    with pytest.raises(CheckpointError, match=message):
        check_state(tmp_path, expected, trainable, "adamw", 2)


def test_a_state_of_another_optimizer_step_or_format_is_refused(tmp_path):
    write_state(tmp_path, _state(), "adamw")
    with pytest.raises(CheckpointError, match="holds adamw's state; this run's optimizer is sgd"):
        check_state(tmp_path, TENSORS, TRAINABLE, "sgd", 2)
    with pytest.raises(CheckpointError, match="step 2, its manifest's 3"):
        check_state(tmp_path, TENSORS, TRAINABLE, "adamw", 3)
    save_file({"exp_avg/hidden.0.weight": np.zeros((3, 4), np.float32)},
              str(tmp_path / OPTIMIZER_FILE), metadata={"optimizer": "adamw", "step": "2"})
    with pytest.raises(CheckpointError, match="has no tensor exp_avg/hidden.0.bias"):
        check_state(tmp_path, TENSORS, TRAINABLE, "adamw", 2)
    (tmp_path / MODEL_FILE).write_bytes(b"not safetensors")
    with pytest.raises(CheckpointError, match="model.safetensors cannot be read as safetensors"):
        check_state(tmp_path, TENSORS, TRAINABLE, "adamw", 2)


class PortableStrategy:
    """One process that loads a portable state (and nothing else)."""

    rank, num_processes = 0, 1
    loaded: TrainingState | None = None

    def load_portable(self, state: TrainingState) -> None:
        self.loaded = state

    def save_checkpoint(self, folder: Path) -> None:
        folder.mkdir(parents=True)
        (folder / "native.bin").write_bytes(b"a framework's own file")


CONFIG = RunConfig.of(backend="torch-single", model="mlp", dataset="digits", steps=8,
                      global_batch=32).as_dict()


def _native(directory: Path, step: int = 2, config: dict = CONFIG) -> Path:
    """A torch checkpoint's folder as parbench writes one (its state a stand-in file)."""
    plan = Checkpoints(every=2, directory=str(directory), resume_from=None, framework="torch",
                       api="torch.save", run_id="run-a", spec_sha256="abc", config=config,
                       tensors=TENSORS)
    Saver(plan, "torch-single", 1, total_steps=8, steps_per_epoch=3).save(
        PortableStrategy(), step, [0.5] * step, rows=32)
    return step_folder(directory, step)


def test_a_portable_checkpoint_is_a_checkpoint_any_framework_resumes_from(tmp_path):
    native = _native(tmp_path / "ck")
    portable = tmp_path / "portable"
    write_portable(portable, _state(), "adamw", read(native), native)
    manifest = read(portable)  # its files' checksums hold
    assert (manifest["framework"], manifest["api"], manifest["step"]) == (PORTABLE,
                                                                          "safetensors", 2)
    assert manifest["converted_from"] == {"folder": str(native.resolve()), "framework": "torch",
                                          "api": "torch.save", "backend": "torch-single"}
    assert set(manifest["files"]) == {f"{STATE}/{MODEL_FILE}", f"{STATE}/{OPTIMIZER_FILE}"}
    plan = Checkpoints(every=None, directory=None, resume_from=str(portable), framework="jax",
                       api="orbax", run_id="run-b", spec_sha256="abc", config=CONFIG,
                       tensors=TENSORS)
    strategy = PortableStrategy()
    saver = Saver(plan, "jax-single", 1, total_steps=8, steps_per_epoch=3)
    assert saver.resume(strategy) == 2 and saver.earlier == [0.5, 0.5]
    assert strategy.loaded.step == 2
    assert np.array_equal(strategy.loaded.slots["exp_avg"]["hidden.0.bias"],
                          _state().slots["exp_avg"]["hidden.0.bias"])


def _refused(capsys, *args: str) -> str:
    assert main(["convert", *args]) == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1, err
    return err


def test_convert_refuses_what_it_cannot_convert_in_one_line(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    native = _native(tmp_path / "ck")
    assert "convert absent: no such folder" in _refused(capsys, "absent", "--out", "p")
    assert "no checkpoint in it" in _refused(capsys, ".", "--out", "p")
    last = _native(tmp_path / "ck", step=8)
    assert "is the end of its run (step 8 of 8)" in _refused(capsys, str(last), "--out", "p")
    fp16 = _native(tmp_path / "half", config={**CONFIG, "precision": "fp16"})
    assert "an fp16 run: its dynamic loss scale" in _refused(capsys, str(fp16), "--out", "p")
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "kept.txt").write_text("mine")
    assert "full exists and is not an empty folder; convert writes a new one" in _refused(
        capsys, str(native), "--out", "full")
    write_portable(tmp_path / "portable", _state(), "adamw", read(native), native)
    assert "is portable already (converted from torch-single's)" in _refused(
        capsys, "portable", "--out", "p")
    (native / STATE / "native.bin").write_bytes(b"changed")
    assert "does not match its checksum" in _refused(capsys, str(native), "--out", "p")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ck", "full", "half", "portable"]
    assert [p.name for p in (tmp_path / "full").iterdir()] == ["kept.txt"]


def test_convert_refuses_a_bad_timeout_and_a_framework_not_installed(tmp_path, monkeypatch,
                                                                     capsys):
    monkeypatch.chdir(tmp_path)
    native = _native(tmp_path / "ck")
    assert "--timeout must be" in _refused(capsys, str(native), "--out", "p", "--timeout", "nan")
    newer = _native(tmp_path / "newer", config={**CONFIG, "warp_drive": True})
    assert "written with options this parbench does not have (warp_drive)" in _refused(
        capsys, str(newer), "--out", "p")
    missing = replace(registry.FRAMEWORKS["torch"], imports=("parbench_no_such_module",))
    monkeypatch.setitem(registry.FRAMEWORKS, "torch", missing)
    err = _refused(capsys, str(native), "--out", "p")
    assert "was written by torch-single and only torch reads it" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ck", "newer"]


def test_a_native_checkpoint_of_another_framework_is_refused_pointing_to_convert(
        tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    native = _native(tmp_path / "ck")
    assert main(["run", "jax-single", "--model", "mlp", "--dataset", "digits", "--steps", "8",
                 "--global-batch", "32", "--resume-from", str(native), "--out", "out"]) == 2
    err = capsys.readouterr().err
    assert "written by torch-single (torch.save); a jax backend cannot read it" in err
    assert f"'parbench convert {native} --out DIR' makes a portable one" in err
    assert not (tmp_path / "out").exists()
    json.loads((native / MANIFEST).read_text())  # left as it was
