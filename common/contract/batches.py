"""Data order and sharding: the one rule every backend and strategy consumes.

* Epoch e visits the training set in ``permutation(seed, e)``.
* Global batch t of an epoch is rows ``[t*B, (t+1)*B)`` of that permutation.
* Tail rule: the last ``n mod B`` rows of each permutation are not used in that epoch
  (a fresh permutation next epoch drops different ones), so every global batch has exactly B
  samples and each sample is seen at most once per epoch -- exactly once when B divides n.
* Device r of N takes the contiguous rows ``[r*B/N, (r+1)*B/N)`` of every global batch.
* Evaluation splits the test set into N contiguous parts (sizes differ by at most one), each
  rank returns [correct, loss_sum, count] and the sums are reduced: no sample counted twice.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from functools import lru_cache

import numpy as np


@lru_cache(maxsize=4)
def epoch_permutation(seed: int, epoch: int, n: int) -> np.ndarray:
    return np.random.default_rng([seed, epoch, 0xDA7A]).permutation(n)


def steps_per_epoch(n: int, global_batch: int) -> int:
    return n // global_batch


def shard_slice(global_batch: int, world_size: int, rank: int) -> slice:
    """Rows of each global batch that device ``rank`` trains on."""
    per_device = global_batch // world_size
    return slice(rank * per_device, (rank + 1) * per_device)


def eval_slice(n: int, world_size: int, rank: int) -> slice:
    """Contiguous part of the test set evaluated by ``rank``."""
    bounds = np.linspace(0, n, world_size + 1).round().astype(int)
    return slice(int(bounds[rank]), int(bounds[rank + 1]))


@dataclass(frozen=True)
class Step:
    index: int  # global step, from 0
    epoch: int
    indices: np.ndarray  # the B training-set rows of this global batch, in order
    epoch_end: bool  # last step of its epoch


def schedule(seed: int, n: int, global_batch: int, total_steps: int) -> Iterator[Step]:
    """The global batches of a run, in order."""
    per_epoch = steps_per_epoch(n, global_batch)
    for index in range(total_steps):
        epoch, t = divmod(index, per_epoch)
        rows = epoch_permutation(seed, epoch, n)[t * global_batch:(t + 1) * global_batch]
        yield Step(index, epoch, rows, t == per_epoch - 1)
