"""The report's figures as PNG bytes, drawn with matplotlib's Agg backend. Only html_report
imports this module, and only when plots are asked for, so Markdown/CSV need no matplotlib.

Each figure has one panel per framework (frameworks are never mixed in one set of bars or
lines), but the headline's forest plot, whose point is to set them side by side; legends sit
outside the axes, and every figure is at most WIDTH inches wide, so the page shows it whole
in a 1400-px window."""

from __future__ import annotations

import io
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import matplotlib
import numpy as np
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Patch
from matplotlib.ticker import MaxNLocator

from .headline import HEADING, Entry, Line, headline_lines
from .rows import throughput_column

if TYPE_CHECKING:  # types only
    from parbench.contract.tasks import Task

    from .rows import Group, Row

WIDTH = 13.0  # inches at 100 dpi: 1300 px, inside a 1400-px window with the page's margins
NOISY_HATCH = "///"
LINESTYLES = ("-", "--", ":", "-.")


@dataclass(frozen=True)
class Plot:
    spec: str  # spec_sha256 of the group it shows
    kind: str
    table: str  # the caption of the table the page shows it under, or the heading of the
    # section it opens (the headline's forest plot)
    title: str
    png: bytes

    @property
    def name(self) -> str:
        """File stem; the spec is a checked hex digest, so no record string reaches a path."""
        return f"{self.spec[:10]}-{self.kind}"


def _by_framework(rows: list[Row]) -> dict[str, list[Row]]:
    frameworks: dict[str, list[Row]] = defaultdict(list)
    for row in rows:
        frameworks[row.framework].append(row)
    return frameworks


def _series(rows: list[Row]) -> list[str]:
    return list(dict.fromkeys(row.series for row in rows))


def _figure(height: float, rows: int = 1, widths: list[int] | None = None,
            **subplots) -> tuple[Figure, np.ndarray]:
    """A figure WIDTH wide with a grid of panels (columns as wide as ``widths`` says)."""
    # Figure + FigureCanvasAgg directly: no pyplot, so no global figure state or GUI backend
    fig = Figure(figsize=(WIDTH, height), layout="constrained")
    FigureCanvasAgg(fig)
    columns = len(widths) if widths else 1
    return fig, fig.subplots(rows, columns, squeeze=False, width_ratios=widths, **subplots)


def _repeat_dots(ax: Axes, x: float, values: list[float], width: float) -> None:
    """Each repeat as a dot on its bar, spread sideways so equal values stay visible."""
    spread = np.linspace(-width / 4, width / 4, len(values)) if len(values) > 1 else [0.0]
    ax.plot(x + np.asarray(spread), values, "o", color="black", markersize=3.5, zorder=3)


def _throughput_panel(ax: Axes, rows: list[Row], devices: list[int]) -> None:
    """One group of bars per backend, one bar per device count: median samples/s, repeats as
    dots, the scaling efficiency above the bar, hatched when the cell is noisy."""
    series, width = _series(rows), 0.8 / len(devices)
    for row in rows:
        at = devices.index(row.devices)
        x = series.index(row.series) - 0.4 + (at + 0.5) * width
        noisy = row.cells["noisy"] != "no"
        ax.bar(x, row.throughput, width * 0.92, color=f"C{at}", edgecolor="white",
               linewidth=0, hatch=NOISY_HATCH if noisy else None)
        repeats = [m["throughput"] for m in row.metrics]
        _repeat_dots(ax, x, repeats, width)
        if row.cells["scaling eff."] is not None:
            ax.annotate(f"{row.cells['scaling eff.']:.2f}", (x, max(repeats)),
                        xytext=(0, 3), textcoords="offset points", ha="center", fontsize=7.5)
    ax.set_xticks(range(len(series)), series, rotation=20, ha="right")
    ax.set_xlim(-0.6, len(series) - 0.4)


