"""``parbench run``: its options (shared with compare and slurm), and the run itself: node 0
(or a single-node run) records every repeat, the other nodes of a multi-node run train and
print their part."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

import numpy as np
from tabulate import tabulate

from parbench.base.errors import UsageError
from parbench.base.files import private_tempdir, write_atomic
from parbench.base.options import add_flags
from parbench.launch.checkin import NodeFailure
from parbench.launch.harness import Keep, Prepared, execute, prepare, run_once
from parbench.launch.lifetime import raise_if_stopping
from parbench.launch.operators import pod_place
from parbench.launch.options import (
    CHECKPOINT_OPTIONS,
    NODES,
    OPTIONS,
    RunConfig,
    read_config_file,
)
from parbench.launch.slurm import DEFAULT_MASTER_PORT, slurm_node
from parbench.results.records import probe_file, probe_folder, save_record
from parbench.results.report import render
from parbench.run.modes import MODES
from parbench.run.registry import spanning_backends


def add_run_options(parser: argparse.ArgumentParser, command: str) -> None:
    """The run options of ``command`` (the option table's flags, None when not given), the
    config file that can hold them, and the modes."""
    parser.add_argument("--config",
                        help="TOML or JSON file with RunConfig keys; options given here win")
    add_flags(parser, OPTIONS.values(), command)
    parser.add_argument("--save-weights", metavar="FILE.npz",
                        help="also write the final weights (canonical layout) of the last "
                        "repeat here")
    parser.add_argument("--save-predictions", metavar="FILE.json",
                        help="detection: also write the last repeat's final predictions in "
                        "COCO's results format here (the in-domain split; the shifted one "
                        "beside it as FILE-shifted.json)")
    modes = parser.add_argument_group("run modes", "how a backend computes and what makes N "
                                      "devices train like one (parbench.run.modes)")
    for mode in MODES.values():
        mode.add_option(modes)


def config_from_args(args: argparse.Namespace) -> RunConfig:
    values = read_config_file(args.config) if args.config else {}
    given = {key: getattr(args, key) for key in (*OPTIONS, *MODES)
             if getattr(args, key, None) is not None}
    return RunConfig.of(**{**values, **given})


def add_node_options(parser: argparse.ArgumentParser) -> None:
    """Multi-node options of 'parbench run' (see parbench.launch.nodes and docs/multinode.md)."""
    nodes = parser.add_argument_group(
        "multi-node", "one 'parbench run' per node, same options, its own --node-rank; "
        f"--devices is per node; backends: {spanning_backends()}")
    add_flags(nodes, OPTIONS.values(), "run", NODES)
    add = nodes.add_argument
    add("--from-slurm", action="store_true", help="take --nnodes, --node-rank and the master "
        "host from srun's environment (SLURM_NNODES, SLURM_NODEID, SLURM_JOB_NODELIST)")
    add("--master-port", type=int, help=f"--from-slurm: the master's PORT "
        f"({DEFAULT_MASTER_PORT})")
    add("--from-env", action="store_true", help="take --nnodes, --node-rank and --master from "
        "the variables a Kubernetes training operator gives its pods (PyTorchJob, TFJob, "
        "PaddleJob, JAXJob, Trainer v2's TrainJob; see docs/multinode.md)")


def _apply_placement(args: argparse.Namespace) -> None:
    """--from-slurm or --from-env: fill the multi-node options from the engine's environment."""
    if args.from_slurm and args.from_env:
        raise UsageError("--from-slurm and --from-env: give one, the engine that started "
                         "this node")
    if args.master_port is not None and not args.from_slurm:
        raise UsageError("--master-port goes with --from-slurm; otherwise give "
                         "--master HOST:PORT")
    flag = "--from-slurm" if args.from_slurm else "--from-env" if args.from_env else None
    if flag is None:
        return
    given = [f"--{name.replace('_', '-')}" for name in ("nnodes", "node_rank", "master")
             if getattr(args, name) is not None]
    if given:
        raise UsageError(f"{flag} sets {', '.join(given)} itself; leave them out")
    if args.from_slurm:
        node = slurm_node(os.environ)
        port = DEFAULT_MASTER_PORT if args.master_port is None else args.master_port
        _place_node(args, node.nnodes, node.node_rank, f"{node.master_host}:{port}")
        return
    place = pod_place(os.environ)
    if place.devices is not None and args.devices not in (None, place.devices):
        raise UsageError(f"--devices {args.devices}: the TrainJob runs "
                         f"PET_NPROC_PER_NODE={place.devices} per node")
    if place.devices is not None:
        args.devices = place.devices
    _place_node(args, place.nnodes, place.node_rank, place.master)


def _place_node(args: argparse.Namespace, nnodes: int, node_rank: int, master: str) -> None:
    # a one-node job is a single-node run: no rank, no master to meet at
    args.nnodes = nnodes
    if nnodes > 1:
        args.node_rank, args.master = node_rank, master


def cmd_run(args: argparse.Namespace) -> int:
    _apply_placement(args)
    cfg = config_from_args(args)
    keep = Keep(*(Path(path) if path else None
                  for path in (args.save_weights, args.save_predictions)))
    with private_tempdir("parbench-inputs-") as shared:
        prepared = prepare(cfg, Path(shared))
        if prepared.plan.nodes and prepared.plan.nodes.node_rank:
            return _run_node_parts(prepared)
        if keep.predictions is not None and prepared.task.prediction_format is None:
            raise UsageError(f"--save-predictions: {prepared.task.name} writes no predictions "
                             "(a detection model does)")
        probe_folder(Path(cfg.out), "--out")
        _probe_kept_files(keep)
        records, unsaved = _run_repeats(prepared, keep)
    print(render(records))
    for hint in _unmeasured_peaks(records):
        print(hint, file=sys.stderr)
    for problem in unsaved:
        print(f"parbench: error: {problem}", file=sys.stderr)
    return 0 if all(r["status"] == "ok" for r in records) and not unsaved else 1


def _unmeasured_peaks(records: list[dict]) -> list[str]:
    """One line per ok CPU configuration whose record has no utilisation because this machine's
    matmul peak for it was never measured (runs read the cache, never measure)."""
    missing = {(r["framework"], r["env"]["framework_version"], r["metrics"]["compute_dtype"],
                r["metrics"]["flops"]["peak_threads"]) for r in records
               if r["status"] == "ok" and not r["env"]["gpus"]
               and r["metrics"]["flops"]["measured_peak_tflops"] is None}
    return [f"parbench: no utilisation: {framework} {version}'s {dtype} matmul peak at {threads} "
            f"thread(s) was never measured here ('parbench peak --framework {framework} "
            f"--threads {threads}' measures it)" for framework, version, dtype, threads in missing]


def refuse_kept_files(args: argparse.Namespace, command: str) -> None:
    """--save-weights and --save-predictions are for 'parbench run': UsageError elsewhere."""
    for flag, given in (("--save-weights", args.save_weights),
                        ("--save-predictions", args.save_predictions)):
        if given:
            raise UsageError(f"{flag} is for 'parbench run': {command} keeps no files of its "
                             "runs but their records")


def refuse_checkpoints(cfg: RunConfig, command: str) -> None:
    """The checkpoint options are for 'parbench run' (a config file can hold their keys):
    UsageError elsewhere."""
    given = [option.flag for option in CHECKPOINT_OPTIONS if getattr(cfg, option.name)]
    if given:
        raise UsageError(f"{given[0]} is for 'parbench run': {command} runs several "
                         "configurations, whose checkpoints would share one folder")


def _probe_kept_files(keep: Keep) -> None:
    """Each file asked for can be written."""
    if keep.weights is not None:
        probe_file(keep.weights, "--save-weights")
    if keep.predictions is not None:
        for path in keep.prediction_files(("val", "shifted")).values():
            probe_file(path, "--save-predictions")


def _run_repeats(prepared: Prepared, keep: Keep) -> tuple[list[dict], list[str]]:
    """Every repeat's record, saved; (records, what could not be saved where asked)."""
    cfg, records, unsaved = prepared.cfg, [], []
    for repeat in range(cfg.repeats):
        last = repeat == cfg.repeats - 1
        outcome = run_once(prepared, repeat, keep if last else Keep())
        record = outcome.record
        path, problem = save_record(Path(cfg.out), record)
        print(f"{record['status']}: {path}", file=sys.stderr)
        if outcome.profile is not None:  # a file of its own, next to the record
            unsaved += _save_profile(path.with_name(record["profile"]["file"]), outcome.profile)
        records.append(record)
        unsaved += [problem] if problem else []
        raise_if_stopping()  # a preempted run's record is saved: now end as the signal asked
    return records, unsaved


def _run_node_parts(prepared: Prepared) -> int:
    """A node other than 0: train its part of each repeat, print it; node 0 keeps the record.
    Exits with the whole run's status, as node 0 decided it."""
    node = prepared.plan.nodes.node_rank
    statuses = []
    for repeat in range(prepared.cfg.repeats):
        with private_tempdir("parbench-run-") as tmp:
            try:
                run = execute(prepared, Path(tmp), repeat)
            except NodeFailure as err:
                print(f"parbench: error: {err}", file=sys.stderr)
                return 1
        rows = [[log.rank, log.host, len(log.step_s), f"{1000 * float(np.median(log.step_s)):.1f}",
                 f"{log.losses[-1]:.4f}"] for log in run.logs or []]
        if rows:
            print(tabulate(rows, headers=("rank", "host", "steps", "step ms p50", "last loss"),
                           tablefmt="github"))
        print(f"node {node}, repeat {repeat}: {run.status} (node 0 writes the record)"
              + (f"\n{run.error}" if run.error else ""), file=sys.stderr)
        statuses.append(run.status)
    return 0 if all(status == "ok" for status in statuses) else 1


def _save_profile(target: Path, profile: dict) -> list[str]:
    """Write a profile document next to its record; [] or the problem, like a record's."""
    try:
        write_atomic(target, json.dumps(profile, indent=1).encode())
    except OSError as err:
        return [f"could not write the profile {target} ({err.strerror or err})"]
    print(f"profile: {target}", file=sys.stderr)
    return []
