"""Why N devices may train or score differently from one: the causes a record itself shows.

Data parallelism is meant to compute what one device would (the gradients of the shards are
averaged into the global batch's), so a change in quality at N devices has a cause. Five are
known, each read from the record of the N-device run alone (nothing is re-run here):

* batchnorm: a BatchNorm model without --sync-bn normalises every shard with its own
  statistics (docs/porting.md section 9.1: loss curves 0.08 apart from one device's within
  10 steps of the resnet on digits).
* global-batch: with --per-device-batch the global batch is N times the 1-device one, so
  the run takes other (and, with --epochs, fewer) steps.
* lr-scaling: --lr-scaling linear with a global batch that grew scales the lr by N too.
* native-loader: a framework's loader (--input native) trained on samples twice or left some
  out beyond the contract's tail (parbench.results.samples counts them per epoch).
* eval-sharding: ranks score their parts of the test set with BatchNorm running statistics
  of their own (see ``_eval_sharding``); the parts themselves are exact.

``checked_causes`` gives all five for an N-device record, each present or absent with the
reason; ``known_causes`` only the present ones. A 1-device record is the baseline itself: it
has none.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from parbench.contract.spec import uses_batchnorm
from parbench.run.modes import modes_of
from parbench.run.registry import BACKENDS

EXACT_PARTS = ("each rank scores a contiguous part of the test set, the parts cover every row "
               "once (sizes differ by at most one row, so a test set N does not divide is "
               "scored whole) and the scores come from the summed counts")


@dataclass(frozen=True)
class Cause:
    """One cause of a change at N devices, as one record shows it."""

    name: str  # batchnorm | global-batch | lr-scaling | native-loader | eval-sharding
    cell: str  # short text for a report cell
    applies: bool
    reason: str  # why it applies, or why it is absent, from what the record says
    # RunConfig keys (flat, modes among them) that switch it off at N devices; None: no run
    # option switches this cause off on its own
    switch_off: dict[str, object] | None = None

    @property
    def option(self) -> str | None:
        """The switch as command-line options: '--sync-bn', '--global-batch 32'."""
        if self.switch_off is None:
            return None
        return " ".join(f"--{key.replace('_', '-')}" + ("" if value is True else f" {value}")
                        for key, value in self.switch_off.items() if value not in (None, False))


def _batchnorm(record: dict) -> Cause:
    name, cell, off = "batchnorm", "BatchNorm per replica", {"sync_bn": True}
    if not uses_batchnorm(record["model"]):
        return Cause(name, cell, False, f"--model {record['model']} has no BatchNorm")
    if modes_of(record).sync_bn:
        return Cause(name, cell, False, "--sync-bn: statistics over the global batch")
    if (record.get("env") or {}).get("dataparallel_no_op"):
        return Cause(name, cell, False, "nn.DataParallel without CUDA ran one replica")
    return Cause(name, cell, True, f"each of {record['world_size']} replicas normalises its "
                 f"{record['per_device_batch']} rows with their own statistics", off)


def _global_batch(record: dict) -> Cause:
    name, world = "global-batch", record["world_size"]
    if record["batch_mode"] != "per-device":
        return Cause(name, "global batch grew", False,
                     f"--global-batch {record['global_batch']} is the same on 1 device")
    single = record["per_device_batch"]
    return Cause(name, f"global batch x{world}", True,
                 f"--per-device-batch {single}: global batch {record['global_batch']} against "
                 f"{single} on 1 device", {"global_batch": single, "per_device_batch": None})


def _lr_scaling(record: dict) -> Cause:
    name, world = "lr-scaling", record["world_size"]
    if record["lr_scaling"] != "linear":
        return Cause(name, "lr scaled", False, "--lr-scaling none")
    if record["batch_mode"] != "per-device":
        return Cause(name, "lr scaled", False, "the global batch is fixed, so the lr scales "
                     "the same on 1 device")
    single_lr = record["lr"] * record["per_device_batch"] / record["global_batch"]
    return Cause(name, f"lr x{world}", True, f"--lr-scaling linear: lr {record['lr']:.4g} "
                 f"against {single_lr:.4g} on 1 device",
                 {"lr_scaling": "none", "lr": single_lr})


def _native_loader(record: dict) -> Cause:
    name, cell = "native-loader", "native loader"
    modes = modes_of(record)
    if modes.input != "native":
        return Cause(name, cell, False, "--input arrays: the contract's shards, checked")
    fed = (record.get("metrics") or {}).get("input") or {}
    epochs = fed.get("epochs") or []
    if not epochs:
        return Cause(name, cell, False, "the record has no per-epoch sample counts")
    tail = fed["train_size"] % record["global_batch"]  # what the contract leaves out too
    duplicated = sum(e["duplicated"] for e in epochs)
    # an epoch the run cut short has no dropped count
    dropped = sum(max(0, e["dropped"] - tail) for e in epochs if e["dropped"] is not None)
    if duplicated == 0 and dropped == 0:
        return Cause(name, cell, False, "every sample once per epoch, as the contract")
    off = {"input": "arrays", **({"loader_workers": 0} if modes.loader_workers else {})}
    return Cause(name, f"loader: {duplicated} dup., {dropped} dropped", True,
                 f"{duplicated} sample(s) trained on twice and {dropped} left out beyond the "
                 f"contract's tail of {tail} per epoch, over {len(epochs)} epoch(s)", off)


def _eval_sharding(record: dict) -> Cause:
    """The parts are exact (EXACT_PARTS), so scoring in parts changes a result only where the
    ranks' models differ: parameters cannot (every rank applies the same averaged gradient),
    BatchNorm running statistics can, where each process keeps its own. --sync-bn makes them
    equal, but removes the batchnorm cause with them: no option switches this one off alone."""
    name, cell = "eval-sharding", "eval with each rank's statistics"
    backend = BACKENDS.get(record["backend"])
    if not uses_batchnorm(record["model"]) or modes_of(record).sync_bn:
        return Cause(name, cell, False, f"every rank holds the same model and {EXACT_PARTS}")
    if backend is not None and backend.one_process:
        return Cause(name, cell, False, "one process drives every replica and scores with one "
                     "set of running statistics")
    if backend is not None and backend.shared_eval_statistics:
        return Cause(name, cell, False, f"{record['backend']}: "
                     f"{backend.shared_eval_statistics}")
    return Cause(name, cell, True, f"each of {record['world_size']} processes scores its part "
                 "of the test set with BatchNorm running statistics of its own; --sync-bn "
                 "makes them equal, together with the batchnorm cause")


DETECTORS: tuple[Callable[[dict], Cause], ...] = (
    _batchnorm, _global_batch, _lr_scaling, _native_loader, _eval_sharding)


def checked_causes(record: dict) -> list[Cause]:
    """Every known cause, present or absent with why, for an N-device record; [] at 1."""
    if record["world_size"] < 2:
        return []
    return [detect(record) for detect in DETECTORS]


def known_causes(record: dict) -> list[Cause]:
    """The causes that apply to this record (none for 1 device)."""
    return [cause for cause in checked_causes(record) if cause.applies]
