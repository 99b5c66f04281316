"""Competition ranking over tie groups: how the headline ranks frameworks so that no rank
says one is faster than a framework it ties. Pure: it knows rows only by their ``throughput``
and the pairwise ``tie`` test it is given (headline.tie)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from itertools import combinations
from typing import Protocol, TypeVar


class Ranked(Protocol):
    @property
    def throughput(self) -> float: ...


T = TypeVar("T", bound=Ranked)


@dataclass(frozen=True)
class Rank:
    """A competition rank: ``place`` is 1 + the frameworks ranked above; ``shared`` where a
    tie joins it to others; ``undecided`` where a pair of its tie group had no interval."""

    place: int
    shared: bool = False
    undecided: bool = False

    def text(self) -> str:
        return f"{'=' if self.shared else ''}{self.place}{'?' if self.undecided else ''}"


def competition_ranks(rows: Sequence[T], tie: Callable[[T, T], bool | None]) -> list[Rank]:
    """The rank of each of ``rows`` (in their order), by competition ranking over tie groups.

    Ties are not transitive (A beats C, yet A ties B and B ties C), so the pairs ``tie`` calls
    a tie are joined transitively: a tie group is a connected component of the tie graph, and
    every row of it shares one rank. An undecidable pair (``tie`` gives None) is joined like a
    tie, since no order between the two can be claimed, and its group's rank is marked
    undecided. Groups are ordered by their highest median throughput; a group's rank is 1 +
    the number of rows in the groups before it (1, =2, =2, 4). So no rank contradicts a tie."""
    group = list(range(len(rows)))  # union-find: each row's parent, a root is its own

    def root(i: int) -> int:
        while group[i] != i:
            i = group[i]
        return i

    undecided_pairs = []
    for i, j in combinations(range(len(rows)), 2):
        verdict = tie(rows[i], rows[j])
        if verdict is not False:
            group[root(i)] = root(j)
        if verdict is None:
            undecided_pairs.append(i)
    members: dict[int, list[int]] = defaultdict(list)
    for i in range(len(rows)):
        members[root(i)].append(i)
    order = sorted(members.values(), key=lambda of: -max(rows[i].throughput for i in of))
    undecided = {root(i) for i in undecided_pairs}
    ranks: dict[int, Rank] = {}
    above = 0
    for of in order:
        for i in of:
            ranks[i] = Rank(above + 1, len(of) > 1, root(i) in undecided)
        above += len(of)
    return [ranks[i] for i in range(len(rows))]
