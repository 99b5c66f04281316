"""Run modes, framework-free: what config refuses before anything starts (one line, exit 2, no
record), the check that fails a run whose mode did not take effect, the classification scores
against a hand computation, and the report's treatment of modes (one row per mode, the right
1-device reference, mode columns, the confusion-matrix figure) on hand-made schema-3 records."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from test_report import by_row, markdown_tables, record

from conftest import parbench
from parbench.base.devices import gpu_count
from parbench.contract.tasks import confusion_matrix, macro_scores
from parbench.results.records import check_record
from parbench.run.modes import COMPUTE_DTYPES, Modes, Observed, check_observed


@pytest.mark.parametrize("args,message", [
    (("paddle-single", "--precision", "bf16"),
     "--precision bf16 is not available for paddle-single: Paddle AMP has no effect on CPU"),
    (("torch-ddp", "--sync-bn"), "--sync-bn is not available for torch-ddp: nn.SyncBatchNorm "
     "needs CUDA"),
    (("paddle-spawn", "--sync-bn"), "--sync-bn is not available for paddle-spawn"),
    (("tf-single", "--sync-bn"), "--sync-bn needs several devices: one device has no other "
     "BatchNorm statistics"),
    (("tf-mirrored", "--devices", "1", "--sync-bn"), "--sync-bn needs several devices"),
    (("tf-mirrored", "--sync-bn", "--model", "mlp"), "--sync-bn needs a model with BatchNorm"),
    (("tf-mirrored-keras", "--grad-accum", "2"), "--grad-accum 2 is not available for "
     "tf-mirrored-keras: Keras fit"),
    (("torch-single", "--grad-accum", "3"), "--grad-accum 3 does not divide the per-device "
     "batch 128"),
    (("torch-single", "--grad-accum", "0"), "--grad-accum must be at least 1, got 0"),
    (("torch-single", "--precision", "bf16", "--profile"), "--profile splits the fp32 eager "
     "step into phases; it cannot be combined with --precision"),
    (("torch-single", "--precision", "fp8"), "argument --precision: invalid choice: 'fp8'"),
    (("tf-mirrored", "--sync-bn", "--compile"), "--sync-bn with --compile is not available for "
     "tf-mirrored without GPUs"),
])
def test_a_mode_a_backend_cannot_run_is_refused_before_anything_starts(tmp_path, args, message):
    if gpu_count() and ("paddle" in args[0] or args[0] == "torch-ddp"
                        or args[1:] == ("--sync-bn", "--compile")):
        pytest.skip("with GPUs Paddle AMP, SyncBatchNorm and TF's sync BN under XLA can run")
    out = tmp_path / "runs"
    done = parbench("run", *args, "--steps", "2", "--out", str(out), timeout=60)
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert message in lines[-1], done.stderr
    assert len([line for line in lines if "error" in line]) == 1
    assert not out.exists() or not list(out.iterdir())


def test_the_check_fails_a_run_whose_mode_did_not_take_effect():
    check_observed(Modes(precision="bf16", compile=True, grad_accum=2),
                   Observed("bfloat16", compiled_graphs=3, micro_batches=2))
    with pytest.raises(RuntimeError, match="--precision bf16 expects bfloat16 activations, "
                                           "the first layer computed in float32"):
        check_observed(Modes(precision="bf16"), Observed("float32"))
    with pytest.raises(RuntimeError, match="--compile compiled no graph"):
        check_observed(Modes(compile=True), Observed("float32", compiled_graphs=0))
    with pytest.raises(RuntimeError, match="--sync-bn converted no BatchNorm layer"):
        check_observed(Modes(sync_bn=True), Observed("float32", sync_bn_layers=0))
    with pytest.raises(RuntimeError, match="--grad-accum 4 ran 1 micro-batch"):
        check_observed(Modes(grad_accum=4), Observed("float32"))


def test_macro_scores_match_a_hand_computation():
    labels = np.array([0, 0, 0, 1, 1, 2, 2, 2, 2, 3])
    predicted = np.array([0, 0, 1, 1, 2, 2, 2, 2, 0, 0])
    counts = confusion_matrix(labels, predicted, 4)
    assert counts.tolist() == [[2, 1, 0, 0], [0, 1, 1, 0], [1, 0, 3, 0], [1, 0, 0, 0]]
    # precision per class: 2/4, 1/2, 3/4, 0 (never predicted); recall: 2/3, 1/2, 3/4, 0/1
    precision = [0.5, 0.5, 0.75, 0.0]
    recall = [2 / 3, 0.5, 0.75, 0.0]
    f1 = [2 * p * r / (p + r) if p + r else 0.0 for p, r in zip(precision, recall)]
    assert macro_scores(counts) == pytest.approx({
        "precision_macro": np.mean(precision), "recall_macro": np.mean(recall),
        "f1_macro": np.mean(f1)})


def v3(base: dict, modes: Modes = Modes(), confusion: list[list[int]] | None = None) -> dict:
    """A schema-3 record from a test_report record: modes, variant, observed modes, scores."""
    rec = {**base, "schema_version": 3, "modes": modes.as_dict(),
           "variant": {"threads": 1, "nnodes": 1, **({"modes": modes.changed()}
                                                     if modes.changed() else {})}}
    rec["env"] = {**rec["env"], "network_isolated": True, "load_1m_start": 0.1,
                  "load_1m_end": 0.1, "other_cpu_s": 0.0}
    if rec["metrics"] is not None:
        counts = np.asarray(confusion or [[5, 0], [0, 5]])
        rec["metrics"] = {**rec["metrics"], **macro_scores(counts),
                          "confusion_matrix": counts.tolist(),
                          "compute_dtype": COMPUTE_DTYPES[modes.precision],
                          "compiled_graphs": 2 if modes.compile else None,
                          "sync_bn_layers": 0, "micro_batches": modes.grad_accum}
    assert check_record(rec) == [], check_record(rec)
    return rec


BF16 = Modes(precision="bf16")
RECORDS = [
    v3(record("torch-single", "torch", 1, 0, 100.0), confusion=[[4, 1], [2, 3]]),
    v3(record("torch-single", "torch", 1, 0, 160.0), BF16),
    v3(record("torch-ddp", "torch", 2, 0, 180.0, launcher="torchrun")),
    v3(record("torch-ddp", "torch", 2, 0, 240.0, launcher="torchrun"), BF16),
    v3(record("torch-ddp", "torch", 2, 0, 150.0, launcher="torchrun"),
       Modes(grad_accum=2)),
]


@pytest.fixture(scope="module")
def mode_runs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("mode-runs")
    for i, rec in enumerate(RECORDS):
        (folder / f"{i}.json").write_text(json.dumps(rec))
    return folder


def test_schema_3_needs_modes_and_the_scores():
    rec = RECORDS[0]
    assert any("modes" in p for p in check_record({k: v for k, v in rec.items()
                                                   if k != "modes"}))
    metrics = {k: v for k, v in rec["metrics"].items() if k != "confusion_matrix"}
    assert any("confusion_matrix" in p for p in check_record({**rec, "metrics": metrics}))


def test_each_mode_has_its_own_row_and_its_own_1_device_reference(mode_runs):
    done = parbench("report", str(mode_runs), timeout=120)
    assert done.returncode == 0, done.stderr
    tables = markdown_tables(done.stdout)
    performance = next(rows for (_, caption), rows in tables.items()
                       if caption == "Performance")
    rows = {(r["backend"], r["devices"], r["precision"], r["grad accum"]): r
            for r in performance}
    assert len(rows) == len(RECORDS)  # no two modes in one row
    # fp32: 180 / (2 x 100); bf16: 240 / (2 x 160); accum 2 has no 1-device reference
    assert rows[("torch-ddp", "2", "fp32", "1")]["scaling eff."] == "0.9"
    assert rows[("torch-ddp", "2", "bf16", "1")]["scaling eff."] == "0.75"
    assert rows[("torch-ddp", "2", "fp32", "2")]["scaling eff."] == "-"
    assert "compile" not in performance[0] and "sync BN" not in performance[0]
    assert "Every row: compile no, sync BN no." in done.stdout
    headline = next(rows for (section, _), rows in tables.items() if section == "Headline")
    assert [(r["devices"], r["precision"], r["grad accum"], r["approach"]) for r in headline] == [
        ("1", "fp32", "1", "torch-single"), ("1", "bf16", "1", "torch-single bf16"),
        ("2", "fp32", "1", "torch-ddp [torchrun]"),
        ("2", "bf16", "1", "torch-ddp [torchrun] bf16"),
        ("2", "fp32", "2", "torch-ddp [torchrun] fp32+accum2")]


@pytest.mark.slow
def test_the_quality_table_has_the_macro_scores_and_the_page_the_confusion_figure(
        mode_runs, tmp_path):
    done = parbench("report", str(mode_runs), timeout=120)
    quality = next(rows for (_, caption), rows in markdown_tables(done.stdout).items()
                   if caption == "Accuracy and memory")
    first = by_row([r for r in quality if r["precision"] == "fp32"
                    and r["grad accum"] == "1"])[("torch-single", "1")]
    # [[4, 1], [2, 3]]: precision 4/6 and 3/4, recall 4/5 and 3/5
    assert first["Precision macro"] == "0.7083"
    assert first["Recall macro"] == "0.7"
    html = tmp_path / "report.html"
    done = parbench("report", str(mode_runs), "--format", "html", "--output", str(html),
                    timeout=120)
    assert done.returncode == 0, done.stderr
    page = html.read_text()
    assert "<figcaption>Confusion matrix of the final evaluation" in page
    assert (tmp_path / "report-aaaaaaaaaa-confusion.png").is_file()


def test_gpu_acceptance_finds_what_a_gpu_record_gets_wrong_and_runs_nothing_without_gpus():
    sys.path.insert(0, str(Path(__file__).parents[1] / "benchmarks"))
    from gpu_acceptance import problems

    good = v3(record("torch-dp", "torch", 2, 0, 100.0, device_mb=[900.0, 300.0]), BF16)
    good["env"]["process_group"] = "nccl"
    good["env"]["gpus"] = ["0", "1"]
    assert problems(good, ["--precision", "bf16"]) == []
    bad = json.loads(json.dumps(good))
    bad["metrics"].update(compute_dtype="float32", peak_device_mb=[300.0, 900.0])
    bad["env"].update(process_group="gloo", gpus=["0", "0"])
    assert problems(bad, ["--precision", "bf16", "--compile"]) == [
        "computed in float32, asked bf16", "compiled no graph",
        "collectives not on NCCL (gloo None None)",
        "2 devices on GPUs ['0', '0']: not one GPU each",
        "DataParallel device 0 holds no more memory than device 1: [300.0, 900.0]"]
    sharded = json.loads(json.dumps(good))
    sharded.update(backend="torch-fsdp")
    sharded["metrics"]["state_bytes"] = [{"parameters": 50, "gradients": 50, "optimizer": 100}] * 2
    assert problems(sharded, ["--precision", "bf16"]) == []
    sharded["metrics"]["state_bytes"][1] = {"parameters": 100, "gradients": 100, "optimizer": 200}
    assert problems(sharded, ["--precision", "bf16"]) == [
        "optimizer state per rank [100, 200]: not sharded over 2 ranks"]
    if gpu_count():
        return  # the no-GPU branch below is this machine's only when it has none
    script = Path(__file__).parents[1] / "benchmarks" / "gpu_acceptance.sh"
    path = f"{Path(sys.executable).parent}:{os.environ['PATH']}"  # the script's python: ours
    done = subprocess.run([str(script)], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PATH": path})
    assert done.returncode == 0, done.stderr
    assert "no NVIDIA GPU here; nothing was run" in done.stdout
