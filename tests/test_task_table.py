"""Tasks and options as tables, proven end to end as modes are (test_mode_table_torch.py).

A task is one ``Task`` subclass registered in parbench.contract.tasks.TASKS (its datasets,
models, options, loss description, evaluation and quality figures) plus its loss and
evaluation outputs in a framework's ``tasks.py``; an option is one ``Option`` entry of its
owner. Here a test adds both in one file of its own, a sitecustomize module on PYTHONPATH, so
they exist in every process of a run (the command, the launcher, the worker), and follows them
through the parsers, a config file, the bounds, compare's key of shared inputs, a torch run,
its record, ``parbench check`` and the report, with nothing else in parbench changed. Each named
model belongs to exactly one task: a model no task lists is refused, never given to one."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import needs, parbench, records_in
from parbench.contract.spec import MODELS
from parbench.contract.tasks import TASKS, ImageClassification, model_problems

DUMMY_TASK = '''
import importlib.abc
import importlib.util
import sys
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from parbench.base.options import Bounds, Option
from parbench.contract import spec, tasks
from parbench.contract.data import Dataset


@dataclass(frozen=True)
class SignTask(tasks.Task):
    """Whether a noisy 4x4 pattern's mean is positive: two classes, scored by its error rate."""

    name: ClassVar[str] = "dummy-sign"
    datasets: ClassVar[tuple] = ("dummy-patterns",)
    data_kind: ClassVar[str] = "dummy datasets"
    models: ClassVar[tuple] = ("dummy-mlp",)
    options: ClassVar[tuple] = (
        Option("dummy_spread", float, help="the dummy patterns' noise (0.5)",
               owner="task dummy-sign", bounds=Bounds(0, 5, low_open=True), inputs=True),)
    inputs: ClassVar[str] = "patterns, float32 [rows, 1, 4, 4]"
    labels: ClassVar[str] = "1 where the pattern's mean is positive, int64"
    loss: ClassVar[str] = "softmax cross-entropy over the two classes, mean over rows"
    unit: ClassVar[str] = "patterns"
    per_device_throughput: ClassVar[bool] = False
    quality: ClassVar[tuple] = (
        tasks.Quality("error rate", "error_rate", "fraction", "lower", judged=True),
        tasks.Quality("loss", "final_loss", "nats per row", "lower"))
    quality_note: ClassVar[str] = "error rate: the share of test patterns classified wrong."
    record_fields: ClassVar[tuple] = ("error_rate",)
    record_since: ClassVar[int] = 10
    probe_input: ClassVar[tuple] = (1, 4, 4)
    final_fields: ClassVar[tuple] = ("error_rate",)
    curve_fields: ClassVar[tuple] = ("error_rate",)
    default_dataset: ClassVar[str] = "dummy-patterns"
    default_optimizer: ClassVar[str] = "sgd"
    curve_metric: ClassVar[tuple] = ("error_rate", "test error rate")
    curve_by_items: ClassVar[bool] = False

    @classmethod
    def load(cls, dataset, data_dir, options):
        spread = 0.5 if options["dummy_spread"] is None else options["dummy_spread"]
        rng = np.random.default_rng(0)
        x = rng.normal(0, spread, (640, 1, 4, 4)).astype(np.float32)
        x += rng.choice([-0.3, 0.3], (640, 1, 1, 1)).astype(np.float32)
        y = (x.mean(axis=(1, 2, 3)) > 0).astype(np.int64)
        return Dataset(dataset, x[:512], y[:512], x[512:], y[512:], {"classes": 2})

    @classmethod
    def from_data(cls, dataset):
        return cls(dataset.holds["classes"])

    def probe_batch(self, rows, rng):
        return rng.normal(0, 1, (rows, *self.probe_input)).astype(np.float32)

    def eval_counts(self, labels, outputs, loss_sum):
        wrong = np.count_nonzero(np.asarray(labels) != np.asarray(outputs))
        return np.array([wrong, len(labels), loss_sum], np.float64)

    def eval_scores(self, totals):
        wrong, rows, loss_sum = totals
        return {"accuracy": 1 - wrong / rows, "loss": loss_sum / rows, "count": int(rows),
                "error_rate": wrong / rows}


