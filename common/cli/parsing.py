"""The parser of every ``parbench`` command: bad input on the command line is one line.

argparse's own refusals (a value not among a flag's choices, an unknown flag, a missing
argument, a number that is no number) print the whole usage block before the error; parbench's
rule for bad input is one clear line naming the problem and exit code 2, as resolve's checks
and a config file's are. The sub-commands' parsers are of the same class (argparse makes each
of the parent's), so this one place covers ``run``, ``compare``, ``explain``, ``parity`` and
the rest."""

from __future__ import annotations

import argparse
from typing import NoReturn

from parbench.base.errors import UsageError


class OneLineParser(argparse.ArgumentParser):
    """Its errors are UsageErrors, which parbench's main prints on one line with exit code 2;
    --help still prints the usage in full."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(message)
