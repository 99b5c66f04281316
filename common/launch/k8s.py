"""Multi-node runs on Kubernetes: the Kubeflow training operator job that runs
``parbench run --from-env`` in each of its pods (parbench.launch.operators reads the place each
pod is given).

The manifest is built with the operator's own Python SDK (``kubeflow-training``: its models
refuse a job without the fields the operator requires) and printed as YAML for ``kubectl
apply -f``. One pod per node, not per device: parbench's own launcher (torchrun,
paddle.distributed.launch, one process per TF worker or JAX process) starts the pod's workers,
exactly as on one machine. Choices a benchmark needs, whatever the operator's defaults:

- ``restartPolicy: Never`` and ``backoffLimit: 0``: a pod restarted mid-run could not rejoin a
  run in progress, and a second attempt would be another run with its own record;
- ``cleanPodPolicy: Running``: when the job ends (a failed pod fails it) every pod still running
  is deleted, so nothing is left training after a failed node; finished pods keep their logs;
- the container has the operator's default name and port name, which is where each operator
  reads the rendezvous port it injects (and a JAXJob refuses a job without it); parbench also
  uses the next port up on node 0 for its check-in.

Nothing here is run on a cluster by the tests (none can run here): the manifests are checked
statically (tests/test_k8s.py).
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass

from parbench.base.errors import UsageError
from parbench.run.registry import BACKENDS, LAUNCHERS, Operator, spanning_backends

SET_BY_MANIFEST = ("--nnodes", "--node-rank", "--master", "--from-slurm", "--from-env",
                   "--master-port")
RESULTS_MOUNT = "/parbench-results"
SDK_MISSING = ("parbench k8s builds the manifest with Kubeflow's training SDK, which is not "
               "installed: pip install 'parbench[k8s]' (kubeflow-training)")


@dataclass(frozen=True)
class Pods:
    """What each pod of the job gets, from the k8s options."""

    nodes: int
    image: str
    gpus_per_node: int = 0
    cpus: str | None = None
    memory: str | None = None
    pvc: str | None = None
    port: int | None = None  # None: the operator's default
    name: str | None = None  # None: parbench-BACKEND
    namespace: str | None = None


def _given(run_args: list[str], option: str) -> bool:
    return any(arg == option or arg.startswith(option + "=") for arg in run_args)


def _dns_name(option: str, value: str, longest: int, dots: bool = False) -> str:
    """A DNS-1123 label (a job: its pods are <job>-<replica type>-<index>, 63 characters at
    most; a namespace), or with ``dots`` a subdomain (a claim)."""
    label = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
    if not re.fullmatch(rf"{label}(\.{label})*" if dots else label, value) \
            or len(value) > longest:
        allowed = "'-' and '.'" if dots else "'-'"
        raise UsageError(f"{option} {value!r}: wants lower-case letters, digits and {allowed}, "
                         f"starting and ending alphanumeric, at most {longest} characters")
    return value


def _quantity(option: str, value: str | None) -> str | None:
    if value is not None and not re.fullmatch(r"[0-9]+(\.[0-9]+)?(m|[KMGT]i?)?", value):
        raise UsageError(f"{option} {value!r}: wants a Kubernetes quantity (4, 500m, 16Gi)")
    return value


def container_command(backend: str, run_args: list[str], pods: Pods) -> list[str]:
    """What every pod runs: ``parbench run BACKEND --from-env``, the pod's devices (its GPUs),
    the results folder on the claim, then the run options as given."""
    clash = [option for option in SET_BY_MANIFEST if _given(run_args, option)]
    if clash:
        raise UsageError(f"{clash[0]}: each pod takes it from its operator's variables "
                         "(--from-env); leave it out of the run options")
    if pods.gpus_per_node > 0 and _given(run_args, "--devices"):
        raise UsageError(f"--devices: with --gpus-per-node {pods.gpus_per_node} each pod "
                         "trains on its GPUs; leave --devices out")
    devices = ["--devices", str(pods.gpus_per_node)] if pods.gpus_per_node > 0 else []
    out = ["--out", RESULTS_MOUNT] if pods.pvc and not _given(run_args, "--out") else []
    return ["parbench", "run", backend, "--from-env", *devices, *out, *run_args]


def job_operator(backend: str) -> Operator:
    """The operator whose job runs ``backend`` on several pods; UsageError when none can."""
    found = BACKENDS.get(backend)
    operator = found.info.operator if found else None
    if found is None or operator is None or LAUNCHERS[found.launchers[0]].single_node:
        raise UsageError(f"parbench k8s: {backend} has no Kubernetes training operator job; "
                         f"multi-node backends: {spanning_backends()}")
    return operator


def _checked(backend: str, pods: Pods) -> Operator:
    operator = job_operator(backend)
    if pods.nodes < 1:
        raise UsageError(f"--nodes wants 1 or more; got {pods.nodes}")
    if pods.gpus_per_node < 0:
        raise UsageError(f"--gpus-per-node wants 0 or more; got {pods.gpus_per_node}")
    if pods.port is not None and not 1 <= pods.port <= 65534:
        raise UsageError(f"--master-port wants a port in 1..65534 (parbench also uses "
                         f"PORT+1); got {pods.port}")
    if not pods.image.strip() or any(c.isspace() for c in pods.image):
        raise UsageError(f"--image {pods.image!r}: wants an image reference without spaces")
    _dns_name("--job-name", pods.name or f"parbench-{backend}", 50)
    if pods.namespace is not None:
        _dns_name("--namespace", pods.namespace, 63)
    if pods.pvc is not None:
        _dns_name("--pvc", pods.pvc, 253, dots=True)
    _quantity("--cpus", pods.cpus)
    _quantity("--memory", pods.memory)
    return operator


def manifest(backend: str, run_args: list[str], pods: Pods) -> dict:
    """The job as the operator's SDK builds it, serialised for the API server."""
    operator = _checked(backend, pods)
    command = container_command(backend, run_args, pods)
    try:
        from kubeflow.training import models
        from kubernetes import client
    except ImportError:
        raise UsageError(SDK_MISSING) from None
    template = client.V1PodTemplateSpec(spec=_pod_spec(client, operator, command, pods))

    def replicas(count: int):
        return models.KubeflowOrgV1ReplicaSpec(replicas=count, restart_policy="Never",
                                               template=template)

    specs = ({"Master": replicas(1), **({"Worker": replicas(pods.nodes - 1)}
                                         if pods.nodes > 1 else {})}
             if operator.master_replica else {"Worker": replicas(pods.nodes)})
    field = operator.kind.removesuffix("Job").lower() + "_replica_specs"
    policy = models.KubeflowOrgV1RunPolicy(clean_pod_policy="Running", backoff_limit=0)
    spec = getattr(models, f"KubeflowOrgV1{operator.kind}Spec")(run_policy=policy,
                                                             **{field: specs})
    job = getattr(models, f"KubeflowOrgV1{operator.kind}")(
        api_version="kubeflow.org/v1", kind=operator.kind,
        metadata=client.V1ObjectMeta(name=pods.name or f"parbench-{backend}",
                                     namespace=pods.namespace,
                                     labels={"app.kubernetes.io/name": "parbench"}),
        spec=spec)
    return client.ApiClient().sanitize_for_serialization(job)


