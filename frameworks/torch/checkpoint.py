"""Checkpoints in torch's own APIs (the folder's layout and the loop's side:
parbench.run.checkpoint).

``torch.distributed.checkpoint.state_dict.get_state_dict`` gives the model's and the
optimizer's state keyed by the parameters' names whatever wraps the module (DDP, FSDP2's
DTensor shards, torch.compile), which is what makes one strategy's checkpoint load in another.
A strategy with one process writes it whole with ``torch.save`` (``state.pt``); a process
group writes it with ``torch.distributed.checkpoint`` (DCP), each rank its own shards, so
FSDP2 never gathers a whole tensor and a checkpoint loads on another number of ranks (DCP
reshards on load). Either kind loads in every torch strategy.

What is not a tensor of the model or the optimizer goes beside it, one file per rank
(``rank<N>.pt``): the fp16 loss scaler's state and torch's random state. No step draws a random
number (no dropout; the order of the rows is the contract's), so the random state is restored
for code that would, not because a resumed step differs without it.
"""

from __future__ import annotations

from pathlib import Path

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch import nn
from torch.distributed.checkpoint.default_planner import DefaultSavePlanner
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions,
    get_state_dict,
    set_state_dict,
)

WHOLE = "state.pt"  # one process's whole state, torch.save
# A tensor every rank holds (DDP's, FSDP2's buffers) is written once; DCP takes the copy of
# whichever rank balances the writes best, unless told: rank 0's, since DDP broadcasts rank 0's
# buffers (BatchNorm's running statistics) before every forward, and a resumed run must start
# from those. Measured: the other rank's statistics made a resumed resnet's differ by 2e-4.
RANK_0_COPIES = DefaultSavePlanner(dedup_save_to_lowest_rank=True)


def save(folder: Path, module: nn.Module, optimizer: torch.optim.Optimizer,
         scaler: torch.amp.GradScaler, rank: int) -> None:
    """This rank's part of the training state into ``folder``: DCP's shards in a process
    group, else one torch.save file; and the rank's own file (scaler, random state)."""
    folder.mkdir(parents=True, exist_ok=True)
    model_state, optimizer_state = get_state_dict(module, optimizer)
    state = {"model": model_state, "optimizer": optimizer_state}
    if dist.is_initialized():
        dcp.save(state, checkpoint_id=folder, planner=RANK_0_COPIES)
    else:
        torch.save(state, folder / WHOLE)
    torch.save({"scaler": scaler.state_dict(), "rng": torch.get_rng_state()},
               folder / f"rank{rank}.pt")


def load(folder: Path, module: nn.Module, optimizer: torch.optim.Optimizer,
         scaler: torch.amp.GradScaler, rank: int) -> None:
    """Restore what ``save`` wrote, whichever kind and however many ranks wrote it: DCP
    reshards its shards to this strategy's; a whole file is every rank's to load (FSDP2 takes
    its shard of each tensor)."""
    if (folder / WHOLE).is_file():
        state = torch.load(folder / WHOLE, weights_only=True)
        options = StateDictOptions(full_state_dict=True)
    else:
        model_state, optimizer_state = get_state_dict(module, optimizer)  # DCP loads into these
        state = {"model": model_state, "optimizer": optimizer_state}
        dcp.load(state, checkpoint_id=folder)
        options = None
    set_state_dict(module, optimizer, model_state_dict=state["model"],
                   optim_state_dict=state["optimizer"], options=options)
    own = folder / f"rank{rank}.pt"  # a checkpoint of fewer ranks: rank 0's (all alike)
    extra = torch.load(own if own.is_file() else folder / "rank0.pt", weights_only=True)
    scaler.load_state_dict(extra["scaler"])
    torch.set_rng_state(extra["rng"])
