"""Multi-node runs under Kubernetes' training operators: where this pod stands in the job.

Kubeflow's operators start one pod per node and tell each its place in the job through variables
of their own; ``parbench run --from-env`` reads whichever operator's are present, as
``--from-slurm`` reads srun's. They count pods, not processes: a pod is one parbench node, whose
own launcher starts its workers, so ``WORLD_SIZE`` and ``RANK`` here are pods. What each operator
injects (kubeflow/training-operator, pkg/controller.v1/<framework>/envvar.go; kubeflow/trainer,
pkg/runtime/framework/plugins/torch/torch.go):

- PyTorchJob: MASTER_ADDR (the master pod's service), MASTER_PORT, WORLD_SIZE (pods), RANK (the
  master pod 0, worker i i + 1);
- TFJob: TF_CONFIG, {"cluster": {"chief": [...], "worker": [HOST:PORT, ...]}, "task": {"type",
  "index"}}: pods in the chief-then-worker order;
- PaddleJob: PADDLE_MASTER (pod 0 its own IP, the others the service ``<job>-worker-0``, both
  with the port), PADDLE_NNODES, PADDLE_JOB_ID (the job's name), and no rank: Paddle's launcher
  numbers nodes as they join, so parbench takes the rank from the pod's name,
  ``<job>-worker-<index>`` (HOSTNAME in every pod);
- JAXJob: COORDINATOR_ADDRESS (worker 0's service), COORDINATOR_PORT, NUM_PROCESSES (pods),
  PROCESS_ID;
- Trainer v2's TrainJob (torch runtime): PET_NNODES, PET_NODE_RANK (the job completion index),
  PET_MASTER_ADDR, PET_MASTER_PORT, and PET_NPROC_PER_NODE (a number, or auto/cpu/gpu).

Nothing here imports a framework; every problem is one UsageError line (exit 2).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from parbench.base.errors import UsageError

# The variables that make up each operator's form, all of which it sets in every pod.
FORMS: dict[str, tuple[str, ...]] = {
    "PyTorchJob": ("MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "RANK"),
    "TFJob": ("TF_CONFIG",),
    "PaddleJob": ("PADDLE_MASTER", "PADDLE_NNODES", "PADDLE_JOB_ID"),
    "JAXJob": ("COORDINATOR_ADDRESS", "COORDINATOR_PORT", "NUM_PROCESSES", "PROCESS_ID"),
    "TrainJob": ("PET_NNODES", "PET_NODE_RANK", "PET_MASTER_ADDR", "PET_MASTER_PORT"),
}


@dataclass(frozen=True)
class PodPlace:
    operator: str  # the form read: a key of FORMS
    nnodes: int
    node_rank: int
    master: str  # node 0's HOST:PORT, as this pod reaches it
    devices: int | None = None  # TrainJob's PET_NPROC_PER_NODE, when it is a number


def _value(environ: Mapping[str, str], name: str) -> str:
    return environ.get(name, "").strip()


def _count(name: str, text: str) -> int:
    if not re.fullmatch(r"[0-9]+", text):
        raise UsageError(f"--from-env: {name}={text!r} is not a non-negative integer")
    return int(text)


def _port(name: str, text: str) -> int:
    port = _count(name, text)
    if not 1 <= port <= 65534:  # the check-in listens on PORT+1 (parbench.launch.nodes)
        raise UsageError(f"--from-env: {name}={port} is not a port in 1..65534 (parbench "
                         "also uses PORT+1)")
    return port


def _host(name: str, text: str) -> str:
    if not text or any(c.isspace() or c in "/@" for c in text):
        raise UsageError(f"--from-env: {name}={text!r} is not a host name or address")
    return text


def _endpoint(name: str, text: str) -> str:
    """HOST:PORT, checked; an IPv6 host in brackets."""
    host, sep, port = text.rpartition(":")
    if not sep:
        raise UsageError(f"--from-env: {name}={text!r} is not HOST:PORT")
    _host(name, host.removeprefix("[").removesuffix("]"))
    return f"{host}:{_port(name, port)}"


def _place(operator: str, nnodes: int, nnodes_name: str, rank: int, rank_name: str,
           master: str, devices: int | None = None) -> PodPlace:
    if nnodes < 1:
        raise UsageError(f"--from-env: {nnodes_name}={nnodes} must be at least 1")
    if rank >= nnodes:
        raise UsageError(f"--from-env: {rank_name}={rank} is out of range for "
                         f"{nnodes_name}={nnodes} (0..{nnodes - 1})")
    return PodPlace(operator, nnodes, rank, master, devices)


def _pytorchjob(env: Mapping[str, str]) -> PodPlace:
    host = _host("MASTER_ADDR", _value(env, "MASTER_ADDR"))
    port = _port("MASTER_PORT", _value(env, "MASTER_PORT"))
    return _place("PyTorchJob", _count("WORLD_SIZE", _value(env, "WORLD_SIZE")), "WORLD_SIZE",
                  _count("RANK", _value(env, "RANK")), "RANK", f"{host}:{port}")


def _trainjob(env: Mapping[str, str]) -> PodPlace:
    host = _host("PET_MASTER_ADDR", _value(env, "PET_MASTER_ADDR"))
    port = _port("PET_MASTER_PORT", _value(env, "PET_MASTER_PORT"))
    per_node = _value(env, "PET_NPROC_PER_NODE")
    devices = None if per_node in ("", "auto", "cpu", "gpu") else \
        _count("PET_NPROC_PER_NODE", per_node)
    if devices == 0:
        raise UsageError("--from-env: PET_NPROC_PER_NODE=0 must be at least 1")
    return _place("TrainJob", _count("PET_NNODES", _value(env, "PET_NNODES")), "PET_NNODES",
                  _count("PET_NODE_RANK", _value(env, "PET_NODE_RANK")), "PET_NODE_RANK",
                  f"{host}:{port}", devices)


def _jaxjob(env: Mapping[str, str]) -> PodPlace:
    host = _host("COORDINATOR_ADDRESS", _value(env, "COORDINATOR_ADDRESS"))
    port = _port("COORDINATOR_PORT", _value(env, "COORDINATOR_PORT"))
    return _place("JAXJob", _count("NUM_PROCESSES", _value(env, "NUM_PROCESSES")),
                  "NUM_PROCESSES", _count("PROCESS_ID", _value(env, "PROCESS_ID")),
                  "PROCESS_ID", f"{host}:{port}")


def _paddlejob(env: Mapping[str, str]) -> PodPlace:
    server = [name for name in ("PADDLE_SERVER_NUM", "PADDLE_TRAINER_NUM") if _value(env, name)]
    if server:
        raise UsageError(f"--from-env: {server[0]} is set: a PaddleJob with a Master replica "
                         "runs in parameter-server mode; parbench trains collectively "
                         "(a PaddleJob of workers only)")
    job = _value(env, "PADDLE_JOB_ID")
    pod = _value(env, "HOSTNAME")
    found = re.fullmatch(re.escape(job) + r"-worker-([0-9]+)", pod)
    if found is None:
        raise UsageError(f"--from-env: a PaddleJob gives no rank; parbench reads it from the "
                         f"pod's name, {job}-worker-<index> (HOSTNAME), which is {pod!r}")
    return _place("PaddleJob", _count("PADDLE_NNODES", _value(env, "PADDLE_NNODES")),
                  "PADDLE_NNODES", int(found.group(1)), "the pod index in HOSTNAME",
                  _endpoint("PADDLE_MASTER", _value(env, "PADDLE_MASTER")))


def _tfjob(env: Mapping[str, str]) -> PodPlace:
    try:
        config = json.loads(_value(env, "TF_CONFIG"))
        cluster, task = config["cluster"], config["task"]
        kind, index = task["type"], task["index"]
    except (ValueError, TypeError, KeyError) as err:
        raise UsageError(f"--from-env: TF_CONFIG is not a TFJob's cluster and task "
                         f"({type(err).__name__}: {err})") from None
    others = sorted(set(cluster) - {"chief", "worker"})
    if others:
        raise UsageError(f"--from-env: TF_CONFIG's cluster has {others[0]!r} tasks; parbench "
                         "trains on chief and worker pods only (all-reduce, no parameter "
                         "servers)")
    pods = [_endpoint("TF_CONFIG", str(address))
            for role in ("chief", "worker") for address in cluster.get(role, [])]
    if kind not in ("chief", "worker") or not isinstance(index, int) or index < 0:
        raise UsageError(f"--from-env: TF_CONFIG's task {task!r} is not a chief or worker "
                         "with an index")
    rank = index + (len(cluster.get("chief", [])) if kind == "worker" else 0)
    return _place("TFJob", len(pods), "TF_CONFIG's cluster", rank, "TF_CONFIG's task",
                  pods[0] if pods else "")


READERS: dict[str, Callable[[Mapping[str, str]], PodPlace]] = {
    "PyTorchJob": _pytorchjob, "TFJob": _tfjob, "PaddleJob": _paddlejob, "JAXJob": _jaxjob,
    "TrainJob": _trainjob}


def pod_place(environ: Mapping[str, str]) -> PodPlace:
    """This pod's place in its job, from whichever operator's variables are set in full.

    A form set in part, with no other in full, is refused naming what is missing (a pod
    started by hand, or a variable lost on the way); two forms in full are accepted only when
    they say the same thing (a newer PyTorchJob may also set some PET_ variables)."""
    present = {form: [name for name in names if _value(environ, name)]
               for form, names in FORMS.items()}
    present = {form: names for form, names in present.items() if names}
    if not present:
        forms = "; ".join(f"{form}: {', '.join(names)}" for form, names in FORMS.items())
        raise UsageError(f"--from-env: no training operator's variables are set ({forms})")
    complete = [form for form, names in present.items() if len(names) == len(FORMS[form])]
    if not complete:
        form, names = next(iter(present.items()))
        missing = [name for name in FORMS[form] if name not in names]
        raise UsageError(f"--from-env: {form}'s {', '.join(names)} set without "
                         f"{', '.join(missing)}")
    places = [READERS[form](environ) for form in complete]
    first = places[0]
    for other in places[1:]:
        if (other.nnodes, other.node_rank, other.master) != \
                (first.nnodes, first.node_rank, first.master):
            raise UsageError(f"--from-env: the variables of {first.operator} and "
                             f"{other.operator} disagree ({_said(first)}; {_said(other)}): "
                             "unset those of the operator that did not start this pod")
    return first


def _said(place: PodPlace) -> str:
    return f"{place.operator}: node {place.node_rank} of {place.nnodes}, master {place.master}"