def _throughput(rows: list[Row]) -> Figure:
    frameworks = _by_framework(rows)
    devices = sorted({row.devices for row in rows})
    fig, axes = _figure(4.8, widths=[len(_series(of)) for of in frameworks.values()],
                        sharey=True)
    for ax, (framework, of) in zip(axes[0], frameworks.items()):
        _throughput_panel(ax, of, devices)
        ax.set_title(framework)
    axes[0][0].set_ylabel(f"{throughput_column(rows[0].task)} (bar: median, dots: repeats)")
    handles = [Patch(color=f"C{i}", label=f"{n} device(s)") for i, n in enumerate(devices)]
    handles += [Patch(facecolor="grey", edgecolor="white", hatch=NOISY_HATCH,
                      label="noisy (cv > 5 % or busy machine)"),
                Line2D([], [], marker="o", color="black", linestyle="", markersize=3.5,
                       label="one repeat")]
    fig.legend(handles=handles, loc="outside right upper", fontsize="small", frameon=False)
    fig.supxlabel("number above a bar: scaling efficiency against the framework's 1-device "
                  "reference", fontsize="small")
    return fig


def _curve_x(task: type[Task], metrics: dict, steps: list[int]) -> list[float]:
    """The evaluation curve's x: steps, or the task's unit seen by then (tokens)."""
    per_step = metrics.get("items_per_step") if task.curve_by_items else None
    return [step * per_step for step in steps] if per_step else steps


def _curves(rows: list[Row]) -> Figure:
    """Training loss (top) and the task's evaluation curve (bottom: test accuracy, or a
    language model's validation loss; both against tokens seen for it) per framework; colour
    per backend, line style per device count, earlier rows drawn wider so that curves of the same
    computation, which lie on each other, all stay visible; the legend under each framework's
    column."""
    frameworks = _by_framework(rows)
    devices = sorted({row.devices for row in rows})
    task = rows[0].task
    key, label = task.curve_metric
    fig, axes = _figure(7.5, rows=2, widths=[1] * len(frameworks), sharex="col")
    for (loss, accuracy), (framework, of) in zip(axes.T, frameworks.items()):
        series = _series(of)
        for row in of:
            style = {"color": f"C{series.index(row.series)}", "label": row.label,
                     "linestyle": LINESTYLES[devices.index(row.devices) % len(LINESTYLES)],
                     "linewidth": 1.2 + 3 * (1 - of.index(row) / len(of))}
            longest = max(row.metrics, key=lambda m: len(m["accuracy_curve"]))
            curve = row.per_position(lambda m: m["loss_curve"])
            loss.plot(_curve_x(task, longest, list(range(1, len(curve) + 1))), curve, **style)
            points = row.per_position(lambda m: [e[key] for e in m["accuracy_curve"]])
            steps = [e["step"] for e in longest["accuracy_curve"]]
            accuracy.plot(_curve_x(task, longest, steps), points, marker="o", markersize=3,
                          **style)
        _floor_line(accuracy, [m for row in of for m in row.metrics], key)
        loss.set_title(framework)
        accuracy.set_xlabel(f"{task.unit} seen" if task.curve_by_items else "step")
        accuracy.xaxis.set_major_locator(MaxNLocator(integer=True))
        accuracy.legend(loc="upper center", bbox_to_anchor=(0.5, -0.2), ncols=2,
                        fontsize="small", frameon=False)
    axes[0][0].set_ylabel("training loss (median over repeats)")
    axes[1][0].set_ylabel(f"{label} (median over repeats)")
    return fig


def _floor_line(ax: Axes, metrics: list[dict], key: str) -> None:
    """The lowest loss any model can reach on the data, where the records know it (the
    synthetic language's): what a validation-loss curve approaches."""
    floors = {m.get("loss_floor") for m in metrics} - {None}
    if key == "loss" and len(floors) == 1:
        floor = floors.pop()
        ax.axhline(floor, color="grey", linestyle=":", linewidth=1)
        ax.annotate(f"floor {floor:.3f}", (0, floor), xycoords=("axes fraction", "data"),
                    xytext=(2, 2), textcoords="offset points", fontsize="x-small", color="grey")


