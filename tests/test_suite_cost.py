"""The suite's cost table (benchmarks/suite_cost.py) from what conftest records per test: the
recorder writes one line per test, the table sums them per file, costliest first."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import conftest
from conftest import parbench

ROOT = Path(__file__).resolve().parents[1]


def _suite_cost():
    spec = importlib.util.spec_from_file_location("suite_cost", ROOT / "benchmarks" /
                                                  "suite_cost.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow  # a pytest of its own in a subprocess
def test_the_recorder_writes_a_line_per_test_with_its_cpu_and_commands(tmp_path):
    env = {**os.environ, conftest.COST_ENV: str(tmp_path)}
    env.pop("PYTEST_XDIST_WORKER", None)
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           "tests/test_suite_cost.py::test_a_training_command_is_counted"],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-2000:]
    (line,) = [json.loads(text) for text in (tmp_path / "main.jsonl").read_text().splitlines()]
    assert line["file"] == "tests/test_suite_cost.py" and line["commands"] == 1
    (run,) = line["runs"]  # the training command, its folder argument made neutral
    assert run["args"] == ["run", "no-such-backend", "--out", "<path>"] and run["cpu_s"] > 0.3
    assert run["env"] == {"PARBENCH_TEST_FAULT": "crash:0:1"}  # another run than without it
    # the parbench process it started is counted: more than the test's own few milliseconds
    assert line["cpu_s"] > 0.3 and line["wall_s"] > 0.3


def test_a_training_command_is_counted(tmp_path):
    before = conftest._commands_started[0]
    assert parbench("run", "no-such-backend", "--out", str(tmp_path),
                    env={"PARBENCH_TEST_FAULT": "crash:0:1"}).returncode == 2
    assert parbench("run", "--help").returncode == 0  # help trains nothing
    assert conftest._commands_started[0] == before + 1


def test_the_table_sums_each_file_costliest_first(tmp_path, capsys):
    lines = [{"file": "tests/a.py", "test": "a1", "wall_s": 1.0, "cpu_s": 2.0, "commands": 1},
             {"file": "tests/b.py", "test": "b1", "wall_s": 5.0, "cpu_s": 9.0, "commands": 3},
             {"file": "tests/a.py", "test": "a2", "wall_s": 2.0, "cpu_s": 3.0, "commands": 0}]
    (tmp_path / "gw0.jsonl").write_text("\n".join(json.dumps(line) for line in lines[:2]))
    (tmp_path / "gw1.jsonl").write_text(json.dumps(lines[2]) + "\n")
    cost = _suite_cost()
    rows = cost.per_file(cost.read_costs(tmp_path))
    assert [(r["file"], r["tests"], r["cpu_s"], r["wall_s"], r["commands"]) for r in rows] == [
        ("tests/b.py", 1, 9.0, 5.0, 3), ("tests/a.py", 2, 5.0, 3.0, 1)]
    assert cost.main([str(tmp_path), "--cpu", "test CPU"]) == 0
    table = capsys.readouterr().out
    cells = [[cell.strip() for cell in line.strip("|").split("|")]
             for line in table.splitlines() if line.startswith("| ")]
    assert "test CPU" in table and cells[1:] == [["tests/b.py", "1", "9", "64.3", "5", "3"],
                                                 ["tests/a.py", "2", "5", "35.7", "3", "1"],
                                                 ["all", "3", "14", "100.0", "8", "4"]]
    assert cost.main([str(tmp_path / "empty"), "--cpu", "x"]) == 2


def test_a_command_several_tests_started_is_listed_with_what_sharing_saves(tmp_path, capsys):
    run = {"args": ["run", "torch-ddp", "--out", "<path>"], "env": {}}
    other = {"args": ["run", "tf-single", "--out", "<path>"], "cpu_s": 50.0}
    lines = [{"file": "tests/a.py", "test": "a1", "wall_s": 1, "cpu_s": 9, "commands": 2,
              "runs": [{**run, "cpu_s": 4.0}, other]},
             {"file": "tests/b.py", "test": "b1", "wall_s": 1, "cpu_s": 9, "commands": 1,
              "runs": [{**run, "cpu_s": 5.0}]},
             {"file": "tests/b.py", "test": "b2", "wall_s": 1, "cpu_s": 1, "commands": 0}]
    faulty = {"args": run["args"], "env": {"PARBENCH_TEST_FAULT": "exit:1:2"}, "cpu_s": 3.0}
    lines[2]["runs"] = [faulty]  # the same arguments with a fault: another run
    (found,) = _suite_cost().repeats(lines)  # tf-single ran once: not a repeat
    assert found == {"command": "run torch-ddp --out <path>", "env": "", "tests": ["a1", "b1"],
                     "starts": 2, "cpu_s": 9.0, "saved_s": 5.0}
    (tmp_path / "gw0.jsonl").write_text("\n".join(json.dumps(line) for line in lines))
    assert _suite_cost().main([str(tmp_path), "--cpu", "test CPU"]) == 0
    assert "| `parbench run torch-ddp --out <path>` | 2        | 9       | 5" in (
        capsys.readouterr().out)
