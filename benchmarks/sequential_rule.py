"""The stopping rule of `parbench compare --until-ci H --budget MINUTES`
(common/results/sequential.py), simulated at the noise this machine measured.

    python benchmarks/sequential_rule.py [--sweeps 4000] [--cv 0.158] [--difference 0.10]
                                         [--budget 45] [--records results/reference/runs]

Prints the measured noise (per-round log-ratios of paired configurations against the same pairs
unpaired, and each configuration's own spread), the headline round's seconds and the rounds the
budget allows, then three rules over simulated sweeps: the sequential rule, Bonferroni over the
looks and the naive one (95 % at every look). For each, how often two identical configurations
are called different (A/A) and how often a true difference is found in the right direction
(A/B), stopping at the first look that excludes 1 (stopping on "narrow" as well only ends
sweeps sooner, with fewer looks, so it cannot call more). --cv is the standard deviation of the
per-round log-ratio; --difference is relative (0.10: A is 10 % faster than B).
"""

from __future__ import annotations

import argparse
import glob
import itertools
import json
import math
import os
import sys
from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import numpy as np

from parbench.results.sequential import (
    DEFAULT_BUDGET_MINUTES,
    MAX_ROUNDS,
    SequentialPlan,
    budget_seconds,
    rounds_that_fit,
    running_t,
)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RECORDS = os.path.join(ROOT, "results", "reference", "runs")
# Measured by measured_noise(RECORDS): the pooled standard deviation of the per-round log-ratio
# over 173 pairs of configurations (same spec, same device count) of the reference sweep,
# results/reference/runs (AMD EPYC, 2 vCPUs, 3 round-robin rounds of 64-step runs, 2026-12-03).
PAIRED_LOG_SD = 0.158
# The headline sweep (issue 42): each framework's representative at 1 and 2 devices.
HEADLINE = ((1, "torch-single"), (1, "tf-single"), (1, "paddle-single"), (1, "jax-single"),
            (2, "torch-ddp"), (2, "tf-mirrored"), (2, "paddle-launch"), (2, "jax-sharded"))
# Records of schema 10 carry no sweep id: a gap this long between two records starts a new
# sweep (one run takes under a minute; the reference's 3 re-runs came 1.5 hours later).
SWEEP_GAP_S = 600
SEED = 1  # not the calibration's seed 0: these sweeps must be new to the rule


def load(folder: str) -> list[dict]:
    """The ok records of ``folder``, each with ``_sweep``: its sweep's id, or for records
    without one, the index of its run of records with no gap over SWEEP_GAP_S."""
    paths = sorted(glob.glob(os.path.join(folder, "*.json")))
    records = [json.loads(Path(path).read_text()) for path in paths]
    records = sorted((r for r in records if r.get("status") == "ok"), key=lambda r: r["created"])
    cluster, last = 0, None
    for record in records:
        created = datetime.fromisoformat(record["created"])
        if last is not None and (created - last).total_seconds() > SWEEP_GAP_S:
            cluster += 1
        last = created
        record["_sweep"] = (record.get("sweep") or {}).get("id", f"gap-{cluster}")
    return records


@dataclass(frozen=True)
class Spread:
    values: np.ndarray  # one standard deviation per pair (or configuration)
    dof: np.ndarray  # its degrees of freedom

    @property
    def pooled(self) -> float:
        # the variances averaged by degrees of freedom: unbiased for a common variance, where
        # the median of 2-dof deviations sits at 0.83 of the true one
        return float(math.sqrt((self.dof * self.values ** 2).sum() / self.dof.sum()))

    def text(self) -> str:
        return (f"median {np.median(self.values):.3f}, range {self.values.min():.3f}-"
                f"{self.values.max():.3f}, pooled {self.pooled:.3f}")


def _log_throughputs(records: list[dict]) -> dict[tuple, dict[tuple, float]]:
    """(spec, devices, backend) -> {(sweep, round): log throughput}."""
    cells: dict[tuple, dict[tuple, float]] = defaultdict(dict)
    for r in records:
        key = (r["spec_sha256"], r["world_size"], r["backend"])
        cells[key][(r["_sweep"], r["repeat"])] = math.log(r["metrics"]["throughput"])
    return cells


