"""A run mode is one entry of parbench.run.modes.MODES: a mode added there, and nowhere else,
reaches the command line, the config file, the job, the record (its config, modes, variant and
schema) and the report. The entry is added in every process of the run (harness, launcher,
worker) by a sitecustomize module on PYTHONPATH, as if the table had one more line; torch
ignores the mode, so the run itself is an ordinary one."""

from __future__ import annotations

import os
from pathlib import Path

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
