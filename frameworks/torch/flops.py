"""The spec's FLOPs as torch's own counter (``torch.utils.flop_counter.FlopCounterMode``) sees
them, to cross-check parbench.contract.flops (tests/test_flops.py):
``python -m parbench.frameworks.torch.flops [--meta] SPEC_JSON [SPEC_JSON ...]`` prints one
JSON line, a list with, per spec, the counts per sample (see ``count``).

``--meta`` builds the model on torch's meta device and counts what it dispatches there: shapes
only, no weights and no arithmetic, so the published sizes (GPT-2 small's 8 rows of 1024 tokens,
a 2-TFLOP forward) are counted in a second.

The counter has formulas for matrix products and convolutions only (bias adds excluded), and
for attention only on the fused kernels of GPUs: on the CPU, ``scaled_dot_product_attention``
runs ``_scaled_dot_product_flash_attention_for_cpu``, which it has no formula for (torch
2.13), so its products would go uncounted. The counts are therefore taken with the MATH
backend, where attention is two ``bmm``s it counts; ``forward_fused`` is the forward with the
default kernel, to show the gap.
"""

from __future__ import annotations

import json
import sys

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils.flop_counter import FlopCounterMode

from parbench.contract.flops import COUNTER_ROWS, counter_input
from parbench.contract.spec import ModelSpec, spec_from_dict
from parbench.contract.weights import initial_weights

from .model import BUILDERS, build_model


def count(spec: ModelSpec, meta: bool = False) -> dict:
    """Per sample: ``forward``; ``training``, the forward then the backward from a random
    output gradient (the model's backward alone: a loss would add its own operations), with
    every parameter's gradient; ``forward_fused``; and each one's counts by aten operator.
    ``meta``: on the meta device (the counts are the same: they depend on shapes alone)."""
    if meta:
        with torch.device("meta"):
            model = BUILDERS[spec.kind](spec)  # training mode, as a step runs it
        x = torch.from_numpy(counter_input(spec)).to("meta")
    else:
        model = build_model(spec, initial_weights(spec, 0))
        x = torch.from_numpy(counter_input(spec))
    with sdpa_kernel(SDPBackend.MATH):
        forward, forward_ops = _counted(lambda: model(x))
        shape = model(x).shape
        gradient = torch.empty(shape, device="meta") if meta else \
            torch.randn(shape, generator=torch.Generator().manual_seed(0))
        training, training_ops = _counted(lambda: model(x).backward(gradient))
    fused, _ = _counted(lambda: model(x))
    return {"forward": forward, "training": training, "forward_fused": fused,
            "forward_ops": forward_ops, "training_ops": training_ops}


def _counted(run) -> tuple[float, dict[str, float]]:
    """(FLOPs per sample, by operator) of what ``run()`` dispatches."""
    with FlopCounterMode(display=False) as counter:
        run()
    ops = {str(op): flops / COUNTER_ROWS
           for op, flops in counter.get_flop_counts()["Global"].items()}
    return counter.get_total_flops() / COUNTER_ROWS, ops


def main(*args: str) -> None:
    torch.set_num_threads(1)  # counts do not depend on threads; the machine is shared
    meta = args[:1] == ("--meta",)
    specs = args[1:] if meta else args
    print(json.dumps([count(spec_from_dict(json.loads(spec)), meta) for spec in specs]))


if __name__ == "__main__":
    main(*sys.argv[1:])
