"""`parbench k8s`: the Kubeflow training operator job for each multi-node backend, built with the
operator's SDK (kubeflow-training) and checked statically (no cluster can run here): its kind,
replicas, container, port and policies as the operator reads them, and, given the variables the
operator would inject into each of its pods, the places `--from-env` reads from them are the
nodes 0..N-1 of one run, meeting at one master."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import pytest
import yaml

from conftest import parbench, sub_command_output
from parbench.base.errors import UsageError
from parbench.cli.k8s import add_k8s_parser
from parbench.launch.k8s import Pods, job_operator, manifest
from parbench.launch.operators import pod_place
from parbench.run.registry import BACKENDS, LAUNCHERS

constants = pytest.importorskip("kubeflow.training.constants.constants",
                                reason="Kubeflow's training SDK is not installed "
                                "(pip install 'parbench[k8s]')")
RUN_ARGS = ["--steps", "100", "--global-batch", "256"]


def containers(job: dict) -> dict[str, dict]:
    """replica type -> (replicas, its one container)."""
    specs = next(value for key, value in job["spec"].items() if key.endswith("ReplicaSpecs"))
    return {kind: (spec["replicas"], spec["template"]["spec"]["containers"][0], spec)
            for kind, spec in specs.items()}


def injected(job: dict) -> list[dict[str, str]]:
    """What the operator gives each pod, in pod order, as its envvar.go writes it for this job
    (kubeflow/training-operator pkg/controller.v1/<framework>/envvar.go): services are named
    <job>-<replica type>-<index>, ports read from the default container's default port."""
    name, kind = job["metadata"]["name"], job["kind"]
    replicas = containers(job)
    total = sum(count for count, _, _ in replicas.values())
    port = next(p["containerPort"] for p in next(iter(replicas.values()))[1]["ports"]
                if p["name"] == OPERATORS[kind].port_name)
    pods = [(role.lower(), index) for role, (count, _, _) in replicas.items()
            for index in range(count)]
    if kind == "PyTorchJob":
        if "Master" not in replicas:
            return [{}] * total  # MASTER_ADDR and RANK come only with a Master replica
        return [{"MASTER_ADDR": f"{name}-master-0", "MASTER_PORT": str(port),
                 "WORLD_SIZE": str(total), "RANK": str(index + (role == "worker"))}
                for role, index in pods]
    if kind == "TFJob":
        cluster = {"worker": [f"{name}-worker-{i}.default.svc:{port}" for i in range(total)]}
        return [{"TF_CONFIG": json.dumps({"cluster": cluster, "task": {"type": role,
                                                                        "index": index}})}
                for role, index in pods]
    if kind == "PaddleJob":
        return [{"PADDLE_MASTER": f"{'10.1.2.3' if index == 0 else name + '-worker-0'}:{port}",
                 "PADDLE_NNODES": str(total), "PADDLE_JOB_ID": name,
                 "HOSTNAME": f"{name}-{role}-{index}"} for role, index in pods]
    return [{"COORDINATOR_ADDRESS": f"{name}-worker-0", "COORDINATOR_PORT": str(port),
             "NUM_PROCESSES": str(total), "PROCESS_ID": str(index)} for role, index in pods]


# every backend that spans machines (its default launcher does) has its framework's operator
SPANNING = [name for name, backend in BACKENDS.items()
            if LAUNCHERS[backend.launchers[0]].single_node is None]
OPERATORS = {job_operator(name).kind: job_operator(name) for name in SPANNING}


@pytest.mark.parametrize("backend", SPANNING)
@pytest.mark.parametrize("nodes", [1, 3])
def test_the_job_is_the_operators_kind_with_one_pod_per_node(backend, nodes):
    job = manifest(backend, RUN_ARGS, Pods(nodes=nodes, image="registry.example/parbench:1"))
    kind = job_operator(backend)
    assert (job["apiVersion"], job["kind"]) == (constants.API_VERSION, kind.kind)
    replicas = containers(job)
    assert sum(count for count, _, _ in replicas.values()) == nodes
    allowed = constants.JOB_PARAMETERS[kind.kind]
    roles = getattr(constants, f"{kind.kind.upper()}_REPLICA_TYPES")
    roles = (roles,) if isinstance(roles, str) else roles  # the SDK's JAXJob has one, bare
    assert {role.lower() for role in replicas} <= set(roles)
    for _, container, spec in replicas.values():
        assert container["name"] == allowed["container"]  # where the operator injects
        assert container["command"] == ["parbench", "run", backend, "--from-env", *RUN_ARGS]
        assert kind.port_name in [port["name"] for port in container["ports"]]
        assert spec["restartPolicy"] == "Never"
    assert job["spec"]["runPolicy"] == {"backoffLimit": 0, "cleanPodPolicy": "Running"}


