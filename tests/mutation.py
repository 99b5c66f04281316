"""The mutation score of the framework-free contract and results modules: mutmut changes each
of them in many small ways (a comparison turned round, a constant off by one, a call dropped),
runs the tests that exercise the changed function against each change, and counts a change
the tests still pass as a mutant that survived. Run by ``tox -e mutation``; its last line is
``mutation score: N%``: killed / (every mutant but the equivalent ones, listed below with why
each cannot change any result).

mutmut names a module after its file's path, so the tests must import the mutated copy under
the same name: ``parbench.contract.batches`` must be ``parbench/contract/batches.py``. common/
installs as ``parbench`` through the package map in pyproject.toml, so this makes the view
``parbench -> common`` (a symlink, in the checkout, git-ignored) that mutmut mutates through,
and the tox env installs parbench's dependencies but not parbench: the tests, and the CLI they
start in subprocesses (PYTHONPATH), import the mutants.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
VIEW = ROOT / "parbench"
TARGET = 85.0  # percent

# mutant name -> why no test can tell it from the original (each was read, not assumed)
EQUIVALENT: dict[str, str] = {
    "parbench.contract.batches.x_eval_slice__mutmut_2":
        "astype(None) keeps the rounded bounds as floats; int() of an integral float is the "
        "same int, so the slice is the same",
    "parbench.results.metrics.x_aggregate__mutmut_11":
        "rows as an int array instead of float: the float losses @ rows promotes to float64, "
        "and the division by rows.sum() gives the same float",
    "parbench.results.metrics.x_aggregate__mutmut_13":
        "the same as mutmut_11 (dtype left out: numpy infers int64)",
}


def make_view() -> None:
    if VIEW.is_symlink() and VIEW.resolve() == (ROOT / "common").resolve():
        return
    if VIEW.exists() or VIEW.is_symlink():
        sys.exit(f"{VIEW} exists and is not the view of common/: move it away")
    VIEW.symlink_to("common", target_is_directory=True)


def statuses() -> dict[str, str]:
    """mutant name -> mutmut's verdict (killed, survived, no tests, timeout, ...)."""
    done = subprocess.run([sys.executable, "-m", "mutmut", "results", "--all", "true"],
                          cwd=ROOT, capture_output=True, text=True, check=True)
    found = {}
    for line in done.stdout.splitlines():
        match = re.fullmatch(r"\s*(\S+__mutmut_\d+): (.+)", line)
        if match:
            found[match[1]] = match[2].strip()
    return found


def main() -> int:
    make_view()
    # mutmut keeps each mutant's verdict in mutants/ and tests again only the functions whose
    # source changed: after a change to the tests alone it would print the old score. Every
    # run starts from an empty folder. It must exist before mutmut's process starts, whose
    # sys.path has PYTHONPATH=mutants, or Python caches it as missing and "import parbench"
    # fails once mutmut has made it.
    shutil.rmtree(ROOT / "mutants", ignore_errors=True)
    (ROOT / "mutants").mkdir()
    env = {**os.environ, "PYTHONPATH": str(ROOT / "mutants")}
    children = ["--max-children", str(len(os.sched_getaffinity(0)))]
    subprocess.run([sys.executable, "-m", "mutmut", "run", *children], cwd=ROOT, env=env,
                   check=True)
    found = statuses()
    counted = {name: verdict for name, verdict in found.items() if name not in EQUIVALENT}
    killed = sum(verdict == "killed" for verdict in counted.values())
    for name, verdict in sorted(counted.items()):
        if verdict != "killed":
            print(f"{verdict}: {name}")
    for name, why in sorted(EQUIVALENT.items()):
        print(f"equivalent (excluded): {name}: {why}")
    stale = sorted(set(EQUIVALENT) - set(found))
    if stale:
        print(f"listed as equivalent but no longer mutated: {', '.join(stale)}")
    score = 100 * killed / max(1, len(counted))
    print(json.dumps({"mutants": len(found), "equivalent": len(found) - len(counted),
                      "killed": killed, "counted": len(counted)}))
    print(f"mutation score: {score:.1f}%")
    return 0 if score >= TARGET else 1


if __name__ == "__main__":
    sys.exit(main())