tasks.TASKS[SignTask.name] = SignTask
spec.MODELS["dummy-mlp"] = lambda shape, classes: spec.MLPSpec(shape, classes, hidden=(8,))


class SignLoss:
    """Its loss and evaluation outputs in torch (torch is imported in the worker only)."""

    def mean_loss(self, outputs, labels):
        import torch.nn.functional as F
        return F.cross_entropy(outputs, labels)

    def evaluation(self, outputs, labels):
        import torch.nn.functional as F
        return outputs.argmax(1).cpu().numpy(), F.cross_entropy(outputs, labels,
                                                                reduction="sum").item()


class RegisterLoss(importlib.abc.MetaPathFinder):
    """Adds SignLoss to torch's task losses when a worker imports them, so no other process
    imports torch because of this file."""

    def find_spec(self, name, path, target=None):
        if name != "parbench.frameworks.torch.tasks":
            return None
        sys.meta_path.remove(self)
        found = importlib.util.find_spec(name)
        run = found.loader.exec_module

        def exec_module(module):
            run(module)
            module.TASK_LOSSES[SignTask.name] = SignLoss
        found.loader.exec_module = exec_module
        return found


sys.meta_path.insert(0, RegisterLoss())
'''

OPTION_PROBE = '''
import contextlib, io, json, sys
from dataclasses import replace
from parbench.cli.main import main
from parbench.launch.config import resolve
from parbench.launch.options import OPTIONS, RunConfig

def refusal(*argv):
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        code = main(list(argv))
    return code, err.getvalue().strip().splitlines()[-1]

def help_of(command):
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.suppress(SystemExit):
        main([command, "--help"])
    return out.getvalue()

base = RunConfig(model="dummy-mlp")
run = ("run", "torch-single", "--model", "dummy-mlp", "--out", sys.argv[1])
print(json.dumps({
    "flags": [command for command in ("run", "compare", "explain")
              if "--dummy-spread" in help_of(command)],
    # --dataset's help names the task's datasets: it is written from the task table
    "named": "dummy datasets (--model dummy-mlp): dummy-patterns (its default)"
             in " ".join(help_of("run").split()),
    "field": "dummy_spread" in RunConfig.__dataclass_fields__,
    "owner": OPTIONS["dummy_spread"].owner,
    "key_moves": base.inputs_key() != replace(base, dummy_spread=0.25).inputs_key(),
    "steps": resolve(replace(base, steps=3, dummy_spread=0.25)).total_steps,
    "refused": [refusal(*run, "--dummy-spread", "9"), refusal(*run, "--dummy-spread", "nan"),
                refusal(*run, "--model", "resnet", "--dummy-spread", "1"),
                refusal(*run, "--config", sys.argv[2])]}))
