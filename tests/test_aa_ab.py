"""The comparison on questions whose answer is known (benchmarks/aa_ab.py), judged again from
the committed sweep: torch-dp against torch-single at 1 device on a CPU is one computation
under two names (a tie), 2 threads against 1 on 2 cores is faster. Measuring is the
benchmark's; here its records are judged, so the check cannot flake with the machine's load."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
RECORDS = ROOT / "results" / "reference" / "aa-ab-runs"


def _aa_ab():
    spec = importlib.util.spec_from_file_location("aa_ab", ROOT / "benchmarks" / "aa_ab.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["aa_ab"] = module  # its dataclass looks its module up there
    spec.loader.exec_module(module)
    return module


def test_the_committed_sweep_ties_the_aa_and_tells_the_ab_apart():
    judged = {found.name: found for found in _aa_ab().judge(RECORDS)}
    assert len(judged) == 4
    for threads in (1, 2):
        aa = judged[f"A/A torch-dp / torch-single at {threads} thread(s)"]
        assert aa.verdict == "tie" and aa.method == "paired t, 5 rounds"
    for backend in ("torch-single", "torch-dp"):
        ab = judged[f"A/B {backend} at 2 threads / at 1"]
        assert ab.verdict == "faster" and ab.low > 1.3  # two cores: well over one's speed


def test_a_judge_that_ignored_the_pairing_would_say_less(monkeypatch):
    """The same records compared unpaired (each row's own interval, half-widths in
    quadrature): every interval is wider than the paired one, so pairing is what the
    judgement stands on here, not a bystander."""
    from parbench.results import paired

    aa_ab = _aa_ab()
    with_pairs = {found.name: found for found in aa_ab.judge(RECORDS)}
    monkeypatch.setattr(paired, "paired_ratio", lambda a, b, factor=1.0: None)
    without = {found.name: found for found in aa_ab.judge(RECORDS)}
    for name, found in with_pairs.items():
        unpaired = without[name]
        assert unpaired.method in ("t", "bootstrap")
        assert unpaired.high / unpaired.low > found.high / found.low, name


@pytest.mark.parametrize("argv,says", [
    (["--records", "/nonexistent/aa-ab"], "no ok run of one side"),
    (["--out", "x", "--rounds", "2"], "--rounds: expected a whole number from 3"),
])
def test_bad_input_exits_2(argv, says, capsys):
    try:
        code = _aa_ab().main(argv)
    except SystemExit as exit_:
        code = exit_.code
    assert code == 2 and says in capsys.readouterr().err