def _rows_axis(ax: Axes, rows: list[Row]) -> None:
    """Rows on the y axis, top-down in report order, labelled with backend and devices."""
    ax.set_yticks(range(len(rows)), [row.label for row in rows])
    ax.set_ylim(len(rows) - 0.5, -0.5)


def _framework_colors(rows: list[Row]) -> list[str]:
    frameworks = list(_by_framework(rows))
    return [f"C{frameworks.index(row.framework)}" for row in rows]


def _step_times(rows: list[Row]) -> Figure:
    fig, ((ax,),) = _figure(1.2 + 0.3 * len(rows))
    median = np.array([r.cells["step ms p50"] for r in rows])
    p10 = np.array([r.median(lambda m: m["step_time_ms"]["p10"]) for r in rows])
    p90 = np.array([r.cells["step ms p90"] for r in rows])
    for y, (m, lo, hi, color) in enumerate(zip(median, p10, p90, _framework_colors(rows))):
        ax.errorbar(m, y, xerr=[[m - lo], [hi - m]], fmt="o", capsize=4, color=color)
    ax.set_xlabel("steady step time ms (dot: median, bar: p10-p90)")
    ax.set_xlim(left=0)
    _rows_axis(ax, rows)
    return fig


def _rank_bars(ax: Axes, rows: list[Row], column: str, xlabel: str) -> int:
    """Horizontal bars, one per rank or device, grouped per row; returns the most ranks."""
    lists = [row.cells[column] if isinstance(row.cells[column], list) else [] for row in rows]
    widest = max(map(len, lists))
    height = 0.8 / widest
    for j in range(widest):
        at = [i for i, values in enumerate(lists) if len(values) > j]
        ax.barh([i - 0.4 + (j + 0.5) * height for i in at], [lists[i][j] for i in at],
                height * 0.92, color=f"C{j}")
    ax.set_xlabel(xlabel)
    _rows_axis(ax, rows)
    return widest


def _memory(rows: list[Row]) -> Figure:
    on_devices = [r for r in rows if isinstance(r.cells["device MiB per device"], list)]
    fig, axes = _figure(1.4 + 0.3 * len(rows), widths=[1, 1] if on_devices else [1])
    widest = _rank_bars(axes[0][0], rows, "RSS MiB per rank", "peak host RSS MiB per rank")
    if on_devices:
        widest = max(widest, _rank_bars(axes[0][1], on_devices, "device MiB per device",
                                        "peak device MiB per device"))
    fig.legend(handles=[Patch(color=f"C{j}", label=f"rank / device {j}")
                        for j in range(widest)],
               loc="outside right upper", fontsize="small", frameon=False)
    return fig


CONFUSION_COLUMNS = 5


