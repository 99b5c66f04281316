"""Multi-node runs, checked with two "nodes" on loopback (tests/loopback_nodes.py): each node is
its own ``parbench run`` (its own process tree and launcher), both in one private network
namespace where the OS allows it, addressing 127.0.0.1 only."""

from __future__ import annotations

import json
import subprocess
import threading
import time

import numpy as np
import pytest
from loopback_nodes import TRAINING, loopback_run, node_argv, run_nodes

from conftest import needs, parbench, records_in, run_ok
from parbench.base.errors import UsageError
from parbench.base.ports import free_port
from parbench.launch.checkin import CheckIn, NodeFailure, check_in
from parbench.launch.nodes import Nodes, differences, parse_master
from parbench.launch.nodewatch import Link
from parbench.run.collect import all_gather_bytes, pack, unpack

MULTI_NODE = [pytest.param("torch-ddp", (), marks=needs("torch")),
              pytest.param("tf-multiworker", (), marks=needs("tensorflow")),
              pytest.param("paddle-launch", (), marks=needs("paddle")),
              pytest.param("jax-multiprocess", (), marks=needs("jax")),
              # the language model: the options given later win over TRAINING's
              pytest.param("torch-ddp", ("--model", "gpt", "--dataset", "markov", "--context",
                                         "16"), marks=needs("torch"), id="torch-ddp-gpt")]


# --- two loopback nodes, each framework's launcher

@pytest.mark.slow
@pytest.mark.parametrize("backend,extra", MULTI_NODE)
def test_two_nodes_make_one_record_that_equals_one_node(tmp_path, tmp_path_factory, backend,
                                                      extra):
    run = loopback_run(tmp_path_factory, backend, *extra)
    node0, node1 = run["nodes"]
    assert (node0["rc"], node1["rc"]) == (0, 0), node0["stderr"][-2000:] + node1["stderr"][-2000:]
    (record,) = run["records"][0]
    assert run["records"][1] == []  # node 1 prints its part, node 0 records the run
    (tmp_path / "out0").mkdir()
    (tmp_path / "out0" / "record.json").write_text(json.dumps(record))
    checked = parbench("check", str(tmp_path / "out0"))  # the schema's multi-node fields
    assert checked.returncode == 0 and "1 record(s) checked, 0 problem(s)" in checked.stdout, \
        checked.stdout
    assert (record["world_size"], record["nnodes"], record["node_rank"]) == (2, 2, 0)
    assert len(record["hosts"]) == 2 and len(record["env"]["device_names"]) == 2
    assert [n["ranks"] for n in record["metrics"]["nodes"]] == [[0], [1]]
    assert record["variant"]["nnodes"] == 2
    assert "node 1, repeat 0: ok" in node1["stderr"]
    assert [line.split("|")[1].strip() for line in node1["stdout"].splitlines()[2:]] == ["1"]
    (tmp_path / "single").mkdir()
    single = run_ok(tmp_path / "single", backend, *TRAINING, "--devices", "2", *extra)
    assert record["model"] == single["model"] == ("gpt" if extra else "resnet-nonorm")
    assert record["spec_sha256"] == single["spec_sha256"]
    assert record["metrics"]["input"]["fingerprints"] == single["metrics"]["input"]["fingerprints"]
    np.testing.assert_allclose(record["metrics"]["loss_curve"], single["metrics"]["loss_curve"],
                               rtol=1e-6)


@pytest.mark.slow
@needs("torch")
def test_a_rank_killed_on_node_1_fails_the_run_on_node_0_naming_it(tmp_path):
    port = free_port()
    report = run_nodes(tmp_path, [node_argv("torch-ddp", r, port, tmp_path / f"out{r}")
                                  for r in (0, 1)],
                       envs=[{}, {"PARBENCH_TEST_FAULT": "kill:1:3"}])
    assert [n["rc"] for n in report["nodes"]] == [1, 1]
    (record,) = records_in(tmp_path / "out0")
    assert record["status"] == "failed"
    first = record["error"].splitlines()[0]
    assert first.startswith("node 1 (") and "rank 1" in first and "SIGKILL" in first, first
    assert "node 1, repeat 0: failed" in report["nodes"][1]["stderr"]


