"""The option table's pieces (parbench.base.options) on their own: an option's flag, its parse
(type, choices, a switch, unset is None), its checks (bounds, finiteness, choices, a config
file's types) and the flags of a command with their exclusive groups and sections."""

from __future__ import annotations

import argparse

import pytest

from parbench.base.options import (
    POSITIVE,
    UNIT_INTERVAL,
    Bounds,
    Option,
    add_flags,
    problems,
)

RATE = Option("learning_rate", float, help="the rate", bounds=POSITIVE, metavar="LR")
MODE = Option("mode", str, "a", "a or b", choices=("a", "b"))
GROWING = Option("model", str, choices=lambda: ("x", "y"))
SWITCH = Option("loud", bool, False, "say more")
STEPS = Option("steps", int, help="steps", exclusive="budget", commands=("run",))
EPOCHS = Option("epochs", int, help="epochs", exclusive="budget", commands=("run",))
NODE = Option("nnodes", int, 1, "nodes", commands=("run",), section="nodes")
TABLE = (RATE, MODE, GROWING, SWITCH, STEPS, EPOCHS, NODE)


def parser_of(command: str, section: str | None = None) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="t")
    add_flags(parser, TABLE, command, section)
    return parser


def test_each_option_parses_as_its_kind_and_unset_is_none():
    parsed = vars(parser_of("run").parse_args(
        ["--learning-rate", "0.5", "--mode", "b", "--model", "z", "--loud", "--steps", "3"]))
    assert parsed == {"learning_rate": 0.5, "mode": "b", "model": "z", "loud": True,
                      "steps": 3, "epochs": None}
    assert vars(parser_of("run").parse_args([])) == dict.fromkeys(parsed)  # None: not given
    # fixed choices are the parser's; those of a growing table are resolve's to check
    with pytest.raises(SystemExit):
        parser_of("run").parse_args(["--mode", "c"])
    with pytest.raises(SystemExit):
        parser_of("run").parse_args(["--steps", "1", "--epochs", "2"])  # one of the budget


def test_help_shows_each_flags_help_metavar_and_choices():
    text = parser_of("run").format_help()
    for piece in ("--learning-rate LR", "the rate", "--mode {a,b}", "a or b", "--loud",
                  "say more", "[--steps STEPS | --epochs EPOCHS]"):
        assert piece in text, piece
    assert "--nnodes" not in text  # its own section's flags only where asked
    assert "--steps" not in parser_of("compare").format_help()  # run's alone
    assert "--nnodes NNODES" in parser_of("run", "nodes").format_help()


def test_values_are_checked_for_range_finiteness_and_choice():
    assert problems({"learning_rate": 0.0, "mode": "c", "model": "x", "loud": True},
                    TABLE) == ["--learning-rate must be positive, got 0.0",
                               "--mode 'c' is not one of a, b"]
    assert problems({"learning_rate": float("nan"), "model": "w"}, TABLE) == [
        "--learning-rate must be a finite number, got nan", "--model 'w' is not one of x, y"]
    assert problems({"learning_rate": None, "steps": 4}, TABLE) == []
    assert Option("m", float, bounds=UNIT_INTERVAL).problem(1.0) == "--m must be in [0, 1), got 1.0"
    assert Bounds(1).text == "at least 1" and Bounds(0).text == "0 or more"
    assert Bounds(1, low_open=True).text == "above 1"  # a perplexity target: 1 is not one
    assert Bounds(0.5, 2, low_open=True).text == "in (0.5, 2]"


def test_a_config_files_value_is_checked_for_type():
    assert RATE.type_problem(1) is None and RATE.type_problem(0.5) is None  # TOML's 1 for 1.0
    assert RATE.type_problem(True) == "learning_rate must be float or int, got True"
    assert STEPS.type_problem(2.0) == "steps must be int, got 2.0"
    assert SWITCH.type_problem(True) is None and SWITCH.type_problem(1) == \
        "loud must be bool, got 1"
    assert MODE.type_problem("b") is None and MODE.flag == "--mode"