@pytest.mark.parametrize("backend", SPANNING)
def test_the_operators_variables_place_the_pods_as_nodes_of_one_run(backend):
    job = manifest(backend, RUN_ARGS, Pods(nodes=3, image="img"))
    places = [pod_place(env) for env in injected(job)]
    assert [place.node_rank for place in places] == [0, 1, 2]
    assert {place.nnodes for place in places} == {3}
    hosts = {place.master.rsplit(":", 1)[0] for place in places[1:]}
    assert len(hosts) == 1  # every pod but node 0 itself meets node 0 at one address


def test_gpus_claim_pods_and_set_their_devices():
    job = manifest("torch-ddp", RUN_ARGS, Pods(nodes=2, image="img", gpus_per_node=8,
                                               cpus="32", memory="200Gi", pvc="team.runs"))
    (_, master, spec), _ = containers(job).values()
    assert master["resources"] == {"limits": {"nvidia.com/gpu": "8"},
                                   "requests": {"cpu": "32", "memory": "200Gi"}}
    assert master["command"][3:8] == ["--from-env", "--devices", "8", "--out",
                                      "/parbench-results"]
    assert master["volumeMounts"] == [{"mountPath": "/parbench-results", "name": "results"}]
    assert spec["template"]["spec"]["volumes"] == [
        {"name": "results", "persistentVolumeClaim": {"claimName": "team.runs"}}]


@pytest.mark.parametrize("pods,run_args,fragment", [
    (Pods(nodes=2, image="img"), ["--master", "h:1"], "--master: each pod takes it"),
    (Pods(nodes=2, image="img"), ["--from-slurm"], "--from-slurm: each pod takes it"),
    (Pods(nodes=2, image="img", gpus_per_node=2), ["--devices", "2"], "leave --devices out"),
    (Pods(nodes=0, image="img"), [], "--nodes wants 1 or more"),
    (Pods(nodes=2, image="my image"), [], "--image 'my image': wants an image reference"),
    (Pods(nodes=2, image="img", name="Bench_1"), [], "--job-name 'Bench_1': wants lower-case"),
    (Pods(nodes=2, image="img", name="a" * 51), [], "at most 50 characters"),
    (Pods(nodes=2, image="img", name="runs.a"), [], "digits and '-', starting"),
    (Pods(nodes=2, image="img", pvc="Runs"), [], "--pvc 'Runs': wants lower-case letters, "
     "digits and '-' and '.'"),
    (Pods(nodes=2, image="img", cpus="four"), [], "--cpus 'four': wants a Kubernetes quantity"),
    (Pods(nodes=2, image="img", port=65535), [], "--master-port wants a port in 1..65534"),
])
def test_refusals_are_one_line(pods, run_args, fragment):
    with pytest.raises(UsageError) as raised:
        manifest("torch-ddp", run_args, pods)
    assert fragment in str(raised.value) and "\n" not in str(raised.value)


def k8s_cli(argv: list[str], capsys) -> str:
    return sub_command_output(add_k8s_parser, argv, capsys)


def test_the_command_prints_yaml_for_kubectl_with_the_run_options_verbatim(capsys):
    text = k8s_cli(["k8s", "paddle-launch", "--steps", "5", "--nodes", "2", "--image", "img",
                    "--compile", "--master-port", "4000"], capsys)
    assert text.startswith("# parbench on Kubernetes: a PaddleJob of 2 pod(s)")
    job = yaml.safe_load(text)
    (count, container, _), = containers(job).values()
    assert count == 2 and container["command"][4:] == ["--steps", "5", "--compile"]
    assert container["ports"][0] == {"containerPort": 4000, "name": "master"}


@pytest.mark.parametrize("argv,line", [
    (["k8s", "torch-ddp", "--nodes", "2"], "k8s: --image is required"),
    (["k8s", "torch-ddp", "--image", "i"], "k8s: --nodes is required"),
    (["k8s", "torch-ddp", "--nodes", "2", "--image", "i", "--stepz", "1"],
     "k8s: unrecognized arguments: --stepz"),
    (["k8s", "torch-single", "--nodes", "2", "--image", "i"],
     "parbench k8s: torch-single has no Kubernetes training operator job; multi-node "
     "backends: torch-ddp (torchrun)"),
])
def test_the_command_refuses_in_one_line_and_prints_nothing(argv, line):
    done = parbench(*argv)
    assert done.returncode == 2 and done.stdout == ""
    (said,) = done.stderr.strip().splitlines()
    assert said.startswith("parbench: error: " + line), said


@pytest.mark.parametrize("command", ["slurm", "k8s"])
def test_the_multinode_page_shows_what_the_commands_print(command):
    page = (Path(__file__).parents[1] / "docs" / "multinode.md").read_text()
    (block,) = re.findall(rf"```console\n\$ parbench ({command} .*?)\n(.*?)```", page, re.S)
    done = parbench(*shlex.split(block[0]))
    assert done.returncode == 0, done.stderr
    assert done.stdout == block[1], f"docs/multinode.md: paste 'parbench {block[0]}' again"
