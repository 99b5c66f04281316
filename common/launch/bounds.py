"""The values a number option may take, declared beside its RunConfig field (``bounded``): a
value outside them, or a float that is not finite (NaN, inf), is one line and exit 2 before
anything is loaded or launched, from the command line and from a config file alike."""

from __future__ import annotations

import math
from dataclasses import Field, dataclass, field


@dataclass(frozen=True)
class Bounds:
    low: float | None = None
    high: float | None = None
    low_open: bool = False  # low itself is outside
    high_open: bool = False  # high itself is outside

    def problem(self, option: str, value: float | int) -> str | None:
        """Why ``value`` cannot be ``option``'s, or None."""
        if isinstance(value, float) and not math.isfinite(value):
            return f"{option} must be a finite number, got {value}"
        above = self.low is None or (value > self.low if self.low_open else value >= self.low)
        below = self.high is None or (value < self.high if self.high_open else value <= self.high)
        return None if above and below else f"{option} must be {self.text}, got {value}"

    @property
    def text(self) -> str:
        if self.high is None:
            if self.low == 0:
                return "positive" if self.low_open else "0 or more"
            return f"at least {_shown(self.low)}"
        return (f"in {'(' if self.low_open else '['}{_shown(self.low)}, "
                f"{_shown(self.high)}{')' if self.high_open else ']'}")


def _shown(bound: float) -> str:
    return str(int(bound)) if float(bound).is_integer() else str(bound)


POSITIVE = Bounds(0, low_open=True)
AT_LEAST_ONE = Bounds(1)
NON_NEGATIVE = Bounds(0)
UNIT_INTERVAL = Bounds(0, 1, high_open=True)  # [0, 1): momentum, Adam's betas
ACCURACY = Bounds(0, 1, low_open=True)  # (0, 1]
CONTEXT = Bounds(1, 4096)  # tokens a row reads
MODEL_SIZE = Bounds(1, 4096)  # the GPT's width, depth, heads
VOCABULARY = Bounds(2, 512)  # the synthetic language's table has vocab**3 entries (1 GiB at 512)
SEED = Bounds(0, 2**31 - 1)  # what every framework's generator takes (numpy refuses negatives)


def bounded(default: float | int | None, bounds: Bounds) -> Field:
    """A RunConfig field whose value must lie within ``bounds`` (None: not given)."""
    return field(default=default, metadata={"bounds": bounds})


def problems(values: dict[str, object], fields_: tuple[Field, ...]) -> list[str]:
    """What is wrong with the given numbers of ``values``, one line each, by field order."""
    found = []
    for f in fields_:
        bounds, value = f.metadata.get("bounds"), values.get(f.name)
        if bounds is not None and value is not None and not isinstance(value, bool):
            problem = bounds.problem("--" + f.name.replace("_", "-"), value)
            found += [problem] if problem else []
    return found
