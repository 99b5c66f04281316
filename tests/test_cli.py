"""Bad input: one clear line, exit code 2, and no record written (end to end through the CLI,
and each value check in-process, where resolve imports no framework). Plus list and check."""

from __future__ import annotations

import importlib.util
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import parbench, write_cifar
from parbench.base.devices import gpu_count
from parbench.base.errors import UsageError
from parbench.cli.compare import sweep_configs
from parbench.cli.main import build_parser, report_format
from parbench.cli.parity import FAMILIES
from parbench.cli.run_command import config_from_args
from parbench.launch.config import RunConfig, resolve
from parbench.launch.options import read_config_file
from parbench.run.registry import BACKENDS, FRAMEWORKS


def assert_refused(result, out, fragment):
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("parbench: error:"), result.stderr
    assert fragment in lines[0]
    assert not out.exists() or not any(out.iterdir())


@pytest.mark.parametrize("args,fragment", [
    (["torch-fast"], "unknown backend 'torch-fast'"),
    (["torch-ddp", "--devices", "0"], "--devices must be at least 1"),
    (["torch-ddp", "--devices", "10000"], "--devices 10000 but this machine has"),
    (["torch-ddp", "--devices", "2", "--global-batch", "33"], "not divisible by --devices 2"),
    (["torch-single", "--dataset", "cifar10", "--data-dir", "/nonexistent/cifar"],
     "/nonexistent/cifar does not exist"),
    (["torch-single", "--dataset", "mnist"], "needs --data-dir"),
    pytest.param(["torch-dp", "--devices", "2"], "CUDA devices (none found",
                 marks=pytest.mark.skipif(gpu_count() > 0, reason="this machine has a GPU")),
    (["torch-ddp", "--launcher", "mpirun"], "no launcher 'mpirun'"),
    (["torch-single", "--devices", "2"], "runs on one device"),
])
def test_bad_input_is_refused(tmp_path, args, fragment):
    out = tmp_path / "runs"
    assert_refused(parbench("run", *args, "--out", str(out)), out, fragment)


@pytest.mark.parametrize("argv,fragment", [
    (["run", "torch-single", "--schedule", "bogus"], "argument --schedule: invalid choice: "
     "'bogus'"),
    (["run", "torch-single", "--lr-scaling", "square"], "argument --lr-scaling: invalid choice"),
    (["compare", "torch-single", "--optimizer", "lion"], "argument --optimizer: invalid choice"),
    (["compare", "--framework", "mxnet"], "argument --framework: invalid choice: 'mxnet'"),
    (["explain", "torch-ddp", "--isolate-network", "maybe"],
     "argument --isolate-network: invalid choice"),
    (["run", "torch-single", "--precision", "fp8"], "argument --precision: invalid choice"),
    # argparse's other refusals keep the rule too
    (["run", "torch-single", "--steps", "1", "--epochs", "2"],
     "argument --epochs: not allowed with argument --steps"),
    (["run", "torch-single", "--frobnicate"], "unrecognized arguments: --frobnicate"),
])
def test_a_value_the_parser_refuses_is_one_line_too(tmp_path, argv, fragment):
    out = tmp_path / "runs"
    assert_refused(parbench(*argv, "--out", str(out)), out, fragment)


def test_a_bad_choice_of_parity_is_one_line_with_the_choices():
    refused = parbench("parity", "--model", "nope")
    assert refused.returncode == 2, refused.stderr
    [line] = refused.stderr.strip().splitlines()  # argparse's usage block is not printed
    assert line.startswith("parbench: error: argument --model: invalid choice: 'nope'")
    assert all(family in line for family in FAMILIES)


def test_unknown_config_key_is_refused(tmp_path):
    config = tmp_path / "run.toml"
    config.write_text('model = "mlp"\nglobal_bach = 64\n')
    out = tmp_path / "runs"
    result = parbench("run", "torch-single", "--config", str(config), "--out", str(out))
    assert_refused(result, out, "unknown key(s) global_bach")


def test_wrongly_typed_config_value_is_refused(tmp_path):
    config = tmp_path / "run.toml"
    config.write_text('global_batch = "large"\nlr = 1\n')
    out = tmp_path / "runs"
    result = parbench("run", "torch-single", "--config", str(config), "--out", str(out))
    assert_refused(result, out, "global_batch must be int, got 'large'")


def test_corrupt_cifar_file_is_refused(tmp_path):
    write_cifar(tmp_path / "cifar" / "cifar-10-batches-py")
    (tmp_path / "cifar" / "cifar-10-batches-py" / "data_batch_2").write_bytes(b"not a pickle")
    out = tmp_path / "runs"
    result = parbench("run", "torch-single", "--dataset", "cifar10", "--data-dir",
                      str(tmp_path / "cifar"), "--out", str(out))
    assert_refused(result, out, "data_batch_2")


