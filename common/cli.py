"""The ``parbench`` command: list, run, check, report."""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
from dataclasses import fields
from pathlib import Path

import numpy as np
from tabulate import tabulate

from .backends import BACKENDS
from .compare import (choose_backends, parse_device_counts, run_sweep, sweep_configs,
                      warn_if_busy)
from .checkin import NodeFailure
from .config import ISOLATION_CHOICES, RunConfig, UsageError, read_config_file
from .harness import Prepared, execute, prepare, run_once
from .files import write_atomic
from .html_report import write_report
from .lifetime import (Terminated, become_subreaper, handle_termination, private_tempdir,
                       remove_stale_tempdirs)
from .modes import INPUTS, PRECISIONS
from .optim import OPTIMIZERS
from .profiling import DOCUMENT_KEY
from .report import render
from .results import check_folder, probe_file, probe_folder, save_record
from .slurm import DEFAULT_MASTER_PORT, add_slurm_parser, slurm_node

EXIT_USAGE = 2


def _add_run_options(parser: argparse.ArgumentParser) -> None:
    """Options that map 1:1 onto RunConfig fields; None means 'not given here'."""
    add = parser.add_argument
    add("--config", help="TOML or JSON file with RunConfig keys; options given here win")
    add("--launcher", help="torch-ddp: torchrun (default) or spawn")
    add("--dataset", help="synthetic (default), digits, cifar10, mnist")
    add("--data-dir", help="folder with the dataset's official files (cifar10, mnist)")
    add("--model", help="resnet (default), resnet-nonorm, mlp, vit (see parbench.spec)")
    budget = parser.add_mutually_exclusive_group()
    budget.add_argument("--epochs", type=int, help="training epochs (default 2)")
    budget.add_argument("--steps", type=int, help="training steps instead of epochs")
    batch = parser.add_mutually_exclusive_group()
    batch.add_argument("--global-batch", type=int, help="samples per step, all devices (128)")
    batch.add_argument("--per-device-batch", type=int, help="samples per step per device")
    add("--optimizer", choices=OPTIMIZERS,
        help="sgd (default: momentum, L2 decay on every tensor) or adamw (decoupled decay on "
        "matrices and embeddings only); the rules are in parbench.optim")
    add("--lr", type=float, help="base learning rate (sgd 0.1, adamw 0.001)")
    add("--lr-scaling", help="none (default) or linear: lr x global_batch / 128")
    add("--momentum", type=float, help="sgd (0.9)")
    add("--weight-decay", type=float, help="sgd 5e-4, adamw 0.05")
    add("--beta1", type=float, help="adamw (0.9)")
    add("--beta2", type=float, help="adamw (0.999)")
    add("--eps", type=float, help="adamw (1e-8), added to the bias-corrected root")
    add("--clip-grad-norm", type=float, metavar="C",
        help="scale the global-batch gradient to norm C when its norm exceeds C (after the "
        "devices' gradients are combined); the record counts the steps that clipped")
    add("--schedule", help="cosine (default) or constant")
    add("--warmup-steps", type=int)
    add("--seed", type=int)
    add("--repeats", type=int, help="independent runs of the configuration (1)")
    add("--threads", type=int, help="compute threads per worker (cores / processes)")
    add("--timeout", type=float, help="seconds before a run is killed and recorded (900)")
    add("--target-accuracy", type=float, help="report the training time to reach it")
    add("--out", help="folder for the records (results/runs)")
    add("--verbose", action="store_true", default=None, help="let framework logs through")
    add("--isolate-network", choices=ISOLATION_CHOICES,
        help="run the processes in a private network namespace with only loopback up, so no "
        "rendezvous port is reachable from outside: auto (default: when the OS allows it), "
        "on (refuse to run otherwise), off")
    add("--save-weights", metavar="FILE.npz",
        help="also write the final weights (canonical layout) of the last repeat here")
    add("--profile", action="store_true", default=None,
        help="split up to 10 steady steps into forward/backward/optimizer/communication per "
        "rank and list the framework profiler's top operations, in <record>.profile.json; the "
        "record is marked and kept out of the performance tables")
    add("--precision", choices=PRECISIONS,
        help="fp32 (default); bf16 or fp16: autocast / mixed-precision policy (fp16 with loss "
        "scaling); the record states the dtype the first layer really computed in")
    add("--compile", action="store_true", default=None,
        help="torch.compile, TensorFlow XLA (jit_compile), Paddle to_static; the first step "
        "holds the compile time, steady-state figures exclude it")
    add("--sync-bn", action="store_true", default=None,
        help="BatchNorm statistics over the global batch instead of each device's shard")
    add("--grad-accum", type=int, metavar="K",
        help="K micro-batches per optimizer step, same global batch, gradients communicated "
        "once per step (1)")
    add("--input", choices=INPUTS,
        help="arrays (default): parbench slices the contract's shards; native: each "
        "framework's own loader and sharding (DataLoader + DistributedSampler, tf.data, "
        "DistributedBatchSampler); the record shows which samples each device trained on")
    add("--loader-workers", type=int, metavar="N",
        help="--input native: the loader's worker processes, torch and Paddle (0)")
    add("--train-subset", type=int, metavar="N",
        help="train on the first N training samples (an uneven size shows how each loader "
        "handles a tail)")


