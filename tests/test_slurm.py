"""Slurm support without a cluster: the environment srun gives a task (its nodelist expanded by
the real scontrol, which needs only a minimal slurm.conf), the sbatch script, and the `slurm`
sub-command with the run options of 'parbench run'; no framework is needed."""

from __future__ import annotations

import os
import shlex
import stat
import subprocess

import pytest

from conftest import needs_scontrol, sub_command_output
from parbench.base.errors import UsageError
from parbench.cli.slurm import add_slurm_parser
from parbench.launch.slurm import SET_BY_SCRIPT, SlurmNode, sbatch_script, slurm_node

SRUN_PREFIX = ["srun", "--ntasks-per-node=1", "--kill-on-bad-exit=1", "parbench", "run"]


def env(nodelist: str, nnodes: int | str, node_id: int | str, **more: str) -> dict[str, str]:
    return {"SLURM_JOB_NODELIST": nodelist, "SLURM_NNODES": str(nnodes),
            "SLURM_NODEID": str(node_id), **more}


@needs_scontrol
@pytest.mark.parametrize("nodelist,hosts", [
    ("a[1-2],a1", ["a1", "a2"]),
    ("node[01-04,07]", ["node01", "node02", "node03", "node04", "node07"]),
    ("a[1-2],b3", ["a1", "a2", "b3"]),
    ("localhost", ["localhost"]),
    ("gpu-[9-11]", ["gpu-9", "gpu-10", "gpu-11"]),
    ("n[1-2,5-6],m[08-10,12]", ["n1", "n2", "n5", "n6", "m08", "m09", "m10", "m12"]),
])
def test_nodelist_expands_like_scontrol_show_hostnames(nodelist, hosts, slurm_env):
    node = slurm_node({**slurm_env, **env(nodelist, len(hosts), 0)})
    assert node.hosts == tuple(hosts)
    assert node.master_host == hosts[0]


@needs_scontrol
@pytest.mark.parametrize("node_id", [0, 1])
def test_each_node_knows_its_rank_and_the_same_master(node_id, slurm_env):
    node = slurm_node({**slurm_env, **env("node[01-04,07]", 5, node_id)})
    assert node == SlurmNode(nnodes=5, node_rank=node_id, master_host="node01",
                             hosts=("node01", "node02", "node03", "node04", "node07"))
    assert node.hosts[node.node_rank] == f"node0{node_id + 1}"


@needs_scontrol
def test_older_variable_names_are_read_when_the_current_ones_are_absent(slurm_env):
    node = slurm_node({"SLURM_JOB_NUM_NODES": "2", "SLURM_NODEID": "1",
                       "SLURM_NODELIST": "c[7-8]", **slurm_env})
    assert (node.nnodes, node.node_rank, node.master_host) == (2, 1, "c7")


@pytest.mark.parametrize("environ,line", [
    ({"SLURM_NNODES": "2", "SLURM_JOB_NODELIST": "a[1-2]"},
     "--from-slurm: SLURM_NODEID is not set: run it under srun, one task per node"),
    ({"SLURM_NODEID": "0", "SLURM_JOB_NODELIST": "a[1-2]"},
     "--from-slurm: SLURM_NNODES is not set (nor SLURM_JOB_NUM_NODES): run it under srun"),
    ({"SLURM_NNODES": "2", "SLURM_NODEID": "0"},
     "--from-slurm: SLURM_JOB_NODELIST is not set (nor SLURM_NODELIST)"),
    (env("a[1-2]", 2, "x"), "--from-slurm: SLURM_NODEID='x' is not a non-negative integer"),
    (env("a[1-2]", 2, "-1"), "SLURM_NODEID='-1' is not a non-negative integer"),
    (env("a[1-2]", "2.0", 0), "SLURM_NNODES='2.0' is not a non-negative integer"),
    (env("a[1-2]", 0, 0), "SLURM_NNODES=0 must be at least 1"),
    (env("a[1-2]", 2, 2), "--from-slurm: SLURM_NODEID=2 is out of range for SLURM_NNODES=2"),
    (env("node[1-", 2, 0), "SLURM_JOB_NODELIST='node[1-' cannot be expanded by scontrol show "
     "hostnames: it gave node]"),
    (env("n[3-1]", 2, 0), "SLURM_JOB_NODELIST='n[3-1]' cannot be expanded by scontrol show "
     "hostnames: scontrol: error: _parse_single_range: Invalid range: `3-1'"),
    (env("a[1-3]", 2, 0), "names 3 hosts but SLURM_NNODES=2"),
    (env("a[1-2]", 2, 0, SLURM_LOCALID="1"), "SLURM_LOCALID=1: more than one task on this node"),
])
@needs_scontrol
def test_every_problem_is_one_line_naming_the_variable(environ, line, slurm_env):
    with pytest.raises(UsageError) as err:
        slurm_node({**slurm_env, **environ})
    message = str(err.value)
    assert line in message and "\n" not in message and message.startswith("--from-slurm: ")


