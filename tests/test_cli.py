"""Bad input: one clear line, exit code 2, and no record written. Plus list and check."""

from __future__ import annotations

import json

import pytest

from conftest import parbench, write_cifar


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
    (["torch-dp", "--devices", "2"], "CUDA devices (none found"),
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


def test_list_says_what_is_available_and_why_not():
    result = parbench("list")
    assert result.returncode == 0
    lines = {line.split()[0]: line for line in result.stdout.splitlines()}
    assert {"torch-single", "torch-dp", "torch-ddp"} <= set(lines)
    assert all(("available" in line) for line in lines.values())


def test_check_reports_every_problem(tmp_path):
    (tmp_path / "broken.json").write_text(json.dumps({"schema_version": 1, "status": "great"}))
    (tmp_path / "garbage.json").write_text("{")
    result = parbench("check", str(tmp_path))
    assert result.returncode == 1
    assert "broken.json" in result.stdout and "'great' is not one of" in result.stdout
    assert "garbage.json: not readable JSON" in result.stdout
    assert_refused(parbench("check", str(tmp_path / "nope")), tmp_path / "nope", "no such folder")