def config_from_args(args: argparse.Namespace) -> RunConfig:
    values = read_config_file(args.config) if args.config else {}
    given = {f.name: getattr(args, f.name) for f in fields(RunConfig)
             if getattr(args, f.name, None) is not None}
    return RunConfig(**{**values, **given})


def _add_node_options(parser: argparse.ArgumentParser) -> None:
    """Multi-node options of 'parbench run' (see parbench.nodes and docs/multinode.md)."""
    nodes = parser.add_argument_group(
        "multi-node", "one 'parbench run' per node, same options, its own --node-rank; "
        "--devices is per node (torch-ddp with torchrun, tf-multiworker, paddle-launch)")
    add = nodes.add_argument
    add("--nnodes", type=int, help="machines in the run (1)")
    add("--node-rank", type=int, help="this machine's index, 0 to nnodes-1; node 0 writes "
        "the record")
    add("--master", metavar="HOST:PORT", help="node 0's address: PORT is the framework's "
        "rendezvous, PORT+1 parbench's check-in")
    add("--ifname", help="network interface of the collectives (GLOO_/NCCL_SOCKET_IFNAME; "
        "default lo when the master is a loopback address)")
    add("--join-timeout", type=float, help="seconds the nodes wait for each other (300)")
    add("--from-slurm", action="store_true", help="take --nnodes, --node-rank and the master "
        "host from srun's environment (SLURM_NNODES, SLURM_NODEID, SLURM_JOB_NODELIST)")
    add("--master-port", type=int, help=f"--from-slurm: the master's PORT "
        f"({DEFAULT_MASTER_PORT})")


def _apply_slurm(args: argparse.Namespace) -> None:
    """--from-slurm: fill the multi-node options from Slurm's environment."""
    if not args.from_slurm:
        if args.master_port is not None:
            raise UsageError("--master-port goes with --from-slurm; otherwise give "
                             "--master HOST:PORT")
        return
    given = [f"--{name.replace('_', '-')}" for name in ("nnodes", "node_rank", "master")
             if getattr(args, name) is not None]
    if given:
        raise UsageError(f"--from-slurm sets {', '.join(given)} itself; leave them out")
    node = slurm_node(os.environ)
    port = DEFAULT_MASTER_PORT if args.master_port is None else args.master_port
    args.nnodes, args.node_rank = node.nnodes, node.node_rank
    args.master = f"{node.master_host}:{port}"


def cmd_run(args: argparse.Namespace) -> int:
    _apply_slurm(args)
    cfg = config_from_args(args)
    save_to = Path(args.save_weights) if args.save_weights else None
    with private_tempdir("parbench-inputs-") as shared:
        prepared = prepare(cfg, Path(shared))
        if prepared.plan.nodes and prepared.plan.nodes.node_rank:
            return _run_node_parts(prepared)
        probe_folder(Path(cfg.out), "--out")
        if save_to is not None:
            probe_file(save_to, "--save-weights")
        records, unsaved = _run_repeats(prepared, save_to)
    print(render(records))
    for problem in unsaved:
        print(f"parbench: error: {problem}", file=sys.stderr)
    return 0 if all(r["status"] == "ok" for r in records) and not unsaved else 1


def _run_repeats(prepared: Prepared, save_to: Path | None) -> tuple[list[dict], list[str]]:
    """Every repeat's record, saved; (records, what could not be saved where asked)."""
    cfg, records, unsaved = prepared.cfg, [], []
    for repeat in range(cfg.repeats):
        last = repeat == cfg.repeats - 1
        record = run_once(prepared, repeat, save_to if last else None)
        profile = record.pop(DOCUMENT_KEY, None)  # a file of its own, next to the record
        path, problem = save_record(Path(cfg.out), record)
        print(f"{record['status']}: {path}", file=sys.stderr)
        if profile is not None:
            unsaved += _save_profile(path.with_name(record["profile"]["file"]), profile)
        records.append(record)
        unsaved += [problem] if problem else []
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


