"""What the run's devices trained on, checked against the contract: the record's
``metrics.input``.

Each process left ``samples-rank<r>.npy`` (steps x its devices x rows, see parbench.run.feeds);
together they say which training sample every device saw at every step. From them:

* ``matches_contract``: every device trained on exactly the contract's shard of every global
  batch (parbench.contract.batches), step by step. True for ``--input arrays`` (checked, not
  assumed);
  a native loader shuffles with its own generator, so it is normally false, and then
* ``epochs``: per epoch of the feed, how many samples were trained on across all devices, how
  many distinct ones, how many were extra copies (``duplicated``: e.g. DistributedSampler
  padding an uneven dataset) and, for a complete epoch, how many training samples were never
  seen (``dropped``: a tail cut by drop_last). Exactly once per epoch is 0 and 0.
* ``fingerprints``: per device, sha256 over its steps' indices in order: two runs whose
  devices have equal fingerprints were fed identically.
* ``indices``: the full lists (device x step x rows) when they are short (INDEX_LIST_LIMIT).
* ``wait_s_mean`` / ``wait_share``: seconds each step waited for its batch, and that wait's
  share of wait + step time, so a loader bottleneck shows instead of hiding in step time.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np

from parbench.contract.batches import schedule
from parbench.run.feeds import samples_file

INDEX_LIST_LIMIT = 8192  # indices per device up to which the record keeps the full lists


def load_samples(workdir: Path, processes: int) -> np.ndarray:
    """steps x devices x rows, devices in global order (rank-major)."""
    parts = [np.load(workdir / samples_file(rank)) for rank in range(processes)]
    return np.concatenate(parts, axis=1)


def contract_samples(seed: int, n: int, global_batch: int, steps: int, devices: int
                     ) -> np.ndarray:
    return np.stack([step.indices.reshape(devices, -1)
                     for step in schedule(seed, n, global_batch, steps)])


def fingerprint(device_steps: np.ndarray) -> str:
    digest = hashlib.sha256()
    for rows in device_steps:
        digest.update(np.ascontiguousarray(rows, dtype="<i8").tobytes())
    return digest.hexdigest()


def epoch_accounts(samples: np.ndarray, epochs: list[int], epoch_ends: list[bool],
                   train_size: int) -> list[dict]:
    """One entry per feed epoch in the run; ``dropped`` is None for an epoch the run cut."""
    labels = np.asarray(epochs)
    accounts = []
    for epoch in dict.fromkeys(epochs):
        steps = np.flatnonzero(labels == epoch)
        seen = samples[steps].ravel()
        unique = int(np.unique(seen).size)
        complete = bool(epoch_ends[steps[-1]])
        accounts.append({"epoch": int(epoch), "steps": int(steps.size), "complete": complete,
                         "samples": int(seen.size), "unique": unique,
                         "duplicated": int(seen.size) - unique,
                         "dropped": train_size - unique if complete else None})
    return accounts


def input_metrics(workdir: Path, logs: list, pipeline: str, seed: int, global_batch: int,
                  train_size: int) -> dict:
    """metrics.input of a finished run, from its rank logs and sample files."""
    samples = load_samples(workdir, len(logs))
    steps, devices = samples.shape[:2]
    first = logs[0].input
    contract = contract_samples(seed, train_size, global_batch, steps, devices)
    waits = np.array([w for log in logs for w in log.input["wait_s"]])
    computes = np.array([s for log in logs for s in log.step_s])
    per_device = samples.transpose(1, 0, 2)  # devices x steps x rows
    return {
        "pipeline": pipeline,
        "description": first["description"], "order": first["order"],
        "train_size": train_size, "steps_per_epoch": first["steps_per_epoch"],
        "matches_contract": bool(np.array_equal(samples, contract)),
        "epochs": epoch_accounts(samples, first["epochs"], first["epoch_ends"], train_size),
        "fingerprints": [fingerprint(steps_of) for steps_of in per_device],
        "indices": per_device.tolist() if samples[:, 0].size <= INDEX_LIST_LIMIT else None,
        "wait_s_mean": float(waits.mean()),
        "wait_share": float(waits.sum() / (waits.sum() + computes.sum())),
    }