def _listed_states(result) -> dict[str, str]:
    """backend -> "available" or the reason after "unavailable: ", from `parbench list`."""
    assert result.returncode == 0, result.stderr
    states = {}
    for line in result.stdout.splitlines():
        name = line.split()[0]
        if name.rstrip(":") in FRAMEWORKS:  # a framework's own line (why it has no sharding)
            continue
        if " unavailable: " in line:
            states[name] = line.split(" unavailable: ", 1)[1].strip()
            assert states[name], line  # a reason, not an empty tail
        else:  # "unavailable" also ends in "available": only a line without it counts
            assert line.rstrip().endswith(" available"), line
            states[name] = "available"
    assert set(states) == set(BACKENDS)
    return states


def test_list_says_what_is_available_and_why_not():
    states = _listed_states(parbench("list"))
    for name, state in states.items():
        # a backend's framework name is the module it needs; ask importlib, not parbench
        installed = importlib.util.find_spec(BACKENDS[name].framework) is not None
        gpus_if_needed = gpu_count() > 0 or BACKENDS[name].gpu_only is None
        assert (state == "available") == (installed and gpus_if_needed), (name, state)


# Hides one framework from importlib in a fresh process, as if it were not installed.
# (importlib.util.find_spec returns None for a module whose sys.modules entry is None.)
LIST_WITHOUT = """
import sys
sys.modules[sys.argv[1]] = None
from parbench.cli.main import main
sys.exit(main(["list"]))
"""


def test_list_names_the_missing_framework_and_how_to_install_it():
    result = subprocess.run([sys.executable, "-c", LIST_WITHOUT, "paddle"], capture_output=True,
                            text=True, timeout=120)
    states = _listed_states(result)
    for name, state in states.items():
        if BACKENDS[name].framework == "paddle":
            assert state.startswith("paddle is not installed") and "parbench[paddle]" in state
        else:  # only the hidden framework's backends change
            installed = importlib.util.find_spec(BACKENDS[name].framework) is not None
            assert (state == "available") == installed, (name, state)


def test_check_reports_every_problem(tmp_path):
    (tmp_path / "broken.json").write_text(json.dumps({"schema_version": 1, "status": "great"}))
    (tmp_path / "garbage.json").write_text("{")
    result = parbench("check", str(tmp_path))
    assert result.returncode == 1
    assert "broken.json" in result.stdout and "'great' is not one of" in result.stdout
    assert "garbage.json: not readable JSON" in result.stdout
    assert_refused(parbench("check", str(tmp_path / "nope")), tmp_path / "nope", "no such folder")


def resolved(*argv: str):
    """What 'parbench run ARGV' resolves to, in this process (resolve loads no data and
    imports no framework): the plan, or the UsageError a user would see."""
    args = build_parser().parse_args(["run", *argv])
    return resolve(config_from_args(args), train_size=4096)


@pytest.mark.parametrize("argv,line", [
    (["--epochs", "0"], "--epochs must be at least 1, got 0"),
    (["--steps", "0"], "--steps must be at least 1, got 0"),
    (["--lr", "nan"], "--lr must be a finite number, got nan"),
    (["--lr", "inf"], "--lr must be a finite number, got inf"),
    (["--lr", "-0.1"], "--lr must be positive, got -0.1"),
    (["--target", "1.5"],
     "--target must be in (0, 1], got 1.5 (a target of accuracy, fraction of the test set)"),
    (["--target", "nan"], "--target must be a finite number, got nan"),
    (["--target", "0", "--target-metric", "loss"],
     "--target must be positive, got 0.0 (a target of loss, nats per test row)"),
    (["--model", "gpt", "--target", "1", "--target-metric", "perplexity"],
     "--target must be above 1, got 1.0 (a target of perplexity, exp(loss))"),
    (["--target", "3", "--target-metric", "perplexity"], "--target-metric perplexity: "
     "image-classification has no perplexity to reach; its targets: accuracy, loss"),
    (["--target-metric", "loss"],
     "--target-metric loss names what --target is of; give --target VALUE too"),
    (["--target-metric", "bleu"],
     "--target-metric 'bleu' is not one of accuracy, loss, perplexity, f1_all, recall_large, "
     "ap50_all"),
    (["--eval-every", "0"], "--eval-every must be at least 1, got 0"),
    (["--steps", "10", "--eval-every", "11"],
     "--eval-every 11 exceeds the run's 10 steps: it would evaluate only at the end"),
    (["--warmup-steps", "-5"], "--warmup-steps must be 0 or more, got -5"),
    (["--steps", "10", "--warmup-steps", "11"], "--warmup-steps 11 exceeds the run's 10 steps"),
    (["--momentum", "2"], "--momentum must be in [0, 1), got 2.0"),
    (["--weight-decay", "-1"], "--weight-decay must be 0 or more, got -1.0"),
    (["--seed", "-1"], "--seed must be in [0, 2147483647], got -1"),
    (["--timeout", "nan"], "--timeout must be a finite number, got nan"),
    (["--repeats", "0"], "--repeats must be positive, got 0"),
    (["--threads", "0"], "--threads must be at least 1, got 0"),
    (["--join-timeout=-inf"], "--join-timeout must be a finite number, got -inf"),
    (["--clip-grad-norm", "nan"], "--clip-grad-norm must be a finite number, got nan"),
    (["--optimizer", "adamw", "--beta2", "1"], "--beta2 must be in [0, 1), got 1.0"),
    (["--optimizer", "adamw", "--eps", "inf"], "--eps must be a finite number, got inf"),
    (["--grad-accum", "0"], "--grad-accum must be at least 1, got 0"),
    (["--model", "mlp", "--sync-bn"],
     "--sync-bn needs a model with BatchNorm; this one has none"),
    (["--train-subset", "0"], "--train-subset must be positive, got 0"),
    (["--node-rank", "-1"], "--node-rank must be 0 or more, got -1"),
])
def test_every_number_is_checked_for_range_and_finiteness(argv, line):
    with pytest.raises(UsageError) as refused:
        resolved("torch-single", *argv)
    assert str(refused.value) == line