def test_without_scontrol_from_slurm_says_so_in_one_line(tmp_path):
    environ = {**env("node[1-2]", 2, 0), "PATH": str(tmp_path)}  # a PATH without scontrol
    with pytest.raises(UsageError, match=r"^--from-slurm: Slurm's scontrol is not on PATH; it "
                       r"expands SLURM_JOB_NODELIST \(install Slurm's client"):
        slurm_node(environ)


def srun_lines(script: str) -> list[list[str]]:
    return [shlex.split(line) for line in script.splitlines() if line.startswith("srun ")]


def the_run_args(script: str, backend: str, head: list[str]) -> list[str]:
    """The run options on the script's only srun line, after the part the script sets."""
    (words,) = srun_lines(script)
    assert words[:len(SRUN_PREFIX) + 1 + len(head)] == [*SRUN_PREFIX, backend, *head]
    return words[len(SRUN_PREFIX) + 1 + len(head):]


def test_gpu_script_passes_bash_n_and_its_srun_line_parses_back(tmp_path):
    run_args = ["--steps", "100", "--global-batch", "256", "--out", "my runs", "--lr=0.2"]
    script = sbatch_script("torch-ddp", run_args, nodes=2, gpus_per_node=4, master_port=29600,
                           time_limit="01:00:00", partition="gpu")
    path = tmp_path / "job.sh"
    path.write_text(script)
    checked = subprocess.run(["bash", "-n", str(path)], check=False, capture_output=True,
                             text=True)
    assert checked.returncode == 0, checked.stderr
    assert script.startswith("#!/bin/bash\n")
    for directive in ("--job-name=parbench-torch-ddp", "--nodes=2", "--ntasks-per-node=1",
                      "--gpus-per-node=4", "--time=01:00:00", "--partition=gpu", "--output="):
        assert f"\n#SBATCH {directive}" in script
    assert "set -euo pipefail" in script and "Node 0 writes the record into --out" in script
    head = ["--from-slurm", "--master-port", "29600", "--devices", "4"]
    assert the_run_args(script, "torch-ddp", head) == run_args
    assert "--out 'my runs'" in script  # one argument, quoted


def test_sbatch_options_come_before_the_first_command():
    # sbatch stops reading #SBATCH lines at the first command.
    lines = sbatch_script("tf-multiworker", [], 3, 0, 29500).splitlines()
    first_command = next(i for i, line in enumerate(lines) if line and not line.startswith("#"))
    assert max(i for i, line in enumerate(lines) if line.startswith("#SBATCH")) < first_command


def test_the_script_hands_srun_each_argument_intact(tmp_path):
    """Run the script with a stand-in srun that prints what it was given, one per line."""
    fake = tmp_path / "bin" / "srun"
    fake.parent.mkdir()
    fake.write_text("#!/bin/bash\nprintf '%s\\n' \"$@\"\n")
    fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
    run_args = ["--out", "my runs", "--model", "vit", "--devices", "3"]
    path = tmp_path / "job.sh"
    path.write_text(sbatch_script("paddle-launch", run_args, 2, 0, 1234, job_name="a$b"))
    done = subprocess.run(["bash", str(path)], check=False, capture_output=True, text=True,
                          env={**os.environ, "PATH": f"{fake.parent}:{os.environ['PATH']}"})
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [*SRUN_PREFIX[1:], "paddle-launch", "--from-slurm",
                                        "--master-port", "1234", *run_args]


def test_cpu_nodes_keep_the_devices_of_the_run_options():
    script = sbatch_script("torch-ddp", ["--devices", "3"], 2, 0, 29500)
    assert "--gpus-per-node" not in script
    assert the_run_args(script, "torch-ddp", ["--from-slurm", "--master-port", "29500"]) == \
        ["--devices", "3"]
    # without --devices, parbench run's own default applies on each node
    assert the_run_args(sbatch_script("torch-ddp", [], 2, 0, 29500), "torch-ddp",
                        ["--from-slurm", "--master-port", "29500"]) == []