'''


# A model added to spec.MODELS before any task has been built, as a new task's model would be
# added in spec.py itself, with no task listing it.
ORPHAN_MODEL = """
from parbench.contract import spec
spec.MODELS["orphan-mlp"] = spec.MODELS["mlp"]
import parbench.contract.tasks
"""


def test_every_named_model_belongs_to_exactly_one_task():
    owners = {model: [t.name for t in TASKS.values() if model in t.models] for model in MODELS}
    assert {model: len(names) for model, names in owners.items()} == dict.fromkeys(MODELS, 1)
    assert {m for task in TASKS.values() for m in task.models} == set(MODELS)


def test_a_model_no_task_lists_is_refused_at_import_not_given_to_a_task():
    done = subprocess.run([sys.executable, "-c", ORPHAN_MODEL], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 1, done.stdout  # not image classification's by default
    assert ("ValueError: model 'orphan-mlp' (parbench.contract.spec MODELS) belongs to no "
            "task") in done.stderr.splitlines()[-1]


def test_a_model_of_two_tasks_or_a_task_model_not_named_is_a_problem():
    class Twin(ImageClassification):
        name = "twin"
        models = ("mlp", "unnamed")

    assert model_problems(MODELS, (*TASKS.values(), Twin)) == [
        "model 'mlp' belongs to several tasks (image-classification, twin): list it in one",
        "task twin lists model 'unnamed', which parbench.contract.spec MODELS lacks"]


def with_dummy_task(folder: Path) -> dict[str, str]:
    (folder / "sitecustomize.py").write_text(DUMMY_TASK)
    path = os.pathsep.join(p for p in (str(folder), os.environ.get("PYTHONPATH")) if p)
    return {"PYTHONPATH": path}


def test_an_option_declared_by_its_owner_reaches_every_parser_file_bound_and_key(tmp_path):
    env = with_dummy_task(tmp_path)
    out, config = tmp_path / "out", tmp_path / "bad.toml"
    config.write_text('dummy_spread = "wide"\n')
    probe = subprocess.run([sys.executable, "-c", OPTION_PROBE, str(out), str(config)],
                           capture_output=True, text=True, env={**os.environ, **env},
                           timeout=120)
    assert probe.returncode == 0, probe.stderr[-2000:]
    found = json.loads(probe.stdout)
    assert found.pop("refused") == [
        [2, "parbench: error: --dummy-spread must be in (0, 5], got 9.0"],
        [2, "parbench: error: --dummy-spread must be a finite number, got nan"],
        [2, "parbench: error: --dummy-spread is an option of the dummy datasets "
            "(dummy-patterns), not of --dataset synthetic"],
        [2, f"parbench: error: config file {config}: dummy_spread must be float or int, got "
            "'wide'"]]
    assert found == {"flags": ["run", "compare", "explain"], "named": True, "field": True,
                     "owner": "task dummy-sign", "key_moves": True, "steps": 3}
    assert not out.exists()  # nothing written for bad input
    assert "--dummy-spread" not in parbench("run", "--help").stdout  # the table is the source


@pytest.mark.slow
@needs("torch")
def test_a_task_added_in_one_file_runs_end_to_end_through_record_check_and_report(tmp_path):
    env = with_dummy_task(tmp_path)
    (tmp_path / "config.toml").write_text("dummy_spread = 0.25\n")
    out = tmp_path / "out"
    done = parbench("run", "torch-single", "--config", str(tmp_path / "config.toml"),
                    "--model", "dummy-mlp", "--steps", "16", "--global-batch", "32", "--lr",
                    "0.05", "--out", str(out), env=env, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    (record,) = records_in(out)
    assert record["status"] == "ok", record["error"]
    assert record["task"] == "dummy-sign" and record["dataset"] == "dummy-patterns"
    assert record["config"]["dummy_spread"] == 0.25
    metrics = record["metrics"]
    # its own figure, from its own counts, consistent with the accuracy every task reports
    assert metrics["error_rate"] == pytest.approx(1 - metrics["final_accuracy"])
    assert 0 <= metrics["error_rate"] < 0.5  # it learnt something in 16 steps
    assert [e["error_rate"] for e in metrics["accuracy_curve"]][-1] == metrics["error_rate"]
    assert metrics["throughput"] > 0 and metrics["items_per_step"] == 32
    check = parbench("check", str(out), env=env)  # the schema takes the task and its rules
    assert check.returncode == 0, check.stdout
    report = parbench("report", str(out), env=env)
    assert report.returncode == 0, report.stderr[-2000:]
    assert "error rate" in report.stdout and "patterns/s" in report.stdout
    assert "error rate: the share of test patterns classified wrong." in report.stdout
    del record["metrics"]["error_rate"]  # the task's rule: its records carry its figure
    (tmp_path / "stripped").mkdir()
    (tmp_path / "stripped" / "r.json").write_text(json.dumps(record))
    stripped = parbench("check", str(tmp_path / "stripped"), env=env)
    assert stripped.returncode == 1 and "error_rate" in stripped.stdout
    unknown = parbench("check", str(out))  # a parbench without the task cannot read it
    assert unknown.returncode == 1 and "dummy-sign" in unknown.stdout
