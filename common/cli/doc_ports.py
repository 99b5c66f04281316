"""The ports each launcher opens, for docs/security.md: which backends use it and the addresses
parbench hands it come from the registry (``LAUNCHERS``, ``BACKENDS``, and each launcher's own
command line, built here as a run builds it); what then listens is a fact of the framework,
which each launcher's registry entry states (``Launcher.listens``, required), so no launcher's
ports go unmentioned.
"""

from __future__ import annotations

import re
import tempfile
from pathlib import Path

from parbench.launch.nodes import Nodes
from parbench.launch.slurm import DEFAULT_MASTER_PORT
from parbench.run.registry import BACKENDS, LAUNCHERS

from .doc_lists import code, table

DOC_ADDRESS = "192.0.2.1"
# Across machines, a launcher without an address of its own on its command line: who says
# where each worker listens (parbench's check-in gathers the ports, parbench.launch.checkin).
WORKER_PORTS = ("each node picks a free port per worker and reports them at parbench's "
                "check-in, which hands every node the whole list")


def _addresses(argv: list[str]) -> str:
    """The options of a command line that carry an address, ports shown as PORT (free_port's
    choice differs every run)."""
    found = [arg for arg in argv if re.search(r"(HOST|\d+\.\d+\.\d+\.\d+)(:\d+)?$|port=", arg)]
    return " ".join(code(re.sub(r"(?<=:)\d+$|(?<=port=)\d+$", "PORT", arg)) for arg in found)


def _entry_point(argv: list[str]) -> str:
    return code(argv[argv.index("-m") + 1]) if "-m" in argv else code(argv[0])


def launchers_list(args: list[str], root: Path) -> str:
    """One row per launcher of LAUNCHERS, then parbench's own port across machines."""
    silent = [name for name, launcher in LAUNCHERS.items() if not launcher.listens.strip()]
    if silent:
        raise ValueError(f"the registry's launcher(s) {', '.join(silent)} say nothing of what "
                         "listens (Launcher.listens): say what each launcher opens")
    job = Path(tempfile.gettempdir()) / "JOB" / "job.json"
    # an address, not a name: paddle-launch resolves the master's host (RFC 5737's documentation
    # address, shown as HOST)
    nodes = Nodes(2, 0, DOC_ADDRESS, DEFAULT_MASTER_PORT, None, 60.0)
    rows = []
    for name, launcher in LAUNCHERS.items():
        one = launcher.command(job, 2)
        several = launcher.single_node and f"no: {launcher.single_node}" or (
            WORKER_PORTS if launcher.argv is None else
            _addresses(launcher.command(job, 1, nodes)).replace(str(DEFAULT_MASTER_PORT),
                                                               "PORT").replace(DOC_ADDRESS,
                                                                               "HOST"))
        rows.append([code(name), ", ".join(b.name for b in BACKENDS.values()
                                           if name in b.launchers),
                     _entry_point(one), _addresses(one) or "none", launcher.listens, several])
    offset = nodes.checkin_port - nodes.master_port
    return (table(["launcher", "backends", "runs", "addresses parbench passes",
                   "what listens", "several machines (`--master HOST:PORT`)"], rows)
            + f"\nAcross machines node 0 also listens at PORT+{offset} for parbench's own "
            f"check-in (`parbench.launch.checkin`); PORT is {DEFAULT_MASTER_PORT} unless "
            "`--master` or `--master-port` says otherwise.\n")
