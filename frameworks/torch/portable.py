"""torch's training state as a portable checkpoint's (parbench.run.portable), and back.

Nothing to map: the contract's rules are written from torch's optimizers, so a portable
checkpoint's slots are torch's own state (SGD's ``momentum_buffer``, AdamW's ``exp_avg``,
``exp_avg_sq`` and ``step``), and the module's parameter names and layouts are the canonical
ones. ``get_state_dict`` / ``set_state_dict`` with ``full_state_dict`` see through every wrapper
(DDP, FSDP2's DTensor shards, torch.compile), so every torch strategy exports and loads alike.

Two things torch keeps that the contract does not: SGD without momentum keeps no buffer
(``None``: exported as zeros, which the rule's ``buf = 0 * buf + g`` never reads), and
BatchNorm's ``num_batches_tracked`` counts forwards, read only by a BatchNorm without momentum
(none in the spec): a resumed run keeps its own.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions,
    get_state_dict,
    set_state_dict,
)

from parbench.run.portable import SLOTS, TrainingState

from .model import export_weights

WHOLE = StateDictOptions(full_state_dict=True)


def portable_state(module: nn.Module, optimizer: torch.optim.Optimizer, rule: str,
                   step: int) -> TrainingState:
    """The state after ``step`` steps: the weights whole and every slot of the rule."""
    _, optimizer_state = get_state_dict(module, optimizer, options=WHOLE)
    counts = {int(state["step"]) for state in optimizer_state["state"].values()
              if "step" in state}
    if counts - {step}:
        raise ValueError(f"torch's optimizer has taken {sorted(counts)} steps; the checkpoint "
                         f"says {step}")
    weights = export_weights(module)
    slots = {slot: {name: _numpy(optimizer_state["state"][name].get(slot), weights[name])
                    for name in optimizer_state["state"]} for slot in SLOTS[rule]}
    return TrainingState(weights, slots, step)


def _numpy(tensor: torch.Tensor | None, like: np.ndarray) -> np.ndarray:
    return np.zeros_like(like) if tensor is None else tensor.detach().cpu().numpy().copy()


def load_portable(module: nn.Module, optimizer: torch.optim.Optimizer,
                  state: TrainingState) -> None:
    """``state`` into ``module`` and ``optimizer``: their whole state dicts (the optimizer's
    initialised by ``get_state_dict``) with the portable tensors put in; FSDP2 takes its shards."""
    model_state, optimizer_state = get_state_dict(module, optimizer, options=WHOLE)
    for name, array in state.weights.items():
        model_state[name] = torch.from_numpy(array)
    for slot, tensors in state.slots.items():
        for name, array in tensors.items():
            optimizer_state["state"][name][slot] = torch.from_numpy(array)
    for per_tensor in optimizer_state["state"].values():
        if "step" in per_tensor:  # AdamW's t, a float tensor by default
            per_tensor["step"] = torch.tensor(float(state.step), dtype=per_tensor["step"].dtype)
    set_state_dict(module, optimizer, model_state_dict=model_state,
                   optim_state_dict=optimizer_state, options=WHOLE)
