"""The package installs as `parbench` (never a bare `common`), from a wheel as from a checkout."""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


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