@pytest.mark.parametrize("call,fragment", [
    (lambda: sbatch_script("torch-ddp", ["--devices", "2"], 2, 4, 29500),
     "--devices: with --gpus-per-node 4"),
    (lambda: sbatch_script("torch-ddp", ["--devices=2"], 2, 4, 29500), "--devices: with"),
    (lambda: sbatch_script("torch-ddp", ["--master", "h:1"], 2, 0, 29500),
     "--master: the script sets it"),
    (lambda: sbatch_script("torch-ddp", [], 0, 0, 29500), "--nodes wants 1 or more; got 0"),
    (lambda: sbatch_script("torch-ddp", [], 2, -1, 29500), "--gpus-per-node wants 0 or more"),
    (lambda: sbatch_script("torch-ddp", [], 2, 0, 0), "--master-port wants a port in 1..65534"),
    (lambda: sbatch_script("torch-ddp", [], 2, 0, 65535), "--master-port wants a port in 1..65534"),
    (lambda: sbatch_script("torch-ddp", [], 2, 0, 65536), "got 65536"),
    (lambda: sbatch_script("torch-ddp", [], 2, 0, 1, job_name="my job"), "--job-name 'my job'"),
    (lambda: sbatch_script("torch-ddp", [], 2, 0, 1, partition="a\nrm -rf x"), "--partition"),
])
def test_refusals(call, fragment):
    with pytest.raises(UsageError) as err:
        call()
    assert fragment in str(err.value) and "\n" not in str(err.value)


@pytest.mark.parametrize("option", SET_BY_SCRIPT)
def test_options_the_script_sets_are_refused_in_the_run_options(option):
    for run_args in ([option, "1"], [f"{option}=1"]):
        with pytest.raises(UsageError, match=f"^{option}: the script sets it"):
            sbatch_script("torch-ddp", run_args, 2, 0, 29500)


# --- the sub-command, with the run options of 'parbench run'


def slurm_cli(argv: list[str], capsys) -> str:
    return sub_command_output(add_slurm_parser, argv, capsys)


def test_the_sub_command_forwards_the_run_options_verbatim(capsys):
    argv = ["slurm", "torch-ddp", "--nodes", "2", "--gpus-per-node", "4", "--steps", "100",
            "--global-batch", "256", "--compile", "--out", "my runs"]
    script = slurm_cli(argv, capsys)
    head = ["--from-slurm", "--master-port", "29500", "--devices", "4"]
    assert the_run_args(script, "torch-ddp", head) == argv[6:]
    assert "#SBATCH --nodes=2\n" in script and "#SBATCH --gpus-per-node=4\n" in script


def test_slurm_options_mix_with_run_options_in_any_order(capsys):
    argv = ["slurm", "--time", "0:30:00", "--nodes", "9", "tf-multiworker", "--steps=5",
            "--nodes", "3", "--partition", "cpu", "--devices", "2", "--master-port", "4000"]
    script = slurm_cli(argv, capsys)  # --devices as in 'parbench run'
    assert "#SBATCH --nodes=3\n" in script  # given after the backend: wins
    assert "#SBATCH --time=0:30:00\n" in script and "#SBATCH --partition=cpu\n" in script
    head = ["--from-slurm", "--master-port", "4000"]
    assert the_run_args(script, "tf-multiworker", head) == ["--steps=5", "--devices", "2"]


@pytest.mark.parametrize("argv,fragment", [
    (["--nodes", "2", "--stepz", "1"], "unrecognized arguments: --stepz"),
    (["--nodes", "2", "--glob", "8"], "unrecognized arguments: --glob"),  # no abbreviations
    (["--nodes", "2", "--steps", "x"], "argument --steps: invalid int value"),
    (["--steps", "1"], "--nodes is required"),
    (["--nodes", "2", "--master", "h:1"], "--master: the script sets it"),
    (["--nodes", "2", "--gpus-per-node", "1", "--devices", "1"], "leave --devices out"),
])
def test_the_sub_command_refuses_bad_options(argv, fragment, capsys):
    # cli.main prints a UsageError on one line and exits with code 2
    with pytest.raises(UsageError) as err:
        slurm_cli(["slurm", "torch-ddp", *argv], capsys)
    assert fragment in str(err.value) and "\n" not in str(err.value)
    assert capsys.readouterr().out == ""  # no half a script


def test_an_unknown_backend_is_refused_before_anything_is_printed(capsys):
    with pytest.raises(UsageError, match="unknown backend 'torch-fast'"):
        slurm_cli(["slurm", "torch-fast", "--nodes", "2"], capsys)


def test_help_after_the_backend_is_the_sub_command_help(capsys):
    text = slurm_cli(["slurm", "torch-ddp", "--help"], capsys)
    assert "--gpus-per-node" in text and "#!/bin/bash" not in text


@needs_scontrol
def test_two_nodes_on_one_host_rehearse_a_run_on_one_machine(slurm_env):
    for rank in (0, 1):
        node = slurm_node({**slurm_env, **env("localhost", 2, rank)})
        assert (node.nnodes, node.node_rank, node.master_host) == (2, rank, "localhost")
