"""torch-fsdp (FSDP2) against torch-ddp, each run in its own processes: the same training (loss
curve, final weights exported from the gathered shards, clipped steps) for every model family,
the state each rank holds and what a step's collectives carry, --reshard-after-forward and
--precision through FSDP's policy taking effect, and the flag refused where it means nothing.
Against one device: tests/test_gpt.py trains every parallel backend of the registry, these too
(the same runs: the trajectory fixture trains each configuration once per session)."""

from __future__ import annotations

import pytest

from conftest import parbench, run_digits
from parbench.cli.parity import STRATEGY_TOLERANCE, compare_runs

FAMILIES = ("resnet", "vit", "gpt")  # resnet: the no-norm CNN on SGD; vit, gpt: AdamW, clipping


def total(state: dict) -> int:
    return state["parameters"] + state["gradients"] + state["optimizer"]


@pytest.mark.slow
@pytest.mark.parametrize("family", FAMILIES)
def test_sharded_training_equals_replicated(trajectory, family):
    replicated = trajectory("torch-ddp", devices=2, family=family, launcher="torchrun")
    sharded = trajectory("torch-fsdp", devices=2, family=family, launcher="torchrun")
    checks = compare_runs(f"torch-fsdp vs torch-ddp ({family})", replicated, sharded,
                          STRATEGY_TOLERANCE)
    assert all(check.ok for check in checks), checks


@pytest.mark.slow
@pytest.mark.parametrize("family", ("vit", "gpt"))
def test_each_rank_holds_about_half_the_state_of_a_replica(trajectory, family):
    replica = trajectory("torch-ddp", devices=2, family=family, launcher="torchrun")[0]["metrics"]
    shards = trajectory("torch-fsdp", devices=2, family=family, launcher="torchrun")[0]["metrics"]
    whole = replica["state_bytes"][0]
    assert replica["state_bytes"][1] == whole  # DDP: the same copy on each rank
    # AdamW: two moments per parameter, and a gradient for each, kept until the next step
    assert whole["gradients"] == whole["parameters"]
    assert whole["optimizer"] >= 2 * whole["parameters"]
    assert max(total(rank) for rank in shards["state_bytes"]) <= 0.55 * total(whole)
    # the shards together are the whole tensors, no more than FSDP's padding beyond them
    held = sum(rank["parameters"] for rank in shards["state_bytes"])
    assert whole["parameters"] <= held <= 1.02 * whole["parameters"]
    # DDP all-reduces every gradient once; FSDP (resharding after forward) gathers the
    # (padded) parameters twice, for the forward and again for the backward, and
    # reduce-scatters the gradients once
    assert replica["communication"]["bytes"] == {"all-reduce": whole["gradients"]}
    moved = shards["communication"]["bytes"]
    assert moved["all-gather"] == 2 * moved["reduce-scatter"]
    assert whole["parameters"] <= moved["reduce-scatter"] <= 1.1 * whole["parameters"]


@pytest.mark.slow  # 10 s: the fast lane holds its 2 minutes
def test_keeping_the_gathered_parameters_gathers_once(tmp_path):
    kept = run_digits(tmp_path, "torch-fsdp", "--devices", "2", "--model", "mlp",
                      "--reshard-after-forward", "no")
    assert kept["modes"]["reshard_after_forward"] == "no"
    moved = kept["metrics"]["communication"]["bytes"]
    assert moved["all-gather"] == moved["reduce-scatter"] > 0


@pytest.mark.slow
def test_bf16_is_fsdps_policy_and_halves_the_gathers(tmp_path_factory):
    fp32, bf16 = (run_digits(tmp_path_factory.mktemp(precision), "torch-fsdp", "--devices", "2",
                             "--model", "mlp", "--precision", precision)
                  for precision in ("fp32", "bf16"))
    assert bf16["metrics"]["compute_dtype"] == "bfloat16"
    gathered = [r["metrics"]["communication"]["bytes"] for r in (fp32, bf16)]
    assert gathered[1]["all-gather"] * 2 == gathered[0]["all-gather"]
    # gradients are reduced in float32 either way
    assert gathered[1]["reduce-scatter"] == gathered[0]["reduce-scatter"]


@pytest.mark.slow
def test_compiled_sharded_training_follows_eager(tmp_path, trajectory):
    eager = trajectory("torch-fsdp", devices=2)
    compiled = trajectory("torch-fsdp", devices=2, compile=True)
    assert compiled[0]["metrics"]["compiled_graphs"] > 0
    assert compiled[0]["metrics"]["communication"]["bytes"] is None  # said why, not guessed
    checks = compare_runs("torch-fsdp compiled vs eager", eager, compiled, STRATEGY_TOLERANCE)
    assert all(check.ok for check in checks), checks


@pytest.mark.parametrize("backend,devices", [("torch-ddp", "2"), ("torch-single", "1")])
def test_the_reshard_flag_is_refused_where_it_means_nothing(tmp_path, backend, devices):
    done = parbench("run", backend, "--devices", devices, "--reshard-after-forward", "no",
                    "--out", str(tmp_path / "out"))
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        f"parbench: error: --reshard-after-forward no is not available for {backend}: only a "
        "sharded backend that lets you choose when parameters are freed has it (torch-fsdp, "
        "paddle-sharding)"]
    assert not (tmp_path / "out").exists()
