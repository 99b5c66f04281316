"""The curves figure of the language model: every framework's validation loss drawn against the
language's floor, the value the committed recipe run approaches
(results/reference/lm-curve-runs)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from parbench.results.groups import build_groups

RUNS = Path(__file__).resolve().parents[1] / "results" / "reference" / "lm-curve-runs"


def test_each_validation_panel_draws_the_records_floor_under_its_curve() -> None:
    pytest.importorskip("matplotlib")
    from parbench.results import plots

    records = [json.loads(path.read_text()) for path in sorted(RUNS.glob("*.json"))]
    [group] = build_groups(records)
    fig = plots._curves(group.rows)
    floor = records[0]["metrics"]["loss_floor"]
    evaluation_panels = fig.axes[len(fig.axes) // 2:]
    assert len(evaluation_panels) == 4
    for ax in evaluation_panels:
        flat = [line for line in ax.lines if len(set(line.get_ydata())) == 1]
        assert [line.get_ydata()[0] for line in flat] == [floor]
        curve = [line for line in ax.lines if line not in flat][0].get_ydata()
        assert min(curve) > floor and curve[-1] < curve[0]
