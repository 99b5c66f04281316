"""A compare sweep's identity: the id and round-order seed every one of its records carries, and
(under --until-ci) the most rounds it planned, kept in its --out folder so --resume goes on with
the same sweep: the rounds it adds pair with the rounds kept (parbench.results.paired)."""

from __future__ import annotations

import json
import secrets
import uuid
from dataclasses import dataclass
from pathlib import Path

from parbench.base.errors import UsageError
from parbench.base.files import write_atomic


@dataclass
class Sweep:
    """What every record of one sweep carries (``sweep``), so the report can pair its
    configurations round by round; kept in the --out folder, so --resume goes on with the same
    sweep (the rounds it adds pair with the rounds kept)."""

    id: str
    order_seed: int
    max_rounds: int | None = None  # the sequential rule's planned rounds (--until-ci)

    def block(self, position: int) -> dict:
        extra = {"max_rounds": self.max_rounds} if self.max_rounds else {}
        return {"id": self.id, "order_seed": self.order_seed, "position": position, **extra}


SWEEP_STATE = "parbench-sweep.state"  # not *.json: a record folder's JSON files are records


def open_sweep(out: Path, resume: bool, order_seed: int | None) -> Sweep:
    """This sweep's identity: the --out folder's sweep when resuming one, else a new one
    (written there before the first run, so a stopped sweep can resume)."""
    state = out / SWEEP_STATE
    if resume and state.exists():
        try:
            kept = json.loads(state.read_text())
            sweep = Sweep(str(kept["id"]), int(kept["order_seed"]), kept.get("max_rounds"))
        except (OSError, ValueError, KeyError, TypeError) as err:
            raise UsageError(f"--resume: cannot read {state} ({err}); remove it to start a "
                             "new sweep") from None
        if order_seed is not None and order_seed != sweep.order_seed:
            raise UsageError(f"--resume goes on with the sweep in {out}, whose order seed is "
                             f"{sweep.order_seed}, not {order_seed}")
        return sweep
    seed = secrets.randbelow(2**31) if order_seed is None else order_seed
    sweep = Sweep(uuid.uuid4().hex, seed)
    save_sweep(out, sweep)
    return sweep


def save_sweep(out: Path, sweep: Sweep) -> None:
    """The sweep's identity into its --out folder (again once --until-ci fixed its rounds)."""
    out.mkdir(parents=True, exist_ok=True)
    state = {"id": sweep.id, "order_seed": sweep.order_seed,
             **({"max_rounds": sweep.max_rounds} if sweep.max_rounds else {})}
    write_atomic(out / SWEEP_STATE, json.dumps(state).encode())