def _pod_spec(client, operator: Operator, command: list[str], pods: Pods):
    port = pods.port or operator.port
    limits = {"nvidia.com/gpu": str(pods.gpus_per_node)} if pods.gpus_per_node else {}
    requests = {key: value for key, value in (("cpu", pods.cpus), ("memory", pods.memory))
                if value is not None}
    mounts = [client.V1VolumeMount(name="results", mount_path=RESULTS_MOUNT)] if pods.pvc \
        else None
    container = client.V1Container(
        name=operator.container, image=pods.image, command=command,
        ports=[client.V1ContainerPort(name=operator.port_name, container_port=port),
               client.V1ContainerPort(name="checkin", container_port=port + 1)],
        resources=client.V1ResourceRequirements(limits=limits or None,
                                                requests=requests or None),
        volume_mounts=mounts)
    volumes = [client.V1Volume(name="results", persistent_volume_claim=(
        client.V1PersistentVolumeClaimVolumeSource(claim_name=pods.pvc)))] if pods.pvc else None
    return client.V1PodSpec(containers=[container], volumes=volumes)


def manifest_yaml(backend: str, run_args: list[str], pods: Pods) -> str:
    """The manifest for ``kubectl apply -f``, under a comment that says what it runs."""
    import yaml  # the kubernetes client's dependency, there whenever the SDK is

    job = manifest(backend, run_args, pods)
    command = shlex.join(container_command(backend, run_args, pods))
    keep = (f"# The record is written on the claim {pods.pvc}, mounted at {RESULTS_MOUNT}." if
            pods.pvc else "# Without --pvc the record stays in pod 0's file system: give "
            "--pvc CLAIM to keep it.")
    head = [f"# parbench on Kubernetes: a {job['kind']} of {pods.nodes} pod(s), one per node; "
            "each runs", f"#   {command}",
            "# and --from-env reads its place in the job from the operator's variables.", keep,
            "# Apply with: kubectl apply -f FILE (the Kubeflow training operator must be "
            "installed)."]
    return "\n".join(head) + "\n" + yaml.safe_dump(job, sort_keys=False)
