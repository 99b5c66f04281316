"""The report's figures as PNG bytes, drawn with matplotlib's Agg backend. Only report.py
imports this module, and only when plots are asked for, so Markdown/CSV need no matplotlib."""

from __future__ import annotations

import io
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import matplotlib
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

if TYPE_CHECKING:  # types only: report.py must not import matplotlib
    from .report import Group, Row


@dataclass(frozen=True)
class Plot:
    spec: str  # spec_sha256 of the group it shows
    kind: str
    title: str
    png: bytes

    @property
    def name(self) -> str:
        """File stem; the spec is a checked hex digest, so no record string reaches a path."""
        return f"{self.spec[:10]}-{self.kind}"


def _figure(panels: int) -> tuple[Figure, list[Axes]]:
    # Figure + FigureCanvasAgg directly: no pyplot, so no global figure state or GUI backend
    fig = Figure(figsize=(6.4 * panels, 4.4), layout="constrained")
    FigureCanvasAgg(fig)
    return fig, list(fig.subplots(1, panels, squeeze=False)[0])


def _label_rows(ax: Axes, rows: list[Row]) -> None:
    ax.set_xticks(range(len(rows)), [r.label for r in rows], rotation=25, ha="right")


def _scaling(rows: list[Row]) -> Figure:
    fig, (throughput, efficiency) = _figure(2)
    series: dict[str, list[Row]] = defaultdict(list)
    for row in rows:
        series[row.series].append(row)  # rows are sorted by devices
    for color, (name, points) in enumerate(series.items()):
        style = {"marker": "o", "label": name, "color": f"C{color}"}  # same color in both panels
        devices = [r.devices for r in points]
        median = [r.cells["samples/s"] for r in points]
        spread = [[m - r.cells["samples/s min"] for m, r in zip(median, points)],
                  [r.cells["samples/s max"] - m for m, r in zip(median, points)]]
        throughput.errorbar(devices, median, yerr=spread, capsize=3, **style)
        known = [(r.devices, r.cells["scaling eff."]) for r in points
                 if r.cells["scaling eff."] is not None]
        if known:
            efficiency.plot(*zip(*known), **style)
    efficiency.axhline(1.0, color="grey", linestyle="--", linewidth=1, label="ideal")
    throughput.set(xlabel="devices", ylabel="samples/s (median, bars min-max)")
    efficiency.set(xlabel="devices", ylabel="scaling efficiency")
    for ax in (throughput, efficiency):
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.legend(fontsize="small")
    return fig


def _curves(rows: list[Row]) -> Figure:
    fig, (loss, accuracy) = _figure(2)
    for row in rows:
        curve = row.per_position(lambda m: m["loss_curve"])
        loss.plot(range(1, len(curve) + 1), curve, label=row.label)
        evals = max((m["accuracy_curve"] for m in row.metrics), key=len)
        points = row.per_position(lambda m: [e["accuracy"] for e in m["accuracy_curve"]])
        accuracy.plot([e["step"] for e in evals], points, marker="o", label=row.label)
    loss.set(xlabel="step", ylabel="training loss (median over repeats)")
    accuracy.set(xlabel="step", ylabel="test accuracy (median over repeats)")
    for ax in (loss, accuracy):
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.legend(fontsize="small")
    return fig


def _step_times(rows: list[Row]) -> Figure:
    fig, (ax,) = _figure(1)
    median = [r.cells["step ms p50"] for r in rows]
    p10 = [r.median(lambda m: m["step_time_ms"]["p10"]) for r in rows]
    p90 = [r.cells["step ms p90"] for r in rows]
    ax.errorbar(range(len(rows)), median, yerr=[[m - lo for m, lo in zip(median, p10)],
                                                [hi - m for m, hi in zip(median, p90)]],
                fmt="o", capsize=4)
    ax.set_ylabel("steady step time ms (median, bars p10-p90)")
    _label_rows(ax, rows)
    return fig


def _bars(ax: Axes, rows: list[Row], column: str, what: str, ylabel: str) -> None:
    """Grouped bars: one group per row, one bar per rank or device."""
    lists = [row.cells[column] if isinstance(row.cells[column], list) else [] for row in rows]
    widest = max(map(len, lists))
    width = 0.8 / widest
    for j in range(widest):
        at = [i for i, values in enumerate(lists) if len(values) > j]
        ax.bar([i - 0.4 + (j + 0.5) * width for i in at], [lists[i][j] for i in at], width,
               label=f"{what} {j}")
    ax.set_ylabel(ylabel)
    ax.legend(fontsize="small")
    _label_rows(ax, rows)


def _memory(rows: list[Row]) -> Figure:
    on_devices = [r for r in rows if isinstance(r.cells["device MiB per device"], list)]
    fig, axes = _figure(2 if on_devices else 1)
    _bars(axes[0], rows, "RSS MiB per rank", "rank", "peak host RSS MiB per rank")
    if on_devices:
        _bars(axes[1], on_devices, "device MiB per device", "device",
              "peak device MiB per device")
    return fig


FIGURES: tuple[tuple[str, str, Callable[[list[Row]], Figure]], ...] = (
    ("scaling", "Throughput and scaling efficiency vs devices", _scaling),
    ("curves", "Training loss and test accuracy, all backends", _curves),
    ("step-time", "Step time distribution", _step_times),
    ("memory", "Peak memory per rank and per device", _memory),
)


def make_plots(groups: list[Group]) -> list[Plot]:
    """Every figure of every spec group that has an ok run."""
    plots = []
    # record strings are labels, never TeX: a '$' in a backend name must not break drawing
    with matplotlib.rc_context({"text.parse_math": False}):
        for group in groups:
            rows = [row for row in group.rows if row.metrics]
            for kind, title, draw in FIGURES if rows else ():
                fig = draw(rows)
                fig.suptitle(f"{title} (spec {group.sha[:10]})")
                png = io.BytesIO()
                fig.savefig(png, format="png", dpi=100)
                plots.append(Plot(group.sha, kind, f"{title}, spec {group.sha[:10]}",
                                  png.getvalue()))
    return plots
