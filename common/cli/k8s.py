"""``parbench k8s BACKEND --nodes N --image IMAGE [run options]``: print the Kubeflow training
operator job that runs one ``parbench run --from-env`` per pod (the manifest itself:
parbench.launch.k8s; how the k8s options and the run options mix: parbench.cli.engine)."""

from __future__ import annotations

import argparse

from parbench.base.errors import UsageError
from parbench.launch.k8s import Pods, manifest_yaml
from parbench.run.registry import FRAMEWORKS

from .engine import add_engine_parser, check_run_options, printed_help, split_options


def _add_k8s_options(parser: argparse.ArgumentParser) -> None:
    ports = ", ".join(f"{framework.operator.kind} {framework.operator.port}"
                      for framework in FRAMEWORKS.values() if framework.operator)
    add = parser.add_argument
    add("--nodes", type=int, metavar="N", help="pods to run on, one per node (required)")
    add("--image", help="the container image with parbench and the backend's framework "
        "installed (required)")
    add("--gpus-per-node", type=int, default=0, metavar="G",
        help="GPUs per pod (nvidia.com/gpu), each pod's --devices (0: CPU pods)")
    add("--cpus", help="CPU request per pod, a Kubernetes quantity (4, 500m)")
    add("--memory", help="memory request per pod, a Kubernetes quantity (16Gi)")
    add("--pvc", metavar="CLAIM", help="a PersistentVolumeClaim mounted in every pod; --out "
        "defaults to it (ReadWriteMany for checkpoints, which every pod writes)")
    add("--master-port", type=int, metavar="PORT",
        help=f"the rendezvous port on pod 0 (the operator's default: {ports})")
    add("--job-name", help="the job's name (parbench-BACKEND)")
    add("--namespace", help="the job's namespace (kubectl's current one)")


def add_k8s_parser(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    return add_engine_parser(sub, "k8s", "print a Kubeflow training operator job that runs a "
                             "backend on N pods", _add_k8s_options, cmd_k8s)


def cmd_k8s(args: argparse.Namespace) -> int:
    """Print the manifest for ``parbench k8s BACKEND [options]``."""
    if printed_help(args):
        return 0
    opts, run_args = split_options(args, "k8s", _add_k8s_options)
    if opts.image is None:
        raise UsageError("k8s: --image is required (an image with parbench and "
                         f"{args.backend}'s framework installed)")
    pods = Pods(nodes=opts.nodes, image=opts.image, gpus_per_node=opts.gpus_per_node,
                cpus=opts.cpus, memory=opts.memory, pvc=opts.pvc, port=opts.master_port,
                name=opts.job_name, namespace=opts.namespace)
    check_run_options(run_args, "k8s")
    print(manifest_yaml(args.backend, run_args, pods), end="")
    return 0
