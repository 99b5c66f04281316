"""`parbench run --from-env`: a pod's place in its job, from the variables each Kubernetes
training operator injects (parbench.launch.operators). Each form is read here, its problems are
one line, and each is run as two loopback "nodes" given exactly the variables that operator would
give its two pods: the record equals the two-node loopback run of tests/loopback_nodes.py."""

from __future__ import annotations

import json
import sys

import pytest
from loopback_nodes import TRAINING, assert_same_training, loopback_run, run_nodes

from conftest import needs, parbench, records_in
from parbench.base.errors import UsageError
from parbench.base.ports import free_port
from parbench.launch.operators import PodPlace, pod_place


def tf_config(workers: list[str], index: int, kind: str = "worker", **more) -> str:
    return json.dumps({"cluster": {"worker": workers, **more},
                       "task": {"type": kind, "index": index}, "environment": "cloud"})


# What each operator gives pod `rank` of a two-pod job whose node 0 listens at PORT, written as
# the operator writes it (its service names replaced by loopback names, which is all a pod on
# this machine can reach).
def operator_env(operator: str, rank: int, port: int) -> dict[str, str]:
    return {
        "PyTorchJob": {"MASTER_ADDR": "localhost", "MASTER_PORT": str(port), "WORLD_SIZE": "2",
                       "RANK": str(rank), "PYTHONUNBUFFERED": "0"},
        "TrainJob": {"PET_NNODES": "2", "PET_NODE_RANK": str(rank), "PET_NPROC_PER_NODE": "1",
                     "PET_MASTER_ADDR": "localhost", "PET_MASTER_PORT": str(port)},
        "TFJob": {"TF_CONFIG": tf_config([f"localhost:{port}"] * 2, rank)},
        # pod 0 gets its own IP, the others the service of worker 0; no rank but the pod name
        "PaddleJob": {"PADDLE_MASTER": f"{'127.0.0.1' if rank == 0 else 'localhost'}:{port}",
                      "PADDLE_NNODES": "2", "PADDLE_JOB_ID": "bench",
                      "HOSTNAME": f"bench-worker-{rank}"},
        "JAXJob": {"COORDINATOR_ADDRESS": "localhost", "COORDINATOR_PORT": str(port),
                   "NUM_PROCESSES": "2", "PROCESS_ID": str(rank)},
    }[operator]


@pytest.mark.parametrize("operator,rank,master,devices", [
    ("PyTorchJob", 1, "localhost:23456", None), ("TrainJob", 1, "localhost:23456", 1),
    ("TFJob", 1, "localhost:23456", None), ("PaddleJob", 0, "127.0.0.1:23456", None),
    ("PaddleJob", 1, "localhost:23456", None), ("JAXJob", 0, "localhost:23456", None)])
def test_each_operator_form_gives_the_pod_its_place(operator, rank, master, devices):
    assert pod_place(operator_env(operator, rank, 23456)) == \
        PodPlace(operator, 2, rank, master, devices)


def test_a_tfjob_chief_is_node_0_and_its_workers_follow():
    env = {"TF_CONFIG": tf_config(["w0:2222", "w1:2222"], 1, chief=["c0:2222"])}
    assert pod_place(env) == PodPlace("TFJob", 3, 2, "c0:2222")
    env = {"TF_CONFIG": tf_config(["w0:2222"], 0, kind="chief", chief=["c0:2222"])}
    assert pod_place(env) == PodPlace("TFJob", 2, 0, "c0:2222")


def test_trainjobs_auto_processes_leave_the_devices_to_parbench():
    env = {**operator_env("TrainJob", 0, 29400), "PET_NPROC_PER_NODE": "auto"}
    assert pod_place(env).devices is None


def test_two_forms_that_agree_are_one_place():
    env = {**operator_env("PyTorchJob", 1, 23456), **operator_env("TrainJob", 1, 23456)}
    assert pod_place(env).operator == "PyTorchJob"


