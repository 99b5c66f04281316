"""docs/usage.md's synopsis of the run options is what `parbench run --help` prints into a pipe
(80 columns), so a flag added to the option table cannot be missing from it."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

from parbench.cli.main import build_parser

USAGE = Path(__file__).resolve().parents[1] / "docs" / "usage.md"


def run_usage() -> str:
    commands = next(action for action in build_parser()._actions
                    if isinstance(action, argparse._SubParsersAction))
    return commands.choices["run"].format_usage()


def test_the_run_synopsis_is_what_run_help_prints(monkeypatch) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    blocks = re.findall(r"```\n(usage: parbench run .*?)```", USAGE.read_text(), re.S)
    assert blocks == [run_usage()], "docs/usage.md: paste `parbench run --help | head` again"
