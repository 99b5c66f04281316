"""Bad input: one clear line, exit code 2, and no record written. Plus list and check."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys

import pytest

from conftest import parbench, write_cifar
from parbench.base.devices import gpu_count
from parbench.run.registry import BACKENDS


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
        assert (state == "available") == installed, (name, state)


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
