"""Where the test suite's time goes: each test file's CPU seconds (the pytest process and every
process it started: parbench commands and their workers), wall seconds and parbench training
commands, from one run of the suite with the cost recorder on (tests/conftest.py), as a
Markdown table, costliest first; then the training commands several tests started with the
same arguments (runs a shared fixture could serve once).

    PARBENCH_SUITE_COST=/tmp/cost tox -e test          # record (an empty folder)
    python benchmarks/suite_cost.py /tmp/cost --cpu "AMD EPYC, 2 vCPUs" > tests/COST.md

The CPU seconds of a file are what it costs on any number of cores; on 2 cores the suite's
wall time is about the total over 2 when the files keep both workers busy. A module's shared
runs (module-scoped fixtures) count for the test that first asks for them, so they land in
their file's total once.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from datetime import date
from pathlib import Path

from tabulate import tabulate

EXIT_USAGE = 2


def read_costs(folder: Path) -> list[dict]:
    """Every test's line from every worker's file under ``folder``."""
    lines = [json.loads(line) for path in sorted(folder.glob("*.jsonl"))
             for line in path.read_text().splitlines() if line.strip()]
    if not lines:
        raise ValueError(f"{folder}: no *.jsonl cost files (run the suite with "
                         "PARBENCH_SUITE_COST set to this folder)")
    return lines


def per_file(lines: list[dict]) -> list[dict]:
    """One row per test file: tests, CPU and wall seconds, training commands; costliest
    first."""
    files: dict[str, dict] = defaultdict(lambda: {"tests": 0, "cpu_s": 0.0, "wall_s": 0.0,
                                                  "commands": 0})
    for line in lines:
        row = files[line["file"]]
        row["tests"] += 1
        for key in ("cpu_s", "wall_s", "commands"):
            row[key] += line[key]
    return sorted(({"file": name, **row} for name, row in files.items()),
                  key=lambda row: -row["cpu_s"])


def repeats(lines: list[dict]) -> list[dict]:
    """The training commands more than one test started with the same arguments and
    environment overrides (their own paths aside): runs a shared fixture could serve once.
    Costliest repeat first; ``saved_s`` is what serving each once would have saved (every
    start after the cheapest)."""
    started: dict[tuple, list[tuple[str, float]]] = defaultdict(list)
    for line in lines:
        for run in line.get("runs", ()):
            env = " ".join(f"{k}={v}" for k, v in sorted(run.get("env", {}).items()))
            started[(env, *run["args"])].append((line["test"], run["cpu_s"]))
    found = [{"command": " ".join(args), "env": env,
              "tests": sorted({test for test, _ in starts}),
              "starts": len(starts), "cpu_s": sum(cpu for _, cpu in starts),
              "saved_s": sum(cpu for _, cpu in starts) - min(cpu for _, cpu in starts)}
             for (env, *args), starts in started.items() if len(starts) > 1]
    return sorted(found, key=lambda row: -row["saved_s"])


def repeats_table(rows: list[dict]) -> str:
    if not rows:
        return "\nNo training command was started twice with the same arguments.\n"
    body = [[f"`{row['env'] + ' ' if row['env'] else ''}parbench {row['command']}`",
             row["starts"], f"{row['cpu_s']:.0f}", f"{row['saved_s']:.0f}",
             "<br>".join(row["tests"])] for row in rows]
    return ("\n## Training commands started more than once\n\nThe same arguments (a test's "
            "own paths aside) started by several tests or several times: what a shared run "
            "would save.\n\n" + tabulate(body, headers=("command", "starts", "CPU s",
                                                          "saved CPU s", "tests"),
                                         tablefmt="github", disable_numparse=True) + "\n")


def table(rows: list[dict], cpu: str) -> str:
    total_cpu = sum(row["cpu_s"] for row in rows)
    body = [[row["file"], row["tests"], f"{row['cpu_s']:.0f}",
             f"{100 * row['cpu_s'] / total_cpu:.1f}", f"{row['wall_s']:.0f}", row["commands"]]
            for row in rows]
    body.append(["all", sum(row["tests"] for row in rows), f"{total_cpu:.0f}", "100.0",
                 f"{sum(row['wall_s'] for row in rows):.0f}",
                 sum(row["commands"] for row in rows)])
    head = (f"# The test suite's cost, file by file\n\nMeasured {date.today().isoformat()} on "
            f"{cpu}, by `benchmarks/suite_cost.py` (its docstring says how). CPU s: the "
            "pytest worker and every process it started; wall s: the tests' own time, "
            "summed (two workers share the cores); commands: parbench run, compare, explain "
            "and parity commands the file started through conftest's parbench().\n\n")
    return head + tabulate(body, headers=("file", "tests", "CPU s", "CPU %", "wall s",
                                          "commands"), tablefmt="github",
                           disable_numparse=True) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folder", help="the PARBENCH_SUITE_COST folder of one suite run")
    parser.add_argument("--cpu", required=True, help="the machine's CPU, named in the table")
    args = parser.parse_args(argv)
    try:
        lines = read_costs(Path(args.folder))
    except (OSError, ValueError) as err:
        print(f"suite_cost: error: {err}", file=sys.stderr)
        return EXIT_USAGE
    print(table(per_file(lines), args.cpu) + repeats_table(repeats(lines)), end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