def _confusion(rows: list[Row]) -> Figure | None:
    """Each row's final confusion matrix (its first ok repeat), as a share of each true
    class, so rows with different test-set sizes read alike; None when no record has one
    (records before schema 3)."""
    shown = [(row, np.asarray(m["confusion_matrix"], float)) for row in rows
             for m in row.metrics[:1] if m.get("confusion_matrix")]
    if not shown:
        return None
    columns = min(CONFUSION_COLUMNS, len(shown))
    lines = -(-len(shown) // columns)
    fig, axes = _figure(0.4 + 2.6 * lines, rows=lines, widths=[1] * columns)
    for ax in axes.flat[len(shown):]:
        ax.set_axis_off()
    for ax, (row, counts) in zip(axes.flat, shown):
        share = counts / np.maximum(counts.sum(axis=1, keepdims=True), 1)
        image = ax.imshow(share, vmin=0, vmax=1, cmap="Blues")
        ax.set_title(row.label, fontsize="small")
        ax.set_xlabel("predicted", fontsize="x-small")
        ax.set_ylabel("true", fontsize="x-small")
        ax.tick_params(labelsize="x-small")
    fig.colorbar(image, ax=axes, shrink=0.6, label="share of the true class")
    return fig


FOREST_COLUMNS = 3  # headline lines side by side; more lines wrap onto further rows


def forest_points(entries: list[Entry]) -> list[tuple[str, float, float | None, float | None]]:
    """(label, vs fastest, interval low, high) of each entry of a headline line, top-down: what
    the forest plot draws, the headline's own 'vs fastest' figures."""
    return [(f"{entry.rank.text()}  {entry.row.framework}: {entry.row.series}",
             entry.versus.value, *((entry.versus.interval.low, entry.versus.interval.high)
                                   if entry.versus.interval else (None, None)))
            for entry in entries]


def _forest_panel(ax: Axes, line: Line) -> None:
    """One headline line: each framework's ratio to the fastest as a dot, its 95% interval as
    a bar, a line at 1; frameworks that share a rank (a tie) share a colour."""
    places = list(dict.fromkeys(entry.rank.place for entry in line.entries))
    points = forest_points(line.entries)
    for y, (entry, (_, value, low, high)) in enumerate(zip(line.entries, points)):
        color = f"C{places.index(entry.rank.place) % 10}"
        xerr = None if low is None else [[value - low], [high - value]]
        # the fastest is 1 by definition (a diamond); hollow: a ratio without an interval
        ax.errorbar(value, y, xerr=xerr, fmt="D" if y == 0 else "o", capsize=4, color=color,
                    markersize=7, markerfacecolor="white" if y and low is None else color)
    ax.axvline(1.0, color="grey", linestyle="--", linewidth=1)
    ax.set_yticks(range(len(points)), [label for label, *_ in points])
    ax.set_ylim(len(line.entries) - 0.5, -0.5)
    ax.set_title(line.label)


def _forest(rows: list[Row]) -> Figure | None:
    """The headline as a picture, one panel per headline line; None where no line has a
    framework to show."""
    lines = [line for line in headline_lines(rows) if line.entries]
    if not lines:
        return None
    columns = min(FOREST_COLUMNS, len(lines))
    panels = -(-len(lines) // columns)
    tallest = max(len(line.entries) for line in lines)
    fig, axes = _figure(0.75 + panels * (0.35 + 0.22 * tallest), rows=panels,
                        widths=[1] * columns, sharex=True)
    for ax in axes.flat[len(lines):]:
        ax.set_axis_off()
    for ax, line in zip(axes.flat, lines):
        _forest_panel(ax, line)
    highest = max(high or value for line in lines
                  for _, value, _, high in forest_points(line.entries))
    axes.flat[0].set_xlim(0, max(1.05, highest * 1.05))
    fig.supxlabel(f"vs fastest: {throughput_column(rows[0].task)} / the fastest's (diamond: "
                  "the fastest); bar: 95% interval (hollow dot: none); one colour, one rank: "
                  "tied frameworks share both (=); ? undecided", fontsize="small")
    return fig


FIGURES: tuple[tuple[str, str, str, Callable[[list[Row]], Figure | None]], ...] = (
    ("forest", HEADING, "Headline: each framework against the fastest", _forest),
    ("throughput", "Performance", "Throughput per backend and device count", _throughput),
    ("step-time", "Performance", "Step time distribution", _step_times),
    ("memory", "Accuracy and memory", "Peak memory per rank and per device", _memory),
    ("curves", "Accuracy and memory", "Training loss and evaluation curve", _curves),
    ("confusion", "Accuracy and memory", "Confusion matrix of the final evaluation",
     _confusion),
)


def make_plots(groups: list[Group]) -> list[Plot]:
    """Every figure of every spec group that has an ok run."""
    plots = []
    # record strings are labels, never TeX: a '$' in a backend name must not break drawing
    with matplotlib.rc_context({"text.parse_math": False, "hatch.color": "white"}):
        for group in groups:
            rows = [row for row in group.rows if row.metrics]
            for kind, table, title, draw in FIGURES if rows else ():
                fig = draw(rows)
                if fig is None:
                    continue
                fig.suptitle(f"{title} (spec {group.sha[:10]})")
                png = io.BytesIO()
                fig.savefig(png, format="png", dpi=100)
                plots.append(Plot(group.sha, kind, table, f"{title}, spec {group.sha[:10]}",
                                  png.getvalue()))
    return plots