@pytest.mark.parametrize("argv", [["--warmup-steps", "10", "--steps", "10"],
                                  ["--target", "1"], ["--steps", "10", "--eval-every", "10"],
                                  ["--model", "gpt", "--target", "0.01"], ["--momentum", "0"],
                                  ["--weight-decay", "0"], ["--seed", "2147483647"]])
def test_the_edges_of_each_range_are_accepted(argv):
    assert resolved("torch-single", *argv).backend.name == "torch-single"


def test_nan_from_a_config_file_is_refused_like_the_flag(tmp_path):
    config = tmp_path / "run.toml"
    config.write_text("lr = nan\n")
    out = tmp_path / "runs"
    result = parbench("run", "torch-single", "--config", str(config), "--out", str(out))
    assert_refused(result, out, "--lr must be a finite number, got nan")


@pytest.mark.parametrize("name,text,fragment", [
    ("run.yaml", "lr: 0.1\n", "give a .toml or .json file"),
    ("run.json", "[1, 2]", "want a table of keys, got list"),
    ("run.json", "{", "is not valid JSON"),
    ("run.toml", "lr = ", "is not valid TOML"),
    ("run.toml", "compile = 1\n", "compile must be bool, got 1"),  # a mode's key, its type
    ("run.toml", "grad_accum = true\n", "grad_accum must be int, got True"),
    ("run.toml", "lr = true\n", "lr must be float or int, got True"),
])
def test_a_config_file_parbench_cannot_read_is_one_line(tmp_path, name, text, fragment):
    (tmp_path / name).write_text(text)
    with pytest.raises(UsageError, match=re.escape(fragment)):
        read_config_file(str(tmp_path / name))


@pytest.mark.parametrize("given,output,fmt", [(None, "r.html", "html"), (None, "r.CSV", "csv"),
                                              (None, None, "md"), ("csv", "r.csv", "csv"),
                                              ("md", None, "md")])
def test_the_report_format_follows_the_output_suffix(given, output, fmt):
    assert report_format(given, Path(output) if output else None) == fmt


@pytest.mark.parametrize("given,output,fragment", [
    ("md", "r.html", "--format md but --output r.html is a .html file"),
    (None, "r.txt", "--output r.txt: say --format md/csv/html"),
])
def test_a_report_format_that_contradicts_the_output_is_refused(given, output, fragment):
    with pytest.raises(UsageError, match=re.escape(fragment)):
        report_format(given, Path(output))


def test_compare_refuses_a_backend_outside_its_framework(tmp_path):
    out = tmp_path / "runs"
    result = parbench("compare", "torch-ddp", "--framework", "paddle", "--out", str(out))
    assert_refused(result, out, "--framework paddle, but torch-ddp is not of it")


def test_compare_refuses_save_weights_it_would_not_write(tmp_path):
    """compare shares run's options but keeps no weights: before, --save-weights was taken
    and silently ignored."""
    out = tmp_path / "out"
    result = parbench("compare", "torch-single", "--save-weights", str(tmp_path / "w.npz"),
                      "--out", str(out))
    assert_refused(result, out, "--save-weights is for 'parbench run'")


def test_compare_refuses_an_option_one_configuration_cannot_take(tmp_path):
    """The batch cannot be split over 2 devices: that is the input's fault, not the machine's,
    so nothing runs (before, the 2-device runs were skipped and the sweep exited 0)."""
    base = RunConfig(global_batch=33)
    with pytest.raises(UsageError, match=r"^torch-ddp x2: --global-batch 33 is not divisible"):
        sweep_configs(base, [BACKENDS["torch-ddp"]], [1, 2])
    runnable, skipped = sweep_configs(RunConfig(), [BACKENDS["torch-ddp"]], [1, 10_000])
    assert [cfg.devices for cfg, _ in runnable] == [1]  # the machine's limit: skipped, not refused
    assert "--devices 10000 but this machine has" in skipped[0].reason
