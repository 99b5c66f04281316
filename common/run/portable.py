"""Portable checkpoints: a checkpoint's full training state in a framework-neutral form, which
``--resume-from`` of every backend reads, so a run trained in one framework goes on in another.

``parbench convert CHECKPOINT --out DIR`` writes one (parbench.run.convert); its folder is a
checkpoint like any other (parbench.run.checkpoint: a manifest with checksums, the state in
``state/``), of framework ``portable``::

    DIR/parbench.json               the checkpoint's manifest, plus ``converted_from``
    DIR/state/model.safetensors     every tensor of the model (parbench.contract.spec.parameters)
                                    by its canonical name, in its canonical layout (conv OIHW,
                                    dense [out, in]), float32: what --save-weights writes,
                                    BatchNorm's running statistics included
    DIR/state/optimizer.safetensors the optimizer rule's state of each trainable tensor, in the
                                    tensor's canonical layout, named ``<slot>/<tensor>``:
                                      sgd    momentum_buffer   buf of parbench.contract.optim
                                      adamw  exp_avg, exp_avg_sq   m and v, not bias-corrected
                                    and as the file's metadata the rule ("optimizer") and its
                                    step count t ("step"): the checkpoint's step

The slots are the contract's quantities, which are torch's: each framework maps its own
layout and conventions onto them (frameworks/<framework>/portable.py), and back when it
resumes. The learning rate is not kept: a step's rate is a function of the step
(parbench.contract.optim.lr_at). Not kept either: fp16's loss scale (convert refuses an fp16
checkpoint: each framework grows its scale on a schedule of its own), and random states (no
step draws a random number).

safetensors reads and writes numpy arrays, so this module, like the converter, stays
framework-free.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from safetensors import SafetensorError, safe_open
from safetensors.numpy import save_file

from parbench.base.errors import CheckpointError

PORTABLE = "portable"  # the manifest's framework
API = "safetensors"  # the manifest's api
MODEL_FILE = "model.safetensors"
OPTIMIZER_FILE = "optimizer.safetensors"
SLOTS = {"sgd": ("momentum_buffer",), "adamw": ("exp_avg", "exp_avg_sq")}


@dataclass
class TrainingState:
    """The full training state in the contract's terms: what a strategy exports from its own
    state and loads into it (parbench.run.loop.Strategy.portable_state / load_portable)."""

    weights: dict[str, np.ndarray]  # every canonical tensor, canonical layout
    slots: dict[str, dict[str, np.ndarray]]  # slot -> trainable tensor -> its state
    step: int  # the optimizer's step count t: steps taken


def write_state(folder: Path, state: TrainingState, optimizer: str) -> None:
    """``state`` as the two safetensors files of a portable checkpoint's ``state/``."""
    folder.mkdir(parents=True, exist_ok=True)
    weights = {name: np.ascontiguousarray(array, np.float32)
               for name, array in state.weights.items()}
    save_file(weights, str(folder / MODEL_FILE))
    slots = {f"{slot}/{name}": np.ascontiguousarray(array, np.float32)
             for slot in SLOTS[optimizer] for name, array in state.slots[slot].items()}
    save_file(slots, str(folder / OPTIMIZER_FILE),
              metadata={"optimizer": optimizer, "step": str(state.step)})
    for name in (MODEL_FILE, OPTIMIZER_FILE):  # safetensors leaves its files 0600
        os.chmod(folder / name, 0o644)


def read_state(folder: Path) -> TrainingState:
    """What ``write_state`` wrote (checked against the run by ``check_state`` before)."""
    with safe_open(str(folder / OPTIMIZER_FILE), framework="np") as handle:
        metadata = handle.metadata()
        slots: dict[str, dict[str, np.ndarray]] = {slot: {} for slot in
                                                   SLOTS[metadata["optimizer"]]}
        for key in handle.keys():
            slot, name = key.split("/", 1)
            slots[slot][name] = handle.get_tensor(key)
    with safe_open(str(folder / MODEL_FILE), framework="np") as handle:
        weights = {name: handle.get_tensor(name) for name in handle.keys()}
    return TrainingState(weights, slots, int(metadata["step"]))


def check_state(folder: Path, tensors: dict[str, list[int]], trainable: list[str],
                optimizer: str, step: int) -> None:
    """A portable ``state/`` holds exactly the model's tensors (``tensors``: name -> shape) and
    the rule's slots of each ``trainable`` one, for ``optimizer`` at ``step``: read from the
    files' headers, nothing loaded. CheckpointError names the first thing that differs."""
    model = _shapes(folder / MODEL_FILE)[0]
    _same_tensors(folder / MODEL_FILE, model, tensors)
    slots, metadata = _shapes(folder / OPTIMIZER_FILE)
    if metadata.get("optimizer") != optimizer:
        raise CheckpointError(f"{folder / OPTIMIZER_FILE} holds {metadata.get('optimizer')}'s "
                              f"state; this run's optimizer is {optimizer}")
    if metadata.get("step") != str(step):
        raise CheckpointError(f"{folder / OPTIMIZER_FILE}: step {metadata.get('step')}, its "
                              f"manifest's {step}")
    expected = {f"{slot}/{name}": tensors[name] for slot in SLOTS[optimizer] for name in trainable}
    _same_tensors(folder / OPTIMIZER_FILE, slots, expected)


def _shapes(path: Path) -> tuple[dict[str, list[int]], dict[str, str]]:
    """A safetensors file's tensors (name -> shape) and metadata, from its header."""
    try:
        with safe_open(str(path), framework="np") as handle:
            shapes = {name: list(handle.get_slice(name).get_shape()) for name in handle.keys()}
            return shapes, handle.metadata() or {}
    except (OSError, SafetensorError) as err:
        raise CheckpointError(f"{path} cannot be read as safetensors: {err}") from None


def _same_tensors(path: Path, found: dict[str, list[int]],
                  expected: dict[str, list[int]]) -> None:
    for name, shape in expected.items():
        if name not in found:
            raise CheckpointError(f"{path} has no tensor {name}")
        if found[name] != shape:
            raise CheckpointError(f"{path}: {name} is {found[name]}, this model's is {shape}")
    extra = sorted(set(found) - set(expected))
    if extra:
        raise CheckpointError(f"{path}: {extra[0]} is none of this model's tensors")
