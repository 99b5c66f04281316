"""The errors every layer may raise for bad input."""

from __future__ import annotations


class UsageError(Exception):
    """Bad input: the CLI prints the message on one line and exits with code 2, and nothing is
    trained or written."""


class Unavailable(UsageError):
    """What this machine or this backend cannot run (a mode a framework refuses, more devices
    than the machine has, a launcher the backend lacks), as opposed to input that is wrong in
    itself: a sweep skips such a configuration with its reason and runs the others, while a
    single run stops with it like any usage error."""


class CheckpointError(ValueError):
    """A folder that is not a checkpoint parbench can resume from: says why, in one line."""