def cmd_compare(args: argparse.Namespace) -> int:
    cfg = config_from_args(args)
    if cfg.nnodes != 1:  # a config file may say so: compare sweeps this machine only
        raise UsageError("compare sweeps this machine; a multi-node run is one 'parbench run' "
                         "per node (docs/multinode.md)")
    if cfg.profile:  # compare's records feed the performance tables, which profiles never do
        raise UsageError("--profile is for 'parbench run': profiled runs are never compared")
    backends = choose_backends(args.backends, args.framework)
    configs, skipped = sweep_configs(cfg, backends, parse_device_counts(args.device_counts))
    for skip in skipped:
        print(f"skipped {skip.backend} x{skip.devices}: {skip.reason}", file=sys.stderr)
    if not configs:
        raise UsageError("nothing to run: every configuration was skipped")
    if args.warmup_runs < 0:
        raise UsageError(f"--warmup-runs wants 0 or more; got {args.warmup_runs}")
    out, report_dir = Path(cfg.out), Path(args.report_dir)
    probe_folder(out, "--out")
    probe_folder(report_dir, "--report-dir")
    html = _has_matplotlib()
    if not html:
        print("parbench: matplotlib is not installed, so the report will be Markdown only "
              "(HTML and plots need pip install 'parbench[report]')", file=sys.stderr)
    warn_if_busy()
    sweep = run_sweep(configs, out, args.resume, args.warmup_runs)
    records = _valid_records(out, strict=False)
    if html:
        write_report(records, "html", report_dir / "report.html")
    print(write_report(records, "md", report_dir / "report.md"), end="")
    print(f"{len(sweep.statuses)} run(s), records in {out}; report in {report_dir}",
          file=sys.stderr)
    for problem in sweep.unsaved:
        print(f"parbench: error: {problem}", file=sys.stderr)
    return 0 if all(s == "ok" for s in sweep.statuses) and not sweep.unsaved else 1


def _has_matplotlib() -> bool:
    try:
        import matplotlib  # noqa: F401  (the HTML report's plots)
    except ImportError:
        return False
    return True


def _valid_records(folder: Path, strict: bool) -> list[dict]:
    """The valid records under ``folder``; each invalid file is named on stderr and skipped,
    or, when ``strict`` or when no record is valid, the whole folder is refused."""
    found = check_folder(folder)
    if found.files == 0:
        raise UsageError(f"no records (*.json) under {folder}")
    if found.invalid and (strict or not found.records):
        first = " ".join(found.problems[0].split())  # the error is one line
        raise UsageError(f"{len(found.invalid)} invalid file(s) of the {found.files} under "
                         f"{folder}, first: {first}; see 'parbench check {folder}'")
    for file, problems in found.invalid.items():
        more = f" (and {len(problems) - 1} more problem(s))" if len(problems) > 1 else ""
        print(f"skipped {file}: {' '.join(problems[0].split())}{more}", file=sys.stderr)
    return found.records


def cmd_parity(args: argparse.Namespace) -> int:
    from .parity import installed_frameworks, run_compile_parity, run_parity

    frameworks = args.framework or installed_frameworks()
    if "torch" not in installed_frameworks():
        raise UsageError("parity compares against torch, which is not installed here")
    unknown = [b for b in args.strategies if b not in BACKENDS]
    if unknown:
        raise UsageError(f"unknown backend(s) {', '.join(unknown)}; see 'parbench list'")
    with private_tempdir("parbench-parity-") as folder:
        check = run_compile_parity if args.compile else run_parity
        checks = check(frameworks, args.strategies, Path(folder), family=args.model)
    rows = [[c.framework, c.check, f"{c.max_rel_diff:.2e}", f"{c.tolerance:.0e}",
             "ok" if c.ok else "OUT OF TOLERANCE"] for c in checks]
    print(tabulate(rows, headers=("compared", "check", "max rel diff", "tolerance", "result"),
                   tablefmt="github"))
    return 0 if all(c.ok for c in checks) else 1


def cmd_list(_args: argparse.Namespace) -> int:
    for backend in BACKENDS.values():
        reason = backend.missing_reason()
        state = "available" if reason is None else f"unavailable: {reason}"
        print(f"{backend.name:<20} {backend.strategy:<30} launchers "
              f"{'/'.join(backend.launchers):<16} {state}")
    return 0


