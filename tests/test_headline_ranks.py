"""The headline decides honestly: competition ranks over tie groups (tied frameworks share a
rank, ties join through each other, an undecidable pair counts as a tie and says so), each
framework shown by its declared representative however fast its other approaches ran, those
other approaches set against it in a table of their own, and the forest plot drawing exactly
the headline's 'vs fastest' figures before any table. Rows are built from hand-made records;
each speed's 95% interval is t over three repeats at +-1 %, so +-2.5 % (t(0.975, 2) = 4.30), and
the ratio of two such rows +-3.5 % (not run in one sweep: the half-widths in quadrature)."""

from __future__ import annotations

import random
from types import SimpleNamespace

import pytest
from test_report import markdown_tables
from test_report_intervals import TITLE, repeats

from parbench.results import headline
from parbench.results.groups import build_groups
from parbench.results.html_report import to_html
from parbench.results.intervals import Interval, Ratio, ratio, t_interval
from parbench.results.ranks import Rank, competition_ranks
from parbench.results.report import Section, Table, render
from parbench.run.registry import FRAMEWORKS

OTHERS = ("Other approaches against their framework's representative", TITLE)
LAUNCHERS = {"torch-ddp": "torchrun", "paddle-launch": "paddle-launch"}


def around(speed: float) -> list[float]:
    """Three repeats whose t interval is about speed +-2.5 %."""
    return [0.99 * speed, speed, 1.01 * speed]


def at(backend: str, framework: str, devices: int, speed: float, **kw) -> list[dict]:
    kw.setdefault("launcher", LAUNCHERS.get(backend, "python"))
    return repeats(backend, framework, devices, around(speed), **kw)


def ranked(records: list[dict]) -> list[tuple[str, str, str]]:
    """(devices, rank, framework) of each headline row."""
    return [(row["devices"], row["rank"], row["framework"])
            for row in markdown_tables(render(records))[("Headline", TITLE)]]


def rows_of(records: list[dict]) -> list:
    [group] = build_groups(records)
    return group.rows


# --- the ranking rule, on its own


def fake(*speeds: float) -> list[SimpleNamespace]:
    return [SimpleNamespace(name=name, throughput=speed) for name, speed in zip("ABCDE", speeds)]


def tied_by(pairs: dict[str, bool | None]):
    """A tie test from a table of pairs ('AB': True); a pair not in it is decided apart."""
    return lambda a, b: pairs.get(a.name + b.name, pairs.get(b.name + a.name, False))


def test_ties_join_through_each_other_into_one_shared_rank() -> None:
    """A ties B and B ties C, though A beats C: all three share rank 1; D, beaten by all,
    is 4 (1 + the three ranked above it), not 2."""
    rows = fake(100.0, 95.0, 90.0, 50.0)
    ranks = competition_ranks(rows, tied_by({"AB": True, "BC": True}))
    assert [rank.text() for rank in ranks] == ["=1", "=1", "=1", "4"]


def test_a_framework_tied_with_the_second_shares_the_second_rank() -> None:
    ranks = competition_ranks(fake(100.0, 80.0, 78.0, 50.0), tied_by({"BC": True}))
    assert [rank.text() for rank in ranks] == ["1", "=2", "=2", "4"]


def test_an_undecidable_pair_is_ranked_as_a_tie_and_marked() -> None:
    ranks = competition_ranks(fake(100.0, 80.0, 50.0), tied_by({"BC": None}))
    assert ranks == [Rank(1), Rank(2, True, True), Rank(2, True, True)]
    assert [rank.text() for rank in ranks] == ["1", "=2?", "=2?"]


def test_groups_are_ordered_by_their_fastest_member_whatever_the_input_order() -> None:
    rows = fake(50.0, 90.0, 100.0, 95.0)  # A is last; C and D tie at the top
    ranks = competition_ranks(rows, tied_by({"CD": True}))
    assert [rank.text() for rank in ranks] == ["4", "3", "=1", "=1"]


