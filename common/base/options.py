"""Run options as data: each is declared once, by its owner, as an ``Option``.

The owner is the part of parbench an option belongs to: the run itself (parbench.launch.options),
the optimizer (parbench.contract.optim), a model (parbench.contract.spec) or a task
(parbench.contract.tasks, next to the task's datasets). Everything else derives from the
entries: RunConfig's fields and defaults, the flags of ``run``, ``compare`` and ``explain`` with
their help, the keys and types of a config file, the range and finiteness checks (``Bounds``),
and compare's key of the inputs configurations share. A value outside its bounds, of the wrong
type, or not one of its choices is one line and exit 2 before anything is loaded or launched,
from the command line and from a config file alike.

This module is in ``base`` because the contract layer declares options too.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass

OptionValue = bool | int | float | str | None
COMMANDS = ("run", "compare", "explain")  # the commands whose flags are the run options


@dataclass(frozen=True)
class Bounds:
    low: float | None = None
    high: float | None = None
    low_open: bool = False  # low itself is outside
    high_open: bool = False  # high itself is outside

    def problem(self, option: str, value: float | int) -> str | None:
        """Why ``value`` cannot be ``option``'s, or None."""
        if isinstance(value, float) and not math.isfinite(value):
            return f"{option} must be a finite number, got {value}"
        above = self.low is None or (value > self.low if self.low_open else value >= self.low)
        below = self.high is None or (value < self.high if self.high_open else value <= self.high)
        return None if above and below else f"{option} must be {self.text}, got {value}"

    @property
    def text(self) -> str:
        if self.high is None:
            if self.low == 0:
                return "positive" if self.low_open else "0 or more"
            return f"{'above' if self.low_open else 'at least'} {_shown(self.low)}"
        return (f"in {'(' if self.low_open else '['}{_shown(self.low)}, "
                f"{_shown(self.high)}{')' if self.high_open else ']'}")


def _shown(bound: float) -> str:
    return str(int(bound)) if float(bound).is_integer() else str(bound)


POSITIVE = Bounds(0, low_open=True)
AT_LEAST_ONE = Bounds(1)
NON_NEGATIVE = Bounds(0)
UNIT_INTERVAL = Bounds(0, 1, high_open=True)  # [0, 1): momentum, Adam's betas
ACCURACY = Bounds(0, 1, low_open=True)  # (0, 1]
SEED = Bounds(0, 2**31 - 1)  # what every framework's generator takes (numpy refuses negatives)


@dataclass(frozen=True)
class Option:
    """One run option: its name is the RunConfig field, the config-file key and the record's
    ``config`` key; the flag is the name with dashes."""

    name: str
    kind: type  # bool, int, float or str: the flag's and the config file's type
    default: OptionValue = None  # None: not given (the plan or the owner decides)
    help: str | None = None
    owner: str = "run"  # run | optimizer | model | task <name>
    bounds: Bounds | None = None
    # the allowed values of a text option; a callable where they come from a table that can
    # grow (the models and datasets of the registered tasks): those are checked by resolve,
    # the fixed ones by the parser too
    choices: tuple[str, ...] | Callable[[], tuple[str, ...]] = ()
    metavar: str | None = None
    commands: tuple[str, ...] = COMMANDS  # the commands that take its flag
    exclusive: str | None = None  # options of one name here: give at most one
    section: str | None = None  # the flag's group in --help (None: the command's own)
    inputs: bool = False  # it changes what a run's prepare() writes (data, weights)

    @property
    def flag(self) -> str:
        return "--" + self.name.replace("_", "-")

    def allowed(self) -> tuple[str, ...]:
        return self.choices() if callable(self.choices) else self.choices

    def problem(self, value: object) -> str | None:
        """What is wrong with a given (not None) ``value``: its range, finiteness or choice."""
        if isinstance(value, bool) or self.kind is bool:
            return None
        if self.bounds is not None and isinstance(value, int | float):
            return self.bounds.problem(self.flag, value)
        if self.choices and value not in self.allowed():
            return f"{self.flag} {value!r} is not one of {', '.join(self.allowed())}"
        return None

    def type_problem(self, value: object) -> str | None:
        """Why ``value`` (a config file's) is not of this option's type, or None; a float option
        takes an integer too (TOML writes 1 for 1.0), a number option never a bool."""
        allowed = (float, int) if self.kind is float else (self.kind,)
        if isinstance(value, bool) and self.kind is not bool or not isinstance(value, allowed):
            return f"{self.name} must be {' or '.join(t.__name__ for t in allowed)}, " \
                f"got {value!r}"
        return None

    def add_to(self, parser: argparse.ArgumentParser | argparse._ArgumentGroup) -> None:
        """Its flag; unset (None) when not given, so a config file's value can stand."""
        if self.kind is bool:
            parser.add_argument(self.flag, action="store_true", default=None, help=self.help)
            return
        fixed = None if callable(self.choices) else (self.choices or None)
        parser.add_argument(self.flag, type=self.kind, choices=fixed, metavar=self.metavar,
                            help=self.help)


def problems(values: dict[str, object], options: Iterable[Option]) -> list[str]:
    """What is wrong with the given values of ``values``, one line each, in table order."""
    found = []
    for option in options:
        value = values.get(option.name)
        problem = None if value is None else option.problem(value)
        found += [problem] if problem else []
    return found


def add_flags(parser: argparse.ArgumentParser, options: Iterable[Option], command: str,
              section: str | None = None) -> None:
    """The flags of ``command`` in ``section`` (None: the command's own) into ``parser``, with
    a mutually exclusive group for each ``exclusive`` name."""
    groups: dict[str, argparse._MutuallyExclusiveGroup] = {}
    for option in options:
        if command not in option.commands or option.section != section:
            continue
        if option.exclusive and option.exclusive not in groups:
            groups[option.exclusive] = parser.add_mutually_exclusive_group()
        option.add_to(groups[option.exclusive] if option.exclusive else parser)
