"""The one error every layer may raise for bad input."""

from __future__ import annotations


class UsageError(Exception):
    """Bad input: the CLI prints the message on one line and exits with code 2, and nothing is
    trained or written."""