def test_no_rank_contradicts_a_tie_and_every_rank_counts_those_above() -> None:
    """On random tie tables: a pair that ties (or cannot be decided) shares a rank, and a rank
    is 1 + the number of rows with a better one."""
    draw = random.Random(0)
    for _ in range(300):
        rows = fake(*(draw.uniform(1, 100) for _ in range(5)))
        table = {a.name + b.name: draw.choice([True, False, False, None])
                 for i, a in enumerate(rows) for b in rows[i + 1:]}
        test = tied_by(table)
        ranks = competition_ranks(rows, test)
        for i, a in enumerate(rows):
            for j, b in enumerate(rows[i + 1:], start=i + 1):
                if test(a, b) is not False:
                    assert ranks[i] == ranks[j], (table, ranks)
            assert ranks[i].place == 1 + sum(r.place < ranks[i].place for r in ranks)


# --- the headline of real rows


def test_a_chain_of_ties_in_the_headline_shares_rank_1() -> None:
    """torch 200 ties tensorflow 195 (their ratio 1.026, its interval +-3.5 %: the two +-2.5 %
    in quadrature), which ties jax 190 (1.026); torch and jax (1.053) do not tie. All three are
    =1; paddle, far below, is 4."""
    records = [*at("torch-ddp", "torch", 2, 200.0), *at("tf-mirrored", "tensorflow", 2, 195.0),
               *at("jax-sharded", "jax", 2, 190.0), *at("paddle-launch", "paddle", 2, 100.0)]
    torch, tf, paddle, jax = rows_of(records)  # report order: torch, tensorflow, paddle, jax
    assert (headline.tie(torch, tf), headline.tie(tf, jax), headline.tie(torch, jax)) == (
        True, True, False)
    assert ranked(records) == [("2", "=1", "torch"), ("2", "=1", "tensorflow"),
                               ("2", "=1", "jax"), ("2", "4", "paddle")]
    # the tie lines name only the direct pairs, and none contradicts a rank
    assert "- Ties at 2 device(s): torch = tensorflow, tensorflow = jax.\n" in render(records)


def test_a_framework_tied_with_the_second_shares_its_rank_in_the_headline() -> None:
    records = [*at("torch-ddp", "torch", 2, 200.0), *at("tf-mirrored", "tensorflow", 2, 150.0),
               *at("jax-sharded", "jax", 2, 147.0), *at("paddle-launch", "paddle", 2, 100.0)]
    assert ranked(records) == [("2", "1", "torch"), ("2", "=2", "tensorflow"),
                               ("2", "=2", "jax"), ("2", "4", "paddle")]


def test_the_representative_is_shown_however_fast_another_approach_ran() -> None:
    """torch-dp and torch-ddp over spawn outrun torch-ddp over torchrun, torch-dp x1 outruns
    torch-single: the headline still shows torch by its declared representatives (torch-ddp
    with its default launcher at 2 devices, torch-single at 1), and its ratio to the fastest is
    that row's, not the faster approach's."""
    records = [*at("torch-single", "torch", 1, 100.0), *at("torch-dp", "torch", 1, 130.0),
               *at("torch-ddp", "torch", 2, 150.0),
               *at("torch-ddp", "torch", 2, 170.0, launcher="spawn"),
               *at("torch-dp", "torch", 2, 300.0), *at("tf-mirrored", "tensorflow", 2, 180.0)]
    lines = markdown_tables(render(records))[("Headline", TITLE)]
    assert [(r["devices"], r["rank"], r["approach"], r["samples/s"]) for r in lines] == [
        ("1", "1", "torch-single", "100 (97.5-103)"),
        ("2", "1", "tf-mirrored", "180 (176-185)"),
        ("2", "2", "torch-ddp [torchrun]", "150 (146-154)")]
    assert lines[2]["vs fastest"] == ratio(150.0, t_interval(around(150.0)),
                                           180.0, t_interval(around(180.0))).text()
    assert {name: (f.single, f.representative) for name, f in FRAMEWORKS.items()} == {
        "torch": ("torch-single", "torch-ddp"), "tensorflow": ("tf-single", "tf-mirrored"),
        "paddle": ("paddle-single", "paddle-launch"), "jax": ("jax-single", "jax-sharded")}


