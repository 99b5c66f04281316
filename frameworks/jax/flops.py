"""The spec's FLOPs as XLA's cost analysis of the compiled program sees them
(``jax.jit(f).lower(...).compile().cost_analysis()["flops"]``), to cross-check
parbench.contract.flops (tests/test_flops.py):
``python -m parbench.frameworks.jax.flops SPEC_JSON [SPEC_JSON ...]`` prints one JSON line, a
list with, per spec, the counts per sample (see ``count``).

XLA counts every operation of the optimised program, elementwise ones too (1 FLOP per element
for most, an erf as its polynomial; exponentials are counted apart, as ``transcendentals``),
and a convolution's multiply-adds on real input only, not those on its zero padding. float32
on one CPU device and one thread, as the parity forward (forward.configure).
"""

from __future__ import annotations

import json
import sys

from parbench.contract.flops import COUNTER_ROWS, counter_input
from parbench.contract.spec import ModelSpec, spec_from_dict
from parbench.contract.weights import initial_weights

from .forward import configure


def count(spec: ModelSpec) -> dict:
    """Per sample: ``forward``; ``training``, the forward and the gradient of every parameter
    from a random output gradient (the model's backward alone: a loss would add its own
    operations)."""
    import jax

    from .model import apply, split_weights

    params, stats = split_weights(spec, initial_weights(spec, 0))
    x = jax.numpy.asarray(counter_input(spec))

    def forward(params):
        return apply(spec, params, stats, x, train=True)[0]  # training mode, as a step runs

    def training(params, gradient):
        # the outputs returned too, as a step's loss reads them: else XLA drops the products
        # whose output only the loss would read (the last layer's forward)
        outputs, backward = jax.vjp(forward, params)
        return outputs, backward(gradient)[0]

    gradient = jax.random.normal(jax.random.key(0), jax.eval_shape(forward, params).shape)
    return {"forward": _flops(forward, params), "training": _flops(training, params, gradient)}


def _flops(function, *args) -> float:
    """XLA's FLOPs per sample of the compiled ``function(*args)``."""
    import jax

    cost = jax.jit(function).lower(*args).compile().cost_analysis()
    cost = cost[0] if isinstance(cost, list) else cost  # older jax: a list of one dict
    return cost["flops"] / COUNTER_ROWS


def main(*specs: str) -> None:
    configure()  # before jax is imported (inside count): it reads its environment then
    print(json.dumps([count(spec_from_dict(json.loads(spec))) for spec in specs]))


if __name__ == "__main__":
    main(*sys.argv[1:])
