"""Runs the "nodes" of a multi-node test side by side: ``python nodes_driver.py SPEC.json``.

The test starts this driver in a private network namespace (where the OS allows it), so every
node's processes share one loopback that nothing outside can reach, as two machines on a private
network would. SPEC holds each node's argv and extra environment, the timeout and, optionally,
a node to SIGKILL (its parbench process) once node 0's run has done some steps. The driver
prints one JSON object: per node its exit code, output and when it ended, when the kill happened,
and every descendant process still running at the end (none may be).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

POLL_S = 0.2


def progress_of(pid: int) -> int:
    """Steps done by the run of the parbench process ``pid`` (its progress file), or -1."""
    for path in Path(tempfile.gettempdir()).glob(f"parbench-run-{pid}-*/progress.json"):
        try:
            return json.loads(path.read_text())["done"]
        except (OSError, ValueError, KeyError):
            pass
    return -1


def alive(process: psutil.Process) -> bool:
    try:
        return process.is_running() and process.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def main() -> None:
    spec = json.loads(Path(sys.argv[1]).read_text())
    start = time.monotonic()
    nodes = [subprocess.Popen(node["argv"], env={**os.environ, **node["env"]},
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for node in spec["nodes"]]
    seen: dict[int, psutil.Process] = {}
    ended: dict[int, float] = {}
    kill, killed_at = spec.get("kill"), None
    while len(ended) < len(nodes) and time.monotonic() - start < spec["timeout"]:
        for child in psutil.Process().children(recursive=True):
            seen.setdefault(child.pid, child)
        for index, node in enumerate(nodes):
            if index not in ended and node.poll() is not None:
                ended[index] = time.monotonic() - start
        if kill and killed_at is None and progress_of(nodes[0].pid) >= kill["after_steps"]:
            os.kill(nodes[kill["node"]].pid, signal.SIGKILL)
            killed_at = time.monotonic() - start
        time.sleep(POLL_S)
    for node in nodes:  # past the timeout: the test fails on the exit codes, nothing stays
        if node.poll() is None:
            node.kill()
    outputs = [node.communicate() for node in nodes]
    time.sleep(1)  # a process killed at the very end has a moment to go
    survivors = [f"{p.pid} {p.name()}" for p in seen.values() if alive(p)]
    print(json.dumps({
        "nodes": [{"rc": node.returncode, "stdout": out, "stderr": err, "ended_s": ended.get(i)}
                  for i, (node, (out, err)) in enumerate(zip(nodes, outputs))],
        "killed_s": killed_at, "survivors": survivors}))


if __name__ == "__main__":
    main()
