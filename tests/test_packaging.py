"""The package installs as `parbench` (never a bare `common`), from a wheel as from a checkout,
with its licence, on the Python versions it says it needs."""

from __future__ import annotations

import os
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_wheel_installs_parbench_and_its_frameworks(tmp_path):
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
                    "-q", "-w", str(tmp_path / "dist"), str(ROOT)], check=True,
                   capture_output=True)
    (wheel,) = (tmp_path / "dist").glob("parbench-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    for expected in ("parbench/cli/main.py", "parbench/results/record_schema.json",
                     "parbench/frameworks/torch/ddp.py", "parbench/frameworks/paddle/launch.py",
                     "parbench/frameworks/tensorflow/mirrored.py"):
        assert expected in names
    assert not any(n.startswith(("common/", "frameworks/", "tests/")) for n in names)
    assert any(n.endswith(".dist-info/licenses/LICENSE") for n in names)  # Apache-2.0
    subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--target",
                    str(tmp_path / "site"), str(wheel)], check=True, capture_output=True)
    env = {**os.environ, "PYTHONPATH": str(tmp_path / "site")}
    probe = subprocess.run([sys.executable, "-c", "import parbench.cli.main, sys; "
                            "print(parbench.cli.main.__file__); "
                            "sys.exit(parbench.cli.main.main(['list']))"],
                           capture_output=True, text=True, env=env, cwd=tmp_path, check=True)
    assert probe.stdout.startswith(str(tmp_path / "site" / "parbench"))
    assert "torch-ddp" in probe.stdout


def test_console_script_is_installed():
    script = Path(sys.executable).with_name("parbench")
    result = subprocess.run([str(script), "list"], capture_output=True, text=True)
    assert result.returncode == 0 and "torch-single" in result.stdout


@pytest.mark.slow
def test_requires_python_admits_no_python_the_code_cannot_run_on():
    """pyproject's requires-python is at least what the code needs, as vermin reads it off the
    code (tomllib, for one, is 3.11+); a floor lower than that fails here."""
    spec = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["requires-python"]
    floor = spec.split("#")[0].strip().removeprefix(">=")
    vermin = Path(sys.executable).with_name("vermin")
    done = subprocess.run([str(vermin), "-q", "--no-tips", "--eval-annotations", "--violations",
                           f"-t={floor}-", "common", "frameworks", "benchmarks", "tests"],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, f"requires-python {spec}, but:\n{done.stdout}"
    below = subprocess.run([str(vermin), "-q", "--no-tips", "--violations", "-t=3.10-",
                            "common"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert below.returncode != 0 and "tomllib" in below.stdout  # the check can fail
