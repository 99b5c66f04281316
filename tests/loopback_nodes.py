"""Two "nodes" on loopback, the reference every multi-node engine's run is held to: each node is
its own ``parbench run`` (its own process tree and launcher), both started by
tests/nodes_driver.py inside one private network namespace where the OS allows it, addressing
127.0.0.1 only. tests/test_multinode.py checks these runs against one node; the Slurm cluster's
and the Kubernetes operators' runs must equal them (tests/test_slurm_cluster.py,
tests/test_from_env.py)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from conftest import records_in, shared_result
from parbench.base.ports import free_port
from parbench.launch.netns import enter_private_network, private_network_unavailable

DRIVER = Path(__file__).with_name("nodes_driver.py")
# digits, global batch 32, no BatchNorm, one thread per worker: both layouts (2 nodes x 1 device
# and 1 node x 2 devices) compute the same sums in the same order
TRAINING = ("--dataset", "digits", "--global-batch", "32", "--steps", "8", "--model",
            "resnet-nonorm", "--threads", "1")


def node_argv(backend: str, rank: int, port: int, out: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "parbench.cli", "run", backend, "--nnodes", "2",
            "--node-rank", str(rank), "--master", f"127.0.0.1:{port}", "--devices", "1",
            *TRAINING, "--out", str(out), *extra]


def run_nodes(folder: Path, argvs: list[list[str]], envs: list[dict] | None = None,
              kill: dict | None = None, timeout: float = 300) -> dict:
    """Start the nodes side by side through the driver; its report (see nodes_driver.py)."""
    spec = folder / "nodes.json"
    spec.write_text(json.dumps({"nodes": [{"argv": argv, "env": env} for argv, env in
                                          zip(argvs, envs or [{}] * len(argvs))],
                                "kill": kill, "timeout": timeout}))
    isolate = enter_private_network if private_network_unavailable() is None else None
    done = subprocess.run([sys.executable, str(DRIVER), str(spec)], capture_output=True,
                          text=True, timeout=timeout + 60, preexec_fn=isolate, cwd=folder)
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout)
    assert report["survivors"] == [], "processes outlived the run"
    return report


def loopback_run(tmp_path_factory, backend: str, *extra: str) -> dict:
    """The two-node loopback run of ``backend`` with TRAINING (and ``extra``), once per test
    session: {"nodes": the driver's per-node report, "records": {node: its out folder's
    records}}."""
    def run() -> dict:
        folder = tmp_path_factory.mktemp(f"loopback-{backend}")
        port = free_port()
        report = run_nodes(folder, [node_argv(backend, r, port, folder / f"out{r}", *extra)
                                    for r in (0, 1)])
        return {"nodes": report["nodes"],
                "records": {r: records_in(folder / f"out{r}") for r in (0, 1)}}
    return shared_result(tmp_path_factory, ("loopback", backend, extra), run)


def assert_same_training(record: dict, reference: dict) -> None:
    """``record`` trained what ``reference`` trained: the same model and data, the same batches
    in the same order, the same losses (to float32 summation order: rtol 1e-6)."""
    assert record["status"] == reference["status"] == "ok", record["error"]
    assert record["model"] == reference["model"]
    assert record["spec_sha256"] == reference["spec_sha256"]
    assert (record["world_size"], record["nnodes"]) == \
        (reference["world_size"], reference["nnodes"])
    assert record["metrics"]["input"]["fingerprints"] == \
        reference["metrics"]["input"]["fingerprints"]
    np.testing.assert_allclose(record["metrics"]["loss_curve"],
                               reference["metrics"]["loss_curve"], rtol=1e-6)
    # the same predictions: one test row of 360 moves the accuracy by 2.8e-3
    assert record["metrics"]["final_accuracy"] == \
        pytest.approx(reference["metrics"]["final_accuracy"], abs=1e-6)