@pytest.mark.slow
@needs("torch")
def test_a_rank_killed_on_node_0_stops_node_1_and_leads_the_error(tmp_path):
    port = free_port()
    report = run_nodes(tmp_path, [node_argv("torch-ddp", r, port, tmp_path / f"out{r}",
                                            "--steps", "400") for r in (0, 1)],
                       envs=[{"PARBENCH_TEST_FAULT": "kill:0:3"}, {}])
    node0, node1 = report["nodes"]
    assert (node0["rc"], node1["rc"]) == (1, 1)
    assert node1["ended_s"] - node0["ended_s"] < 15, "node 1 was told to stop"
    (record,) = records_in(tmp_path / "out0")
    first = record["error"].splitlines()[0]
    assert first.startswith("node 0: rank 0 (") and "SIGKILL" in first, first


@pytest.mark.slow
@needs("torch")
def test_node_1_killed_mid_run_ends_node_0_within_seconds(tmp_path):
    port = free_port()
    report = run_nodes(tmp_path, [node_argv("torch-ddp", r, port, tmp_path / f"out{r}",
                                            "--steps", "400") for r in (0, 1)],
                       kill={"node": 1, "after_steps": 2})
    node0 = report["nodes"][0]
    assert report["killed_s"] is not None and node0["rc"] == 1, node0["stderr"][-2000:]
    assert node0["ended_s"] - report["killed_s"] < 15  # the check-in connection closed: at once
    (record,) = records_in(tmp_path / "out0")
    assert record["status"] == "failed"
    assert record["error"].startswith("node 1 (") and "left the run" in record["error"]


@pytest.mark.slow
@needs("torch")
def test_a_node_started_differently_is_refused_on_every_node(tmp_path):
    port = free_port()
    argvs = [node_argv("torch-ddp", 0, port, tmp_path / "out0"),
             node_argv("torch-ddp", 1, port, tmp_path / "out1", "--global-batch", "64")]
    report = run_nodes(tmp_path, argvs, timeout=120)
    for node in report["nodes"]:
        assert node["rc"] == 2, node["stderr"][-2000:]
        (line,) = node["stderr"].strip().splitlines()
        assert "--global-batch: node 1 has 64, node 0 has 32" in line
    assert not (tmp_path / "out0").exists() or records_in(tmp_path / "out0") == []


@pytest.mark.slow
@needs("torch")
def test_a_node_that_never_joins_is_a_failed_record_naming_it(tmp_path):
    out = tmp_path / "out"
    done = parbench(*node_argv("torch-ddp", 0, free_port(), out, "--join-timeout", "2")[3:])
    assert done.returncode == 1
    (record,) = records_in(out)
    assert record["status"] == "failed" and record["metrics"] is None
    assert record["error"].startswith("node(s) 1 never joined")


@pytest.mark.slow
@needs("torch")
def test_a_node_that_cannot_reach_node_0_says_so_and_fails(tmp_path):
    done = parbench(*node_argv("torch-ddp", 1, free_port(), tmp_path / "out",
                               "--join-timeout", "1")[3:])
    assert done.returncode == 1
    assert "node 1 could not reach node 0 at 127.0.0.1:" in done.stderr
    assert not (tmp_path / "out").exists()


def test_slurm_command_prints_a_script_bash_accepts(tmp_path):
    done = parbench("slurm", "torch-ddp", "--nodes", "2", "--gpus-per-node", "4",
                    "--steps", "100", "--out", "my runs")
    assert done.returncode == 0, done.stderr
    script = tmp_path / "job.sh"
    script.write_text(done.stdout)
    assert subprocess.run(["bash", "-n", str(script)]).returncode == 0
    (srun,) = [line for line in done.stdout.splitlines() if line.startswith("srun ")]
    assert "parbench run torch-ddp --from-slurm --master-port 29500 --devices 4 --steps 100 " \
        "--out 'my runs'" in srun
    assert "#SBATCH --nodes=2" in done.stdout and "#SBATCH --gpus-per-node=4" in done.stdout