def measured_noise(records: list[dict]) -> tuple[Spread, Spread, Spread]:
    """(paired, the same pairs unpaired, per configuration): the per-round log-ratio's standard
    deviation of each pair of configurations with the same spec and device count over the rounds
    both ran in one sweep; sqrt(s_A^2 + s_B^2) over the same rounds; each configuration's
    standard deviation of log throughput over all its repeats (the report's unpaired cv)."""
    cells = _log_throughputs(records)
    paired, unpaired, dof = [], [], []
    for a, b in itertools.combinations(sorted(cells), 2):
        common = sorted(set(cells[a]) & set(cells[b]))
        if a[:2] != b[:2] or len(common) < 2:
            continue
        xa, xb = (np.array([cells[c][k] for k in common]) for c in (a, b))
        paired.append(np.std(xa - xb, ddof=1))
        unpaired.append(math.hypot(np.std(xa, ddof=1), np.std(xb, ddof=1)))
        dof.append(len(common) - 1)
    own = [np.std(list(v.values()), ddof=1) for v in cells.values() if len(v) >= 2]
    own_dof = [len(v) - 1 for v in cells.values() if len(v) >= 2]
    return (Spread(np.array(paired), np.array(dof)), Spread(np.array(unpaired), np.array(dof)),
            Spread(np.array(own), np.array(own_dof)))


def round_seconds(records: list[dict], configs=HEADLINE) -> float:
    """One round of ``configs``: the sum of their mean duration_s (launch to record; the gaps
    between the records' creation times match it, so compare adds nothing between runs)."""
    total = 0.0
    for devices, backend in configs:
        runs = [r["duration_s"] for r in records
                if r["backend"] == backend and r["world_size"] == devices]
        if not runs:
            raise ValueError(f"no ok record of {backend} x{devices} to time a round with")
        total += float(np.mean(runs))
    return total


@dataclass(frozen=True)
class Simulated:
    called: float  # share of sweeps in which a look excluded 1
    right: float  # ... and in the direction of the true difference
    median_stop: float | None  # the round of the first such look, median over those sweeps


def first_calls(log_ratios: np.ndarray, level: float) -> tuple[np.ndarray, np.ndarray,
                                                                   np.ndarray]:
    """Per sweep (row of per-round log-ratios), looked at from round FIRST_LOOK at ``level``:
    whether a look excluded 1, the round of the first that did, and its direction (the sign of
    its log-ratio)."""
    from scipy.special import stdtrit

    mean, se, n = running_t(log_ratios)
    excludes = np.abs(mean) > stdtrit(n - 1, 0.5 + level / 2) * se
    first = excludes.argmax(axis=1)
    return (excludes.any(axis=1), n[first],
            np.sign(mean[np.arange(len(log_ratios)), first]))


def simulate(max_rounds: int, level: float, difference: float, sd: float, sweeps: int,
             seed: int = SEED, tails: str = "normal") -> Simulated:
    """Sweeps of ``max_rounds`` rounds with per-round log-ratio log(1 + difference) + noise of
    standard deviation ``sd`` (normal, or Student's t with 3 dof for heavy tails), each looked at
    from round FIRST_LOOK at ``level``, stopping at the first interval that excludes 1."""
    rng = np.random.default_rng(seed)
    noise = (rng.standard_normal((sweeps, max_rounds)) if tails == "normal"
             else rng.standard_t(3, (sweeps, max_rounds)) / math.sqrt(3))
    called, stop, sign = first_calls(math.log1p(difference) + sd * noise, level)
    right = called & (sign == np.sign(difference)) if difference else np.zeros(sweeps, bool)
    return Simulated(float(called.mean()), float(right.mean()),
                     float(np.median(stop[called])) if called.any() else None)