def cmd_check(args: argparse.Namespace) -> int:
    if not Path(args.dir).is_dir():
        raise UsageError(f"no such folder: {args.dir}")
    found = check_folder(Path(args.dir))
    for problem in found.problems:
        print(problem)
    if found.files == 0:
        print(f"no records (*.json) under {args.dir}")
        return 1
    print(f"{found.files} record(s) checked, {len(found.problems)} problem(s)")
    return 1 if found.problems else 0


def cmd_report(args: argparse.Namespace) -> int:
    if not Path(args.dir).is_dir():
        raise UsageError(f"no such folder: {args.dir}")
    records = _valid_records(Path(args.dir), args.strict)
    output = Path(args.output) if args.output else None
    text = write_report(records, args.format, output, Path(args.plots) if args.plots else None)
    if output is None:
        print(text, end="")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="parbench", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("list", help="backends and whether they can run here").set_defaults(
        func=cmd_list)
    run = sub.add_parser("run", help="train one backend and write records")
    run.add_argument("backend", help="see 'parbench list'")
    run.add_argument("--devices", type=int,
                     help="devices (processes or replicas); default 2 if parallel")
    _add_run_options(run)
    _add_node_options(run)
    run.set_defaults(func=cmd_run)
    compare = sub.add_parser("compare", help="run many backends x device counts, then report")
    compare.add_argument("backends", nargs="*", help="default: every installed backend")
    compare.add_argument("--devices", dest="device_counts", default="1,2",
                         help="comma-separated device counts (1,2)")
    compare.add_argument("--framework", choices=("torch", "tensorflow", "paddle"),
                         help="only this framework's installed backends")
    compare.add_argument("--resume", action="store_true",
                         help="skip runs whose configuration already has an ok record")
    compare.add_argument("--report-dir", default="results/report",
                         help="where report.md, report.html and plots go (results/report)")
    # A sweep option, not a RunConfig field: it changes when runs happen, not what one measures.
    compare.add_argument("--warmup-runs", type=int, default=0, metavar="K",
                         help="K discarded runs of each configuration first, to warm file-system "
                         "and compile caches (0)")
    _add_run_options(compare)
    compare.set_defaults(func=cmd_compare)
    parity = sub.add_parser("parity", help="cross-framework checks against torch")
    parity.add_argument("--framework", action="append",
                        choices=("torch", "tensorflow", "paddle"),
                        help="check only this framework (repeatable); default: all installed")
    parity.add_argument("--strategies", nargs="*", default=[], metavar="BACKEND",
                        help="also check these parallel backends on 2 devices vs single")
    parity.add_argument("--model", choices=("resnet", "vit"), default="resnet",
                        help="the model family: resnet (default: the CNN models, SGD) or vit "
                        "(the transformer, AdamW with gradient clipping)")
    parity.add_argument("--compile", action="store_true",
                        help="instead: each single backend (and --strategies on 2 devices) "
                        "compiled against eager, 10 steps")
    parity.set_defaults(func=cmd_parity)
    check = sub.add_parser("check", help="validate every record in a folder")
    check.add_argument("dir")
    check.set_defaults(func=cmd_check)
    report = sub.add_parser("report", help="comparison tables, environment and plots of the "
                            "records in a folder")
    report.add_argument("dir")
    report.add_argument("--format", choices=("md", "csv", "html"), default="md")
    report.add_argument("--output", help="write the report here instead of to stdout (html: "
                        "its plots as PNG files next to it)")
    report.add_argument("--plots", metavar="DIR", help="also write every plot as a PNG file here")
    report.add_argument("--strict", action="store_true",
                        help="refuse a folder with any invalid file instead of skipping it")
    report.set_defaults(func=cmd_report)
    add_slurm_parser(sub, _add_run_options)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    become_subreaper()  # a worker whose launcher died stays ours to find and end
    handle_termination()  # SIGTERM and SIGHUP clean up like Ctrl-C
    remove_stale_tempdirs()
    try:
        return args.func(args)
    except UsageError as err:
        print(f"parbench: error: {err}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt as stop:
        signum = stop.signum if isinstance(stop, Terminated) else signal.SIGINT
        print(f"parbench: {signal.Signals(signum).name}: stopped; every process of the run "
              "was ended, and records already written are kept", file=sys.stderr)
        return 128 + signum


if __name__ == "__main__":
    sys.exit(main())
