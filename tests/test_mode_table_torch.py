"""Run modes as a table, and the check that they took effect, end to end on torch.

A run mode is one entry of parbench.run.modes.MODES: a mode added there, and nowhere else,
reaches the command line, the config file, the job, the record (its config, modes, variant and
schema) and the report. And a run whose strategy reports that a mode did not take effect fails:
the loop checks what the strategy observed after the first step. Both are arranged in every
process of the run (harness, launcher, worker) by a sitecustomize module on PYTHONPATH: a table
with one more line, a torch Step that misreports."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from conftest import needs, parbench, records_in

pytestmark = needs("torch")

EXTRA_MODE = '''
from parbench.run.modes import MODES, Mode

MODES["dummy_mode"] = Mode("dummy_mode", False, "a mode added by a test", "dummy mode",
                           label=lambda on: "dummy" if on else "")
'''


def with_extra_mode(folder: Path) -> dict[str, str]:
    (folder / "sitecustomize.py").write_text(EXTRA_MODE)
    path = os.pathsep.join(p for p in (str(folder), os.environ.get("PYTHONPATH")) if p)
    return {"PYTHONPATH": path}


@pytest.mark.slow
def test_a_mode_added_to_the_table_reaches_parser_record_and_report(tmp_path):
    env = with_extra_mode(tmp_path)
    assert "--dummy-mode" in parbench("run", "--help", env=env).stdout
    assert "--dummy-mode" not in parbench("run", "--help").stdout  # the table is the source
    (tmp_path / "config.toml").write_text("dummy_mode = true\nsteps = 2\n")
    out = tmp_path / "out"
    done = parbench("run", "torch-single", "--config", str(tmp_path / "config.toml"),
                    "--dataset", "digits", "--global-batch", "32", "--out", str(out), env=env,
                    cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    (record,) = records_in(out)
    assert record["status"] == "ok", record["error"]
    assert record["modes"]["dummy_mode"] is True and record["config"]["dummy_mode"] is True
    assert record["variant"]["modes"] == {"dummy_mode": True}  # its own record name
    check = parbench("check", str(out), env=env)  # the schema takes the mode's entry
    assert check.returncode == 0, check.stdout
    report = parbench("report", str(out), env=env).stdout
    assert "torch-single fp32+dummy" in report  # the row's label
    assert "dummy mode yes" in report  # its column, the same in every row: named in the note
    refused = parbench("check", str(out))  # without the entry, the record's mode is unknown
    assert refused.returncode != 0 and "dummy_mode" in refused.stdout


MISREPORTS = {
    "precision": """
from parbench.frameworks.torch import runtime
from parbench.run.modes import Observed

def misreported(self):
    return Observed(compute_dtype="float16", micro_batches=1)

runtime.Step.observed = misreported
""",
    "clip": """
from parbench.frameworks.torch import runtime

runtime.Step.clip_gradients = lambda self: None  # never clips, never counts
""",
}


@pytest.mark.slow
def test_a_strategy_that_misreports_its_modes_fails_the_run(tmp_path):
    """The loop's check after the first step (parbench.run.modes.check_observed): a torch step
    that says it computed in float16 under fp32, and one that never clips under
    --clip-grad-norm, each fail their run with the reason; nothing is recorded as ok."""
    for name, patch, options, reason in (
            ("precision", MISREPORTS["precision"], (),
             "--precision fp32 expects float32 activations, the first layer computed in "
             "float16"),
            ("clip", MISREPORTS["clip"], ("--clip-grad-norm", "1.0"),
             "--clip-grad-norm is set but the step did not clip")):
        folder = tmp_path / name
        folder.mkdir()
        (folder / "sitecustomize.py").write_text(patch)
        path = os.pathsep.join(p for p in (str(folder), os.environ.get("PYTHONPATH")) if p)
        out = folder / "out"
        done = parbench("run", "torch-single", "--dataset", "digits", "--steps", "2",
                        "--global-batch", "32", *options, "--out", str(out),
                        env={"PYTHONPATH": path}, cwd=folder)
        assert done.returncode == 1, done.stderr[-2000:]
        (record,) = records_in(out)
        assert record["status"] == "failed" and "a mode did not take effect" in record["error"]
        assert reason in record["error"], record["error"][-2000:]
