"""The spec's FLOPs as Paddle's own counter (``paddle.flops``) sees them, to cross-check
parbench.contract.flops (tests/test_flops.py):
``python -m parbench.frameworks.paddle.flops SPEC_JSON [SPEC_JSON ...]`` prints one JSON line,
a list with, per spec, the forward count per sample.

``paddle.flops`` hooks layers, not operations (``paddle/hapi/dynamic_flops.py``): it counts
``nn.Conv2D`` and ``nn.Linear`` as multiply-adds, one per multiply-add (not 2), a convolution's
bias as one more per output element, and a few other layer types by exact type (not
parbench's BatchNorm subclass, nor ``nn.LayerNorm``); a ``paddle.matmul`` outside a layer (the
attention's products, the GPT's tied output projection) it does not see. It counts an
inference forward only: there is no training count to compare.

``paddle.flops`` itself fails here after counting, while printing its table: it calls
``int()`` on shape-[1] tensors, which NumPy 2.4 refuses ("only 0-dimensional arrays can be
converted to Python scalars"; Paddle 3.3.1, NumPy 2.4.6). ``count`` therefore attaches the
same per-layer formulas (``dynamic_flops.register_hooks``) the way ``dynamic_flops`` does,
to the leaf layers, and sums them itself.
"""

from __future__ import annotations

import json
import sys

import paddle
from paddle.hapi.dynamic_flops import register_hooks

from parbench.contract.flops import COUNTER_ROWS, counter_input
from parbench.contract.spec import ModelSpec, spec_from_dict
from parbench.contract.weights import initial_weights

from .model import build_model


def count(spec: ModelSpec) -> dict:
    """Per sample: ``forward``, paddle.flops' figure (its unit, multiply-adds), in inference
    mode as it runs the model, and ``layers``: the layer types it counted."""
    model = build_model(spec, initial_weights(spec, 0))
    model.eval()
    leaves = [layer for layer in model.sublayers() if not list(layer.children())]
    counted = [layer for layer in leaves if type(layer) in register_hooks]
    hooks = []
    for layer in counted:
        layer.total_ops = 0  # what each formula adds to
        hooks.append(layer.register_forward_post_hook(register_hooks[type(layer)]))
    with paddle.no_grad():
        model(paddle.to_tensor(counter_input(spec)))
    for hook in hooks:
        hook.remove()
    macs = sum(int(layer.total_ops) for layer in counted)
    return {"forward": macs / COUNTER_ROWS,
            "layers": sorted({type(layer).__name__ for layer in counted})}


def main(*specs: str) -> None:
    paddle.base.core.set_num_threads(1)  # counts do not depend on threads; the machine is shared
    paddle.set_device("cpu")
    print(json.dumps([count(spec_from_dict(json.loads(spec))) for spec in specs]))


if __name__ == "__main__":
    main(*sys.argv[1:])