def test_other_approaches_are_each_set_against_their_representative() -> None:
    records = [*at("torch-single", "torch", 1, 100.0), *at("torch-dp", "torch", 1, 130.0),
               *at("torch-ddp", "torch", 2, 150.0), *at("torch-dp", "torch", 2, 152.0),
               *at("tf-mirrored", "tensorflow", 2, 180.0),
               *at("tf-mirrored-keras", "tensorflow", 2, 120.0),
               *at("paddle-spawn", "paddle", 2, 90.0)]
    others = markdown_tables(render(records))[OTHERS]

    def versus(top: float, bottom: float) -> str:
        return ratio(top, t_interval(around(top)), bottom, t_interval(around(bottom))).text()

    assert [(r["devices"], r["approach"], r["representative"], r["vs representative"],
             r["tie"]) for r in others] == [
        ("1", "torch-dp", "torch-single", versus(130.0, 100.0), "no"),
        ("2", "torch-dp", "torch-ddp [torchrun]", versus(152.0, 150.0), "yes"),
        ("2", "tf-mirrored-keras", "tf-mirrored", versus(120.0, 180.0), "no"),
        # paddle's representative did not run: the headline says so, and here there is no ratio
        ("2", "paddle-spawn", "-", "-", "-")]
    assert versus(152.0, 150.0).startswith("1.01 (")
    assert ("Not in the headline at 2 device(s): paddle (its representative paddle-launch did "
            "not run there).") in render(records)


def test_every_ratio_goes_through_one_function() -> None:
    """The headline's vs fastest and the other approaches' vs representative are both made by
    headline.versus (parbench.results.paired), paired by round where it can be."""
    records = [*at("torch-ddp", "torch", 2, 150.0), *at("torch-dp", "torch", 2, 120.0),
               *at("tf-mirrored", "tensorflow", 2, 180.0)]
    original = headline.versus
    try:
        headline.versus = lambda row, reference: Ratio(0.123, None)
        text = render(records)
    finally:
        headline.versus = original
    assert markdown_tables(text)[("Headline", TITLE)][1]["vs fastest"] == "0.123"
    assert markdown_tables(text)[OTHERS][0]["vs representative"] == "0.123"


# --- the forest plot


def test_the_forest_plot_draws_the_headlines_vs_fastest_figures() -> None:
    pytest.importorskip("matplotlib")
    from parbench.results import plots

    records = [*at("torch-single", "torch", 1, 100.0), *at("tf-single", "tensorflow", 1, 60.0),
               *at("torch-ddp", "torch", 2, 200.0), *at("tf-mirrored", "tensorflow", 2, 195.0),
               *at("jax-sharded", "jax", 2, 190.0), *at("paddle-launch", "paddle", 2, 100.0)]
    table = markdown_tables(render(records))[("Headline", TITLE)]
    cells = {(row["devices"], row["framework"]): (row["rank"], row["vs fastest"])
             for row in table}
    fig = plots._forest(rows_of(records))
    drawn = {}
    for ax in fig.axes:
        if not ax.get_visible() or not ax.containers:
            continue
        devices = ax.get_title().split(" ")[0]
        labels = [label.get_text() for label in ax.get_yticklabels()]
        for label, bars in zip(labels, ax.containers):
            value = float(bars.lines[0].get_xdata()[0])
            segments = bars.lines[2][0].get_segments() if bars.has_xerr else []
            interval = Interval(segments[0][0][0], segments[0][1][0], "") if segments else None
            rank, framework = label.split(":")[0].split()
            drawn[(devices, framework)] = (rank, Ratio(value, interval).text())
    assert drawn == cells and len(drawn) == 6
    # the fastest of each line is exactly 1; the others carry their interval
    assert cells[("2", "torch")] == ("=1", "1") and "(" in cells[("2", "jax")][1]


def test_the_page_opens_the_headline_with_its_forest_plot_before_any_table() -> None:
    from parbench.results.plots import Plot

    forest = Plot("a" * 64, "forest", "Headline", "the forest", b"\x89PNG")
    other = Plot("a" * 64, "throughput", "Performance", "the bars", b"\x89PNG")
    sections = [Section("Headline", None, [Table("spec a", ("x",), [["1"]])], ["a note"]),
                Section("spec a", "a" * 64, [Table("Performance", ("x",), [["1"]])])]
    page = to_html("t", [], sections, [other, forest])
    assert page.index("<h2>Headline</h2>") < page.index('alt="the forest"') < page.index(
        "<p>a note</p>") < page.index("<table>") < page.index('alt="the bars"')
    assert page.count('alt="the forest"') == 1