@pytest.mark.parametrize("env,line", [
    ({}, "--from-env: no training operator's variables are set (PyTorchJob: MASTER_ADDR, "),
    ({"MASTER_ADDR": "m", "RANK": "1"},
     "--from-env: PyTorchJob's MASTER_ADDR, RANK set without MASTER_PORT, WORLD_SIZE"),
    ({**operator_env("PyTorchJob", 1, 23456), **operator_env("JAXJob", 0, 23456)},
     "--from-env: the variables of PyTorchJob and JAXJob disagree (PyTorchJob: node 1 of 2, "
     "master localhost:23456; JAXJob: node 0 of 2, master localhost:23456): unset those"),
    ({**operator_env("PyTorchJob", 1, 23456), "RANK": "2"},
     "--from-env: RANK=2 is out of range for WORLD_SIZE=2 (0..1)"),
    ({**operator_env("PyTorchJob", 1, 23456), "WORLD_SIZE": "two"},
     "--from-env: WORLD_SIZE='two' is not a non-negative integer"),
    ({**operator_env("JAXJob", 1, 23456), "COORDINATOR_PORT": "65535"},
     "--from-env: COORDINATOR_PORT=65535 is not a port in 1..65534 (parbench also uses PORT+1)"),
    ({**operator_env("PyTorchJob", 1, 23456), "MASTER_ADDR": "a b"},
     "--from-env: MASTER_ADDR='a b' is not a host name or address"),
    ({**operator_env("PaddleJob", 1, 23456), "HOSTNAME": "bench-master-0"},
     "--from-env: a PaddleJob gives no rank; parbench reads it from the pod's name, "
     "bench-worker-<index> (HOSTNAME), which is 'bench-master-0'"),
    ({**operator_env("PaddleJob", 1, 23456), "PADDLE_TRAINER_NUM": "1"},
     "--from-env: PADDLE_TRAINER_NUM is set: a PaddleJob with a Master replica runs in "
     "parameter-server mode"),
    ({**operator_env("PaddleJob", 1, 23456), "PADDLE_MASTER": "bench-worker-0"},
     "--from-env: PADDLE_MASTER='bench-worker-0' is not HOST:PORT"),
    ({"TF_CONFIG": "{not json"}, "--from-env: TF_CONFIG is not a TFJob's cluster and task"),
    ({"TF_CONFIG": tf_config(["w0:2222"], 0, ps=["p0:2222"])},
     "--from-env: TF_CONFIG's cluster has 'ps' tasks; parbench trains on chief and worker pods"),
    ({"TF_CONFIG": tf_config(["w0:2222"], 0, kind="evaluator")},
     "--from-env: TF_CONFIG's task {'type': 'evaluator', 'index': 0} is not a chief or worker"),
    ({"TF_CONFIG": tf_config(["w0:2222"], 1)},
     "--from-env: TF_CONFIG's task=1 is out of range for TF_CONFIG's cluster=1 (0..0)"),
    ({**operator_env("TrainJob", 0, 29400), "PET_NPROC_PER_NODE": "0"},
     "--from-env: PET_NPROC_PER_NODE=0 must be at least 1"),
])
def test_every_problem_is_one_line_naming_the_variable(env, line):
    with pytest.raises(UsageError) as raised:
        pod_place(env)
    assert str(raised.value).startswith(line), str(raised.value)
    assert "\n" not in str(raised.value)


@pytest.mark.parametrize("args,env,line", [
    (("--from-env", "--nnodes", "2"), {}, "--from-env sets --nnodes itself; leave them out"),
    (("--from-env", "--from-slurm"), {}, "--from-slurm and --from-env: give one"),
    (("--from-env", "--master-port", "23456"), {}, "--master-port goes with --from-slurm"),
    (("--from-env", "--devices", "2"), operator_env("TrainJob", 0, 29400),
     "--devices 2: the TrainJob runs PET_NPROC_PER_NODE=1 per node"),
    (("--from-env",), {"RANK": "0"}, "--from-env: PyTorchJob's RANK set without MASTER_ADDR"),
])
def test_the_run_command_refuses_in_one_line_and_writes_nothing(tmp_path, args, env, line):
    done = parbench("run", "torch-ddp", *args, "--out", str(tmp_path / "out"), env=env)
    assert done.returncode == 2
    (said,) = done.stderr.strip().splitlines()
    assert said.startswith("parbench: error: " + line), said
    assert not (tmp_path / "out").exists()


FORMS = [pytest.param("PyTorchJob", "torch-ddp", marks=needs("torch")),
         pytest.param("TrainJob", "torch-ddp", marks=needs("torch")),
         pytest.param("TFJob", "tf-multiworker", marks=needs("tensorflow")),
         pytest.param("PaddleJob", "paddle-launch", marks=needs("paddle")),
         pytest.param("JAXJob", "jax-multiprocess", marks=needs("jax"))]


@pytest.mark.slow
@pytest.mark.parametrize("operator,backend", FORMS)
def test_pods_given_an_operators_variables_train_as_two_loopback_nodes(
        tmp_path, tmp_path_factory, operator, backend):
    port = free_port()
    # TrainJob's PET_NPROC_PER_NODE gives the devices; the others leave --devices to the user
    devices = () if operator == "TrainJob" else ("--devices", "1")
    argvs = [[sys.executable, "-m", "parbench.cli", "run", backend, "--from-env", *devices,
              *TRAINING, "--out", str(tmp_path / f"out{rank}")] for rank in (0, 1)]
    report = run_nodes(tmp_path, argvs, [operator_env(operator, rank, port) for rank in (0, 1)])
    node0, node1 = report["nodes"]
    assert (node0["rc"], node1["rc"]) == (0, 0), node0["stderr"][-2000:] + node1["stderr"][-2000:]
    (record,) = records_in(tmp_path / "out0")
    assert not (tmp_path / "out1").exists()  # node 0 writes the run's one record
    assert (record["nnodes"], record["node_rank"]) == (2, 0)
    assert record["config"]["master"] == operator_env(operator, 0, port).get(
        "PADDLE_MASTER", f"localhost:{port}")
    (reference,) = loopback_run(tmp_path_factory, backend)["records"][0]
    assert_same_training(record, reference)
