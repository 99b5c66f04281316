"""``parbench explain``: bad input refused in one line with nothing written; each cause switched
off by the run options it names, or said to be impossible with the backend's reason; the
printed figures computed from the variants' records; and one real ablation on torch-ddp."""

from __future__ import annotations

import json
import shutil
import statistics
from dataclasses import replace
from pathlib import Path

import pytest
from test_causes import record

from conftest import needs, parbench, records_in, shared_result
from parbench.base.devices import gpu_count
from parbench.cli.explain import Variant, baseline_config, switched_off
from parbench.cli.explain_table import explain_lines, explain_table
from parbench.launch.config import RunConfig, resolve
from parbench.results.causes import known_causes


@pytest.mark.parametrize("args,fragment", [
    (["torch-ddp"], "--devices wants a whole number of at least 2; got nothing"),
    (["torch-ddp", "--devices", "1"], "--devices wants a whole number of at least 2; got '1'"),
    (["torch-ddp", "--devices", "two"], "got 'two'"),
    (["torch-ddp", "--devices", "2", "--seeds", "2"], "--seeds wants a whole number of at "
     "least 3; got '2'"),
    (["torch-ddp", "--devices", "2", "--seeds", "3.5"], "got '3.5'"),
    (["torch-fast", "--devices", "2"], "unknown backend 'torch-fast'"),
    (["torch-single", "--devices", "2"], "torch-single runs on one device"),
    (["torch-ddp", "--devices", "10000"], "--devices 10000 but this machine has"),
    (["torch-ddp", "--devices", "2", "--repeats", "2"], "give --seeds instead of --repeats"),
    (["torch-ddp", "--devices", "2", "--global-batch", "33"], "not divisible by --devices 2"),
    (["torch-ddp", "--devices", "2", "--seed", "2147483646"], "--seed 2147483646 with --seeds 3 "
     "reaches seed 2147483648: --seed must be in"),
])
def test_bad_input_is_refused_in_one_line_and_nothing_is_written(tmp_path, args, fragment):
    out = tmp_path / "out"
    done = parbench("explain", *args, "--out", str(out), cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("parbench: error:"), done.stderr
    assert fragment in lines[0]
    assert not out.exists() and list(tmp_path.iterdir()) == []


def row(table: str, variant: str) -> list[str]:
    """The cells of a variant's row of a printed table."""
    (found,) = [line for line in table.splitlines() if line.startswith(f"| {variant} ")]
    return [cell.strip() for cell in found.strip("|").split("|")]


def cause(name: str, **changes):
    (found,) = [c for c in known_causes(record(**changes)) if c.name == name]
    return found


@pytest.mark.skipif(gpu_count() > 0, reason="torch's --sync-bn needs CUDA: here it would run")
def test_a_cause_the_backend_cannot_switch_off_says_why():
    given = RunConfig(backend="torch-ddp", devices=2, steps=4)
    variant = switched_off(given, cause("batchnorm"))
    assert variant.why_not.startswith("cannot be switched off on torch-ddp: --sync-bn is not "
                                      "available for torch-ddp: nn.SyncBatchNorm needs CUDA")
    assert switched_off(given, cause("eval-sharding")).why_not == \
        "no run option switches it off on its own"


def test_the_baseline_keeps_the_modes_that_mean_something_on_one_device():
    given = RunConfig.of(backend="torch-fsdp", devices=2, compile=True, sync_bn=True,
                         reshard_after_forward="no", global_batch=64)
    baseline = baseline_config(given)
    assert (baseline.backend, baseline.devices, baseline.launcher) == ("torch-single", 1, None)
    assert baseline.modes.changed() == {"compile": True} and baseline.global_batch == 64


@pytest.mark.parametrize("batch,lr", [({"per_device_batch": 32}, 0.001),
                                      ({"global_batch": 64}, 0.002)])
def test_the_baseline_runs_the_lr_linear_scaling_gives_one_device_unscaled(batch, lr):
    """lr x batch / 128 on one device: 0.004 x 32 / 128 with a per-device batch, x 64 / 128
    with the global batch, which one device holds whole."""
    given = RunConfig.of(backend="torch-ddp", devices=2, lr=0.004, lr_scaling="linear",
                         steps=4, **batch)
    baseline = baseline_config(given)
    assert (baseline.lr_scaling, baseline.lr) == ("none", pytest.approx(lr))
    assert resolve(baseline).optimizer.lr == resolve(replace(baseline, lr_scaling="linear",
                                                             lr=0.004)).optimizer.lr


def test_switching_off_sets_the_options_the_cause_names():
    mirrored = switched_off(RunConfig(backend="tf-mirrored", devices=2), cause("batchnorm"))
    assert mirrored.why_not is None and mirrored.config.modes.sync_bn
    grown = record(batch_mode="per-device", global_batch=64, per_device_batch=32,
                   lr_scaling="linear", lr=0.05)
    given = RunConfig(backend="torch-ddp", devices=2, per_device_batch=32, lr_scaling="linear")
    fixed = switched_off(given, [c for c in known_causes(grown) if c.name == "global-batch"][0])
    assert (fixed.config.global_batch, fixed.config.per_device_batch) == (32, None)
    plain = switched_off(given, [c for c in known_causes(grown) if c.name == "lr-scaling"][0])
    assert (plain.config.lr_scaling, plain.config.lr) == ("none", pytest.approx(0.025))
    odd = RunConfig(backend="torch-ddp", devices=2, per_device_batch=5)
    uneven = {**grown, "global_batch": 10, "per_device_batch": 5}
    refused = switched_off(odd, [c for c in known_causes(uneven) if c.name == "global-batch"][0])
    assert "--global-batch 5 is not divisible by --devices 2" in refused.why_not


def test_the_table_carries_each_causes_share_from_the_records():
    def ran(name, backend, devices, accuracies, found=None, why_not=None):
        runs = [record(backend, devices, seed, a) for seed, a in enumerate(accuracies)]
        return Variant(name, RunConfig(backend=backend, devices=devices), found, why_not, runs)

    batchnorm = cause("batchnorm", backend="tf-mirrored")
    variants = [ran("baseline", "tf-single", 1, (0.80, 0.81, 0.82)),
                ran("as given", "tf-mirrored", 2, (0.70, 0.71, 0.75)),
                ran("batchnorm off", "tf-mirrored", 2, (0.79, 0.80, 0.85), batchnorm)]
    table = explain_table(variants, "accuracy", "final_accuracy")
    # as given: 0.71 - 0.81 = -0.1; with sync BN 0.80 - 0.81 = -0.01; carried -0.09
    assert row(table, "baseline") == ["baseline", "tf-single x1", "", "3/3", "0.81", "", "0.02",
                                      ""]
    assert row(table, "as given")[3:] == ["3/3", "0.71", "-0.1", "0.05", ""]
    assert row(table, "batchnorm off")[2:] == ["--sync-bn", "3/3", "0.8", "-0.01", "0.06",
                                               "-0.09"]
    lines = explain_lines(variants, known_causes(record(backend="tf-mirrored")), "accuracy",
                          "final_accuracy")
    assert lines[0] == ("as given: accuracy change -0.1 against the baseline (baseline spread "
                        "0.02 over 3 seed(s)): beyond seed noise")
    assert lines[1].startswith("batchnorm (each of 2 replicas") and lines[1].endswith(
        "carries -0.09 of the -0.1 change: beyond seed noise")


@needs("torch")
@pytest.mark.slow
def test_a_real_ablation_on_torch_ddp(tmp_path):
    out = tmp_path / "out"
    done = parbench("explain", "torch-ddp", "--devices", "2", "--dataset", "digits",
                    "--steps", "3", "--global-batch", "32", "--out", str(out), cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    runs = records_in(out)
    by_backend = {b: [r for r in runs if r["backend"] == b] for b in ("torch-single", "torch-ddp")}
    for backend, found in by_backend.items():
        assert sorted(r["seed"] for r in found) == [0, 1, 2], backend
        assert all(r["status"] == "ok" for r in found)
    baseline = statistics.median(r["metrics"]["final_accuracy"] for r in by_backend["torch-single"])
    assert row(done.stdout, "baseline")[:5] == ["baseline", "torch-single x1", "", "3/3",
                                                f"{baseline:.4g}"]
    assert row(done.stdout, "as given")[:4] == ["as given", "torch-ddp x2", "", "3/3"]
    assert row(done.stdout, "batchnorm off")[:3] == ["batchnorm off", "torch-ddp x2", "--sync-bn"]
    if not gpu_count():  # nn.SyncBatchNorm needs CUDA: that variant is reported, not run
        assert len(runs) == 6
        assert "batchnorm (each of 2 replicas normalises its 16 rows with their own " \
            "statistics): cannot be switched off on torch-ddp" in done.stdout
    assert "absent: global-batch: --global-batch 32 is the same on 1 device" in done.stdout


# --- a real ablation whose causes are switched off and run on the CPU: --per-device-batch 16
# with --lr-scaling linear makes two (global-batch, lr-scaling), and the mlp on jax-pmap (one
# process) keeps the 12 runs cheap (42 s on 2 cores)
SWITCHED = ("jax-pmap", "--devices", "2", "--dataset", "digits", "--model", "mlp", "--steps",
            "6", "--per-device-batch", "16", "--lr-scaling", "linear")


@pytest.fixture(scope="module")
def switched_ablation(tmp_path_factory) -> tuple[str, list[dict], Path]:
    """(what explain printed, its records, their folder) of the SWITCHED ablation, run once
    per session; the folder is read-only for the tests."""
    def ablate():
        folder = tmp_path_factory.mktemp("explain-switched")
        done = parbench("explain", *SWITCHED, "--out", str(folder / "out"), cwd=folder)
        assert done.returncode == 0, done.stderr[-3000:]
        return done.stdout, records_in(folder / "out"), folder / "out"

    return shared_result(tmp_path_factory, ("explain", SWITCHED), ablate)


def variant_records(runs: list[dict]) -> dict[str, list[dict]]:
    """The records by the variant whose options they ran with."""
    def of(r: dict) -> str:
        if r["backend"] == "jax-single":
            return "baseline"
        if r["batch_mode"] == "global":
            return "global-batch off"
        return "as given" if r["lr_scaling"] == "linear" else "lr-scaling off"

    found: dict[str, list[dict]] = {}
    for r in runs:
        found.setdefault(of(r), []).append(r)
    return found


@needs("jax")
@pytest.mark.slow
def test_each_cause_switched_off_runs_with_its_options_and_is_recorded(switched_ablation):
    _, runs, _ = switched_ablation
    found = variant_records(runs)
    assert sorted(found) == ["as given", "baseline", "global-batch off", "lr-scaling off"]
    for name, records in found.items():
        assert sorted(r["seed"] for r in records) == [0, 1, 2], name
        assert all(r["status"] == "ok" for r in records), name
    given_lr = found["as given"][0]["lr"]
    for r in found["global-batch off"]:  # --global-batch 16 at 2 devices, the lr rule kept
        assert (r["backend"], r["world_size"], r["global_batch"], r["per_device_batch"]) == \
            ("jax-pmap", 2, 16, 8)
        assert r["lr_scaling"] == "linear" and r["lr"] == pytest.approx(given_lr / 2)
    for r in found["lr-scaling off"]:  # the global batch as given, the 1-device lr unscaled
        assert (r["backend"], r["world_size"], r["global_batch"]) == ("jax-pmap", 2, 32)
        assert r["lr_scaling"] == "none" and r["lr"] == pytest.approx(given_lr / 2)


@needs("jax")
@pytest.mark.slow
def test_what_a_switched_off_cause_carries_is_computed_from_its_records(switched_ablation):
    """Each row's median and change, and each cause's share (change as given - change with
    it off), from the variants' records; lr-scaling off changes the result, so its share is
    not the whole change (global-batch off computes what one device does: no change)."""
    printed, runs, _ = switched_ablation
    median = {name: statistics.median(r["metrics"]["final_accuracy"] for r in records)
              for name, records in variant_records(runs).items()}
    change = {name: value - median["baseline"] for name, value in median.items()}
    assert change["lr-scaling off"] != 0  # else its share would be the whole change
    assert row(printed, "baseline")[3:5] == ["3/3", f"{median['baseline']:.4g}"]
    assert row(printed, "as given")[3:6] == ["3/3", f"{median['as given']:.4g}",
                                             f"{change['as given']:.4g}"]
    unscaled = variant_records(runs)["lr-scaling off"][0]["lr"]
    for name, switch in (("global-batch off", "--global-batch 16"),
                         ("lr-scaling off", f"--lr-scaling none --lr {unscaled}")):
        carried = change["as given"] - change[name]
        cells = row(printed, name)
        assert cells[:6] == [name, "jax-pmap x2", switch, "3/3", f"{median[name]:.4g}",
                             f"{change[name]:.4g}"]
        assert cells[7] == f"{carried:.4g}"
        cause_name = name.removesuffix(" off")
        (line,) = [line for line in printed.splitlines() if line.startswith(f"{cause_name} (")]
        assert f"carries {carried:+.4g} of the {change['as given']:+.4g} change" in line


@needs("jax")
@pytest.mark.slow
def test_resume_runs_only_what_is_missing_and_prints_the_same_ablation(switched_ablation,
                                                                      tmp_path):
    """A stopped ablation (one record missing, one failed) goes on: --resume runs those two
    again, takes the other ten from --out, and prints the table the whole run printed."""
    printed, runs, folder = switched_ablation
    out = tmp_path / "out"
    shutil.copytree(folder, out)
    names = sorted(p.name for p in out.glob("*.json"))
    (out / names[0]).unlink()
    failed = json.loads((out / names[1]).read_text())
    (out / names[1]).write_text(json.dumps({**failed, "status": "failed"}))
    done = parbench("explain", *SWITCHED, "--resume", "--out", str(out), cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stderr.count(": kept, its ok record is in") == len(runs) - 2
    assert done.stderr.count(": running") == 2
    assert sorted(p.name for p in out.glob("*.json")) == names
    assert all(r["status"] == "ok" for r in records_in(out))
    table = [line for line in done.stdout.splitlines() if line.startswith("|")]
    assert table == [line for line in printed.splitlines() if line.startswith("|")]
