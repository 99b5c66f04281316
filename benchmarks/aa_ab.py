"""A/A and A/B through the whole pipeline: one `parbench compare` sweep, judged by the report's
own paired comparison (parbench.results.paired), against answers known in advance.

* A/A: torch-dp against torch-single, both at 1 device and the same threads. Without CUDA
  nn.DataParallel runs the module unchanged on the CPU (the record notes the no-op), so the two
  are one computation under two names: the comparison must be a tie.
* A/B: each of them at 2 threads per worker against itself at 1, on a machine of at least 2
  cores: two threads compute the same steps faster, so the comparison must be called
  different, 2 threads ahead.

    python benchmarks/aa_ab.py --out results/reference/aa-ab-runs   # measure (quiet machine)
    python benchmarks/aa_ab.py --records results/reference/aa-ab-runs   # judge records only

It prints one line per comparison (ratio, 95% interval, method, verdict, what was expected)
and exits 1 when a verdict is not the expected one. Each A/A is called different in 5 % of
sweeps by design (a 95% interval), so an unexpected A/A verdict on one sweep is a finding to
repeat, not yet a bug; an A/B called a tie says the sweep had too few rounds or too much noise.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

EXIT_USAGE = 2
PAIR = ("torch-single", "torch-dp")


@dataclass(frozen=True)
class Judged:
    name: str
    expected: str  # "tie" or "faster"
    ratio: float
    low: float | None
    high: float | None
    method: str | None

    @property
    def verdict(self) -> str:
        if self.low is None:
            return "undecided (no interval)"
        if self.low <= 1 <= self.high:
            return "tie"
        return "faster" if self.low > 1 else "slower"

    @property
    def as_expected(self) -> bool:
        return self.verdict == self.expected

    def line(self) -> str:
        spread = f" ({self.low:.3g}-{self.high:.3g}, {self.method})" if self.low else ""
        return (f"{self.name}: {self.ratio:.3g}{spread}: {self.verdict}; expected "
                f"{self.expected}: {'ok' if self.as_expected else 'NOT AS EXPECTED'}")


def judge(folder: Path) -> list[Judged]:
    """The A/A and A/B comparisons of the records under ``folder``, as the report makes them."""
    from parbench.results.paired import versus
    from parbench.results.records import check_folder
    from parbench.results.report import build_groups

    rows = {(row.backend, row.threads): row for group in build_groups(
        check_folder(folder).records) for row in group.rows if row.devices == 1}
    found = []
    for threads in (1, 2):
        found.append(_judged(f"A/A torch-dp / torch-single at {threads} thread(s)", "tie",
                             rows.get(("torch-dp", threads)),
                             rows.get(("torch-single", threads)), versus))
    for backend in PAIR:
        found.append(_judged(f"A/B {backend} at 2 threads / at 1", "faster",
                             rows.get((backend, 2)), rows.get((backend, 1)), versus))
    return found


def _judged(name: str, expected: str, a, b, versus) -> Judged:
    if a is None or b is None or a.throughput is None or b.throughput is None:
        raise ValueError(f"{name}: the records hold no ok run of one side")
    found = versus(a, b)
    interval = found.interval
    return Judged(name, expected, found.value, interval and interval.low,
                  interval and interval.high, interval and interval.method)


def measure(out: Path, rounds: int, warmup: int, seed: int) -> None:
    """One sweep: both backends at 1 device, 1 and 2 threads, ``rounds`` rounds."""
    command = [sys.executable, "-m", "parbench.cli", "compare", *PAIR, "--devices", "1",
               "--thread-counts", "1,2", "--repeats", str(rounds), "--warmup-runs",
               str(warmup), "--order-seed", str(seed), "--out", str(out),
               "--report-dir", str(out.with_name(out.name.removesuffix("-runs") + "-report"))]
    done = subprocess.run(command, stdout=subprocess.DEVNULL)
    if done.returncode != 0:
        raise RuntimeError(f"the sweep failed (exit {done.returncode}): {' '.join(command)}")


def _whole(text: str, name: str, low: int) -> int:
    try:
        value = int(text)
    except ValueError:
        value = low - 1
    if value < low:
        raise argparse.ArgumentTypeError(f"{name}: expected a whole number from {low}, got "
                                         f"{text!r}")
    return value


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    where = parser.add_mutually_exclusive_group(required=True)
    where.add_argument("--out", type=Path, help="measure into this folder, then judge it")
    where.add_argument("--records", type=Path, help="judge the records already here")
    parser.add_argument("--rounds", type=lambda t: _whole(t, "--rounds", 3), default=5)
    parser.add_argument("--warmup-runs", type=lambda t: _whole(t, "--warmup-runs", 0),
                        default=1)
    parser.add_argument("--order-seed", type=lambda t: _whole(t, "--order-seed", 0), default=1)
    args = parser.parse_args(argv)
    try:
        if args.out:
            measure(args.out, args.rounds, args.warmup_runs, args.order_seed)
        judged = judge(args.out or args.records)
    except (OSError, ValueError, RuntimeError) as err:
        print(f"aa_ab: error: {err}", file=sys.stderr)
        return EXIT_USAGE
    for found in judged:
        print(found.line())
    return 0 if all(found.as_expected for found in judged) else 1


if __name__ == "__main__":
    sys.exit(main())