@pytest.mark.parametrize("args, message", [
    (["--launcher", "spawn", "--nnodes", "2", "--master", "127.0.0.1:2000"],
     "torch-ddp with launcher spawn runs on one machine only"),
    (["--nnodes", "2", "--node-rank", "2", "--master", "127.0.0.1:2000"],
     "--node-rank must be in 0..1"),
    (["--nnodes", "2"], "needs --master HOST:PORT"),
    (["--nnodes", "2", "--master", "127.0.0.1"], "--master wants HOST:PORT"),
    (["--node-rank", "1"], "give --nnodes N"),
    (["--master-port", "2000"], "--master-port goes with --from-slurm"),
    (["--from-slurm", "--nnodes", "2"], "--from-slurm sets --nnodes itself"),
    (["--from-slurm"], "SLURM_NNODES is not set"),
    (["--nnodes", "2", "--master", "127.0.0.1:2000", "--isolate-network", "on"],
     "--isolate-network on cannot work for a multi-node run"),
])
def test_multi_node_usage_errors_are_one_line(tmp_path, args, message):
    done = parbench("run", "torch-ddp", *args, "--out", str(tmp_path / "out"),
                    env={"SLURM_NNODES": "", "SLURM_JOB_NUM_NODES": ""})
    assert done.returncode == 2
    (line,) = done.stderr.strip().splitlines()
    assert message in line
    assert not (tmp_path / "out").exists()


@pytest.mark.slow
@needs("torch")
def test_node_0_that_cannot_listen_at_the_master_is_one_line(tmp_path):
    done = parbench("run", "torch-ddp", "--nnodes", "2", "--master", "nosuchhost.invalid:2000",
                    *TRAINING, "--out", str(tmp_path / "out"))
    assert done.returncode == 2, done.stderr[-2000:]
    (line,) = done.stderr.strip().splitlines()
    assert "node 0 cannot listen at nosuchhost.invalid:2001" in line
    assert records_in(tmp_path / "out") == []


def test_single_process_backends_refuse_nodes(tmp_path):
    done = parbench("run", "tf-mirrored", "--nnodes", "2", "--master", "127.0.0.1:2000")
    assert done.returncode == 2 and "one process drives every device" in done.stderr


def test_compare_refuses_a_multi_node_config(tmp_path):
    config = tmp_path / "nodes.toml"
    config.write_text('nnodes = 2\nmaster = "127.0.0.1:2000"\n')
    done = parbench("compare", "torch-ddp", "--config", str(config))
    assert done.returncode == 2 and "one 'parbench run' per node" in done.stderr


# --- the pieces, in process

def test_master_addresses_parse():
    assert parse_master("node01:29500") == ("node01", 29500)
    assert parse_master("[::1]:29500") == ("::1", 29500)
    for bad in ("node01", ":29500", "node01:65535", "node01:x"):
        with pytest.raises(ValueError):
            parse_master(bad)


def test_differences_name_options_before_the_spec_hash():
    node0 = {"global_batch": 32, "lr": 0.1, "spec_sha256": "a"}
    assert differences(node0, {**node0, "global_batch": 64, "spec_sha256": "b"}, 1) == [
        "--global-batch: node 1 has 64, node 0 has 32"]
    assert differences(node0, {**node0, "spec_sha256": "b"}, 2) == [
        "spec_sha256: node 2 has 'b', node 0 has 'a'"]  # same options, different data
    assert differences(node0, dict(node0), 1) == []


@pytest.mark.parametrize("length", [0, 1, 5, 6, 7, 1000, 4097])
def test_bytes_survive_the_float64_packing(length):
    blob = np.random.default_rng(length).integers(0, 256, length, dtype=np.uint8).tobytes()
    assert unpack(pack(blob), length) == blob


