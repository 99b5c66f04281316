"""The ``parbench`` command: argument parsing and the sub-commands (list, run, compare, check,
report, parity, slurm), each a thin layer over the harness and the results; and the tool that
keeps the docs' code excerpts true. Nothing imports it."""
