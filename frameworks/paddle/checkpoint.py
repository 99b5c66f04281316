"""Checkpoints in Paddle's own format (the folder's layout and the loop's side:
parbench.run.checkpoint).

What Paddle's guides do: ``paddle.save`` of the Layer's ``state_dict`` (``model.pdparams``)
and of the optimizer's (``optimizer.pdopt``), restored with ``set_state_dict``. The model's is
keyed by structured names (``blocks.0.conv.weight``) and holds BatchNorm's running statistics
(Paddle parameters that do not train). The optimizer's holds every accumulator: Momentum's
velocity, AdamW's moments and its beta1/beta2 power accumulators (the bias correction's step
count), keyed by Paddle's unique name of each parameter (``linear_3.w_0_moment1_0``), which
counts the layers of a kind the process built before: another model built first, in the
resuming process or in the one that wrote it, would shift every name, and Paddle's first step
after ``set_state_dict`` then fails ('Optimizer set error, linear_4.w_0_moment1_0 should in
state dict'). parbench's processes build the model once each (paddle-single's and a
paddle-spawn rank's names agree, measured), but the file does not depend on it: it keys the
accumulators by structured name (``blocks.0.conv.weight/moment1_0``), mapped back to the
resuming process's names on load. The accumulators are created on the first step, not by the
optimizer's constructor: ``set_state_dict`` before it keeps the state aside and every
accumulator takes its value from there when the first step creates it.

paddle.DataParallel gives every rank the same weights and optimizer state (it averages the
gradients), so rank 0 writes those. It broadcasts rank 0's parameters and buffers once, when
it wraps the model, and never again (unlike torch's DDP, which broadcasts the buffers before
every forward): each rank's BatchNorm normalises its own part of the batch and keeps its own
running statistics, which its evaluation uses. So every rank writes its own beside rank 0's
files (``rank<N>.pdstate``) and restores them after DataParallel's broadcast, with the fp16
loss scaler's state and the rank's random state (the CPU generator's and its GPU's). No step
draws a random number (no dropout; the order of the rows is the contract's), so the random
state is restored for code that would, not because a resumed step differs without it.

Another number of processes: a rank the checkpoint has no file of takes rank 0's statistics,
as every rank of a fresh run starts from the same.
"""

from __future__ import annotations

from pathlib import Path

import paddle
from paddle import nn

MODEL = "model.pdparams"  # rank 0's Layer state_dict
OPTIMIZER = "optimizer.pdopt"  # rank 0's optimizer state_dict, by structured parameter name
SEPARATOR = "/"  # between a structured parameter name and its accumulator's (no name has one)


def save(folder: Path, module: nn.Layer, optimizer: paddle.optimizer.Optimizer,
         scaler: paddle.amp.GradScaler | None, rank: int, device: str) -> None:
    """This rank's part of the training state into ``folder``: rank 0 the model's and the
    optimizer's state_dicts; every rank its own (see ``own_state``)."""
    folder.mkdir(parents=True, exist_ok=True)
    if rank == 0:
        paddle.save(module.state_dict(), str(folder / MODEL))
        paddle.save(optimizer_state(module, optimizer), str(folder / OPTIMIZER))
    paddle.save(own_state(module, scaler, device), str(folder / f"rank{rank}.pdstate"))


def load(folder: Path, module: nn.Layer, optimizer: paddle.optimizer.Optimizer,
         scaler: paddle.amp.GradScaler | None, rank: int, device: str) -> None:
    """Restore what ``save`` wrote, written by however many ranks: before the first step (the
    optimizer's accumulators do not exist yet) and after DataParallel's broadcast."""
    own = folder / f"rank{rank}.pdstate"
    state = paddle.load(str(own if own.is_file() else folder / "rank0.pdstate"))
    # rank 0's weights, this rank's statistics: one whole dict (a partial one warns per key)
    module.set_state_dict({**paddle.load(str(folder / MODEL)), **state["statistics"]})
    set_optimizer_state(module, optimizer, paddle.load(str(folder / OPTIMIZER)))
    if scaler:
        scaler.load_state_dict(state["scaler"])
    set_random_state(state["random"], device)


def optimizer_state(module: nn.Layer, optimizer: paddle.optimizer.Optimizer) -> dict:
    """The optimizer's state_dict keyed ``<structured name>/<accumulator>``. A key that is no
    parameter's accumulator (master weights, a scheduler's state: parbench makes neither) is
    refused rather than written under a name no other process could map."""
    names = {p.name: name for name, p in module.named_parameters()}
    renamed = {}
    for key, value in optimizer.state_dict().items():
        owners = [p for p in names if key.startswith(f"{p}_")]
        if len(owners) != 1:
            raise ValueError(f"optimizer state {key!r} is no one parameter's accumulator")
        (owner,) = owners
        renamed[f"{names[owner]}{SEPARATOR}{key[len(owner) + 1:]}"] = value
    return renamed


def set_optimizer_state(module: nn.Layer, optimizer: paddle.optimizer.Optimizer,
                        state: dict) -> None:
    """``optimizer_state``'s keys back to this process's parameter names, then Paddle's own
    set_state_dict (which raises on the first step if an accumulator finds no value)."""
    names = {name: p.name for name, p in module.named_parameters()}
    by_name = {}
    for key, value in state.items():
        structured, accumulator = key.split(SEPARATOR, 1)
        by_name[f"{names[structured]}_{accumulator}"] = value
    optimizer.set_state_dict(by_name)


def own_state(module: nn.Layer, scaler: paddle.amp.GradScaler | None, device: str) -> dict:
    """What is this rank's own: the model's entries the optimizer does not update (BatchNorm's
    running statistics), the loss scaler's state (fp16) and the random state."""
    trained = {name for name, p in module.named_parameters() if p.trainable}
    statistics = {name: t for name, t in module.state_dict().items() if name not in trained}
    return {"statistics": statistics, "scaler": scaler.state_dict() if scaler else None,
            "random": random_state(device)}


def random_state(device: str) -> dict:
    """The CPU generator's state and, on a GPU, this rank's GPU's (get_cuda_rng_state has
    every visible GPU's: the others are other ranks')."""
    state = {"cpu": paddle.get_rng_state("cpu")}
    if device.startswith("gpu"):
        state["gpu"] = paddle.get_cuda_rng_state()[_gpu_index(device)]
    return state


def set_random_state(state: dict, device: str) -> None:
    paddle.set_rng_state(state["cpu"], "cpu")
    if device.startswith("gpu") and "gpu" in state:  # a checkpoint of CPU runs has none
        every = paddle.get_cuda_rng_state()
        every[_gpu_index(device)] = state["gpu"]
        paddle.set_cuda_rng_state(every)


def _gpu_index(device: str) -> int:
    return int(device.split(":")[1])