def rules(max_rounds: int) -> dict[str, float]:
    """Each rule's per-look level for a sweep of ``max_rounds`` rounds."""
    plan = SequentialPlan(max_rounds)
    return {"sequential (Pocock-type repeated t)": plan.level,
            "Bonferroni over the looks": 1 - plan.alpha / plan.looks,
            "naive": 0.95}


class OneLineParser(argparse.ArgumentParser):
    def error(self, message: str):  # bad input: one line, exit 2
        self.exit(2, f"{self.prog}: {message}\n")


def _checked(kind, test, expected: str):
    def parse(text: str):
        try:
            value = kind(text)
        except ValueError:
            value = None
        if value is None or not test(value):
            raise argparse.ArgumentTypeError(f"expected {expected}, got {text!r}")
        return value
    return parse


def arguments(argv: list[str] | None) -> argparse.Namespace:
    parser = OneLineParser(prog="sequential_rule.py", description=__doc__.splitlines()[0])
    parser.add_argument("--sweeps", type=_checked(int, lambda v: 100 <= v <= 200_000,
                                                  "a whole number from 100 to 200000"),
                        default=4000)
    parser.add_argument("--cv", type=_checked(float, lambda v: math.isfinite(v) and 0 < v < 2,
                                              "a standard deviation in (0, 2)"),
                        default=PAIRED_LOG_SD)
    parser.add_argument("--difference", type=_checked(
        float, lambda v: math.isfinite(v) and -1 < v, "a relative difference above -1"),
        default=0.10)
    parser.add_argument("--budget", type=_checked(float, lambda v: math.isfinite(v) and v > 0,
                                                  "minutes above 0"),
                        default=DEFAULT_BUDGET_MINUTES)
    parser.add_argument("--records", default=RECORDS)
    args = parser.parse_args(argv)
    if not glob.glob(os.path.join(args.records, "*.json")):
        parser.error(f"--records: no records in {args.records}")
    return args


def main(argv: list[str] | None = None) -> int:
    args = arguments(argv)
    records = load(args.records)
    round_s = round_seconds(records)
    try:  # before any output: bad input is one line and nothing else
        rounds = rounds_that_fit(budget_seconds(args.budget), round_s, round_s)
    except ValueError as error:
        print(f"sequential_rule.py: {error}", file=sys.stderr)
        return 2
    paired, unpaired, own = measured_noise(records)
    cpus = sorted({str(r["env"].get("cpu_model")) for r in records})
    print(f"records: {os.path.relpath(args.records, ROOT)}, {len(records)} ok, {', '.join(cpus)}")
    print(f"per-round log-ratio sd, paired, {len(paired.values)} pairs: {paired.text()}")
    print(f"the same pairs unpaired, sqrt(sA^2 + sB^2): {unpaired.text()}")
    print(f"each configuration's sd of log throughput, {len(own.values)}: {own.text()}")
    capped = " (the most a plan takes)" if rounds == MAX_ROUNDS else ""
    print(f"headline round ({len(HEADLINE)} configurations' mean duration_s): {round_s:.1f} s; "
          f"a {args.budget:g} min budget fits {rounds} rounds{capped}")
    print(f"simulated: {args.sweeps} sweeps of {rounds} rounds, per-round log-ratio sd "
          f"{args.cv:g}, A/B difference {100 * args.difference:+g}%, seed {SEED}")
    margin = 1.96 * math.sqrt(0.05 * 0.95 / args.sweeps)
    for name, level in rules(rounds).items():
        aa = simulate(rounds, level, 0.0, args.cv, args.sweeps)
        ab = simulate(rounds, level, args.difference, args.cv, args.sweeps, seed=SEED + 1)
        stop = f", median stop at round {ab.median_stop:g}" if ab.median_stop else ""
        print(f"{name}, {100 * level:.2f}% per look: A/A called different in "
              f"{100 * aa.called:.1f}% of sweeps (5% would show +-{100 * margin:.1f}); "
              f"A/B found in {100 * ab.right:.1f}% (wrong direction "
              f"{100 * (ab.called - ab.right):.1f}%){stop}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
