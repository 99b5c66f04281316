"""The evaluation each record reports is the model's, scored independently: from the run's
final weights, torch's forward (parity's forward.py, one process, the whole test set) gives a
prediction per row; the confusion matrix, accuracy and macro scores computed from those here,
by oracles written from the definitions, must be the record's. Two devices each: every
strategy's ranks or replicas score their parts of the test set and the counts are summed, so a
row scored twice, a part left out or a prediction taken from the wrong rows shows. The mlp has
no BatchNorm, so every rank's copy of the model is the exported one."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from conftest import needs, parbench, records_in
from parbench.contract.data import load_dataset
from parbench.contract.spec import build_spec, spec_dict

DATASET = load_dataset("digits")


def confusion_by_counting(labels: list[int], predicted: list[int], classes: int) -> list[list]:
    """counts[true][predicted], one row at a time: an oracle written apart from parbench's."""
    counts = [[0] * classes for _ in range(classes)]
    for true, guess in zip(labels, predicted):
        counts[true][guess] += 1
    return counts


def macro_by_definition(labels: list[int], predicted: list[int],
                        classes: int) -> tuple[float, float, float]:
    """Macro precision, recall and F1 from their definitions, one class at a time, 0 where a
    denominator is 0: scikit-learn's precision_recall_fscore_support(average="macro",
    zero_division=0), which it matched on random labels and predictions (checked with
    scikit-learn 1.9.1 when parbench stopped depending on it)."""
    precision, recall, f1 = [], [], []
    for c in range(classes):
        hits = sum(1 for true, guess in zip(labels, predicted) if true == guess == c)
        guessed, present = predicted.count(c), labels.count(c)
        p = hits / guessed if guessed else 0.0
        r = hits / present if present else 0.0
        precision.append(p)
        recall.append(r)
        f1.append(2 * p * r / (p + r) if p + r else 0.0)
    return sum(precision) / classes, sum(recall) / classes, sum(f1) / classes


def torch_predictions(model: str, weights: Path, folder: Path) -> np.ndarray:
    """The predicted class of every test row, by torch's forward from ``weights``."""
    spec = build_spec(model, DATASET.input_shape, DATASET.holds["classes"])
    np.savez(folder / "inputs.npz", x=np.asarray(DATASET.x_test))
    request = {"model": spec_dict(spec), "mode": "eval", "weights": str(weights),
               "inputs": str(folder / "inputs.npz"), "output": str(folder / "output.npz")}
    (folder / "request.json").write_text(json.dumps(request))
    done = subprocess.run([sys.executable, "-m", "parbench.frameworks.torch.forward",
                           str(folder / "request.json")], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return np.load(folder / "output.npz")["logits"].argmax(1)


@needs("torch")
@pytest.mark.parametrize("backend", [  # all in the slow lane: 9 s each, the fast one is full
    pytest.param("torch-ddp", marks=pytest.mark.slow),
    pytest.param("tf-mirrored", marks=[needs("tensorflow"), pytest.mark.slow]),
    pytest.param("paddle-launch", marks=[needs("paddle"), pytest.mark.slow]),
    pytest.param("jax-pmap", marks=[needs("jax"), pytest.mark.slow]),
])
def test_the_record_scores_the_final_models_predictions(tmp_path, backend):
    weights, out = tmp_path / "final.npz", tmp_path / "out"
    done = parbench("run", backend, "--devices", "2", "--dataset", "digits", "--model", "mlp",
                    "--steps", "6", "--global-batch", "32", "--save-weights", str(weights),
                    "--out", str(out), cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    (record,) = records_in(out)
    metrics, labels = record["metrics"], np.asarray(DATASET.y_test)
    predicted = torch_predictions("mlp", weights, tmp_path)
    assert len(set(predicted)) > 1  # a model that predicts one class would make this vacuous
    rows, guesses = labels.tolist(), predicted.tolist()
    assert metrics["confusion_matrix"] == confusion_by_counting(rows, guesses, 10)
    assert metrics["final_accuracy"] == pytest.approx(float(np.mean(predicted == labels)))
    assert (metrics["precision_macro"], metrics["recall_macro"], metrics["f1_macro"]) == \
        pytest.approx(macro_by_definition(rows, guesses, 10))