class ThreadRanks:
    """Ranks as threads whose all_reduce_sum really sums across them (a barrier per call)."""

    def __init__(self, ranks: int):
        self.barrier, self.ranks = threading.Barrier(ranks), ranks
        self.parts: list[np.ndarray | None] = [None] * ranks

    def rank(self, rank: int):
        ranks = self

        class Rank:
            num_processes = ranks.ranks

            def __init__(self):
                self.rank = rank

            def all_reduce_sum(self, values: np.ndarray) -> np.ndarray:
                ranks.parts[rank] = np.array(values, dtype=float)
                ranks.barrier.wait()
                total = np.sum(ranks.parts, axis=0)
                ranks.barrier.wait()
                return total
        return Rank()


def in_threads(*calls):
    """Run the calls side by side; their results, or re-raise the first exception."""
    results, errors = [None] * len(calls), []

    def run(i, call):
        try:
            results[i] = call()
        except Exception as err:  # noqa: BLE001 - handed to the test thread
            errors.append(err)
    threads = [threading.Thread(target=run, args=(i, c)) for i, c in enumerate(calls)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    return results, errors


def test_every_rank_gets_every_ranks_bytes():
    ranks = ThreadRanks(3)
    blobs = [b"", b"x" * 13, bytes(range(256)) * 3]
    results, errors = in_threads(*[lambda r=r: all_gather_bytes(ranks.rank(r), blobs[r])
                                   for r in range(3)])
    assert errors == [] and results == [blobs] * 3


def nodes_at(port: int, rank: int, join_timeout: float = 5) -> Nodes:
    return Nodes(2, rank, "127.0.0.1", port, "lo", join_timeout)


def meet(port: int, configs: list[dict]) -> tuple[list, list]:
    return in_threads(*[lambda r=r: check_in(nodes_at(port, r), configs[r], [7000 + r])
                        for r in (0, 1)])


def test_check_in_hands_every_node_the_same_cluster():
    (node0, node1), errors = meet(free_port() - 1, [{"a": 1}, {"a": 1}])
    assert errors == []
    assert node0[1] == node1[1] == CheckIn(["127.0.0.1"] * 2, [node0[1].hosts[0]] * 2,
                                           [[7000], [7001]])
    assert node0[1].workers() == ["127.0.0.1:7000", "127.0.0.1:7001"]
    ends, errors = in_threads(lambda: node0[0].finish("ok", None, None),
                              lambda: node1[0].finish("ok", None, None))
    assert errors == [] and ends == [("ok", None), ("ok", None)]


def test_check_in_refuses_different_settings_on_both_nodes():
    _, errors = meet(free_port() - 1, [{"steps": 8}, {"steps": 9}])
    assert len(errors) == 2 and all(isinstance(e, UsageError) for e in errors)
    assert all("--steps: node 1 has 9, node 0 has 8" in str(e) for e in errors)


def test_check_in_gives_up_on_a_node_that_never_comes():
    with pytest.raises(NodeFailure, match=r"node\(s\) 1 never joined"):
        check_in(nodes_at(free_port() - 1, 0, join_timeout=0.5), {}, [])


@pytest.mark.slow
def test_node_0_notices_a_node_whose_parbench_ended_and_stops_the_others():
    (node0, node1), errors = meet(free_port() - 1, [{}, {}])
    assert errors == []
    coordinator: Link = node0[0]
    assert coordinator.watch(0) is None
    node1[0].channel.close()  # what the kernel does when node 1's parbench is killed
    problem = None
    for _ in range(100):
        problem = problem or coordinator.watch(1)
        time.sleep(0.02)
    assert problem.startswith("node 1 (") and "left the run" in problem
    status, error = coordinator.finish("failed", "rank 0 raised", None)
    assert status == "failed" and error.splitlines()[0] == problem


def test_a_failed_member_leads_the_error_when_it_failed_first():
    (node0, node1), errors = meet(free_port() - 1, [{}, {}])
    ends, errors = in_threads(lambda: node0[0].finish("failed", "rank 0 echo", 200.0),
                              lambda: node1[0].finish("failed", "rank 1 killed", 100.0))
    assert errors == []
    for status, error in ends:
        assert status == "failed"
        assert error.splitlines() == ["node 1 (" + node0[0].hosts[1] + ") failed: rank 1 killed",
                                      "node 0: rank 0 echo"]
