"""The spec's FLOPs as TensorFlow's profiler counts them (``tf.compat.v1.profiler`` with
``ProfileOptionBuilder.float_operation()``, on the traced graph of a ``tf.function``), to
cross-check parbench.contract.flops (tests/test_flops.py):
``python -m parbench.frameworks.tensorflow.flops SPEC_JSON [SPEC_JSON ...]`` prints one JSON
line, a list with, per spec, the counts per sample (see ``count``).

The profiler reads the graph as traced, before Grappler prunes it: ops whose result nothing
uses are counted too (the gradient of the input images). Each op type has its own formula
(``tensorflow/python/profiler/internal/flops_registry.py``): products 2 FLOPs per
multiply-add, elementwise ops 1 per element.
"""

from __future__ import annotations

import json
import sys

from parbench.contract.flops import COUNTER_ROWS, counter_input
from parbench.contract.spec import ModelSpec, spec_from_dict
from parbench.contract.weights import initial_weights

from .model import build_model
from .tfkeras import tf


def count(spec: ModelSpec) -> dict:
    """Per sample: ``forward``; ``training``, the forward and the gradient of every trainable
    variable from a random output gradient (the model's backward alone: a loss would add its
    own operations); and each one's counts by op type."""
    model = build_model(spec, initial_weights(spec, 0))
    x = counter_input(spec)
    inputs = tf.TensorSpec(x.shape, tf.as_dtype(x.dtype))
    forward = tf.function(lambda x: model(x, training=True)).get_concrete_function(inputs)

    def training(x, gradient):
        with tf.GradientTape() as tape:
            outputs = model(x, training=True)
        gradients = tape.gradient(outputs, model.trainable_variables, output_gradients=gradient)
        return outputs, gradients

    gradient = tf.TensorSpec(forward.structured_outputs.shape, tf.float32)
    backward = tf.function(training).get_concrete_function(inputs, gradient)
    (forward, forward_ops), (training, training_ops) = _profiled(forward), _profiled(backward)
    return {"forward": forward, "training": training, "forward_ops": forward_ops,
            "training_ops": training_ops}


def _profiled(function) -> tuple[float, dict[str, float]]:
    """(FLOPs per sample, by op type) of a traced function's graph."""
    builder = tf.compat.v1.profiler.ProfileOptionBuilder
    options = builder(builder.float_operation()).with_empty_output().build()
    profile = tf.compat.v1.profiler.profile(graph=function.graph, cmd="op", options=options)
    ops: dict[str, float] = {}
    pending = list(profile.children)
    while pending:  # the op view nests each type under the one before it
        node = pending.pop()
        ops[node.name] = node.float_ops / COUNTER_ROWS
        pending.extend(node.children)
    return profile.total_float_ops / COUNTER_ROWS, ops


def main(*specs: str) -> None:
    # counts do not depend on threads; the machine is shared
    tf.config.threading.set_intra_op_parallelism_threads(1)
    tf.config.threading.set_inter_op_parallelism_threads(1)
    print(json.dumps([count(spec_from_dict(json.loads(spec))) for spec in specs]))


if __name__ == "__main__":
    main(*sys.argv[1:])
