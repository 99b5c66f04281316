"""Canonical weights -> each framework's model -> canonical export is bit-identical: same names,
dtypes, shapes and bits, for every framework and model kind (docs/contract.md, "initial weights").

The parity checks compare within tolerances, so a lossy load could hide under them: a kernel
transposed where it is square (OIHW 8x8x3x3 read as IOHW keeps its shape), a float16 detour,
running statistics that are dropped and re-initialised. Each framework runs in its own process
(TensorFlow and Paddle segfault in one), through its parity ``forward.py``, which exports the
model's weights after the forward pass it is asked for.
"""

from __future__ import annotations

import numpy as np
import pytest

from conftest import needs
from parbench.cli.parity import FRAMEWORKS, forward_inputs
from parbench.contract.spec import MODEL_NAMES, build_spec
from parbench.contract.weights import initial_weights


def mismatches(expected: dict[str, np.ndarray], actual: dict[str, np.ndarray]) -> dict[str, str]:
    """Tensor name -> how ``actual`` differs from ``expected`` bit for bit; empty if identical.

    Values alone are not enough: np.array_equal holds between a float32 array and its float64
    copy, and between +0.0 and -0.0, so dtype and shape are compared first, then the bytes."""
    found = {name: "missing" for name in expected if name not in actual}
    found.update({name: "unexpected" for name in actual if name not in expected})
    for name in expected.keys() & actual.keys():
        want, got = expected[name], actual[name]
        if got.dtype != want.dtype:
            found[name] = f"dtype {got.dtype}, expected {want.dtype}"
        elif got.shape != want.shape:
            found[name] = f"shape {got.shape}, expected {want.shape}"
        elif np.ascontiguousarray(got).tobytes() != np.ascontiguousarray(want).tobytes():
            worst = float(np.abs(got.astype(np.float64) - want).max())
            found[name] = f"values differ (max |difference| {worst:.3g})"
    return found


def exported(forwards, framework: str, model: str, mode: str) -> dict[str, np.ndarray]:
    """The weights ``framework``'s forward.py exported after that pass of ``model``."""
    return {name[len("weights/"):]: tensor
            for name, tensor in forwards(framework)[model, mode].items()
            if name.startswith("weights/")}


# TensorFlow's in the fast lane (its model builder maps the most: layouts, BatchNorm momentum),
# the others in the slow one: each framework's first case pays its import
FRAMEWORK_CASES = [pytest.param(fw, marks=[needs(fw)] if fw == "tensorflow"
                                else [needs(fw), pytest.mark.slow]) for fw in FRAMEWORKS]


@pytest.mark.parametrize("model", MODEL_NAMES)
@pytest.mark.parametrize("framework", FRAMEWORK_CASES)
def test_weights_export_back_bit_identically(forwards, framework, model):
    # forward_inputs gives the BatchNorm running statistics random values, not zeros and ones,
    # so a loader that skipped them (leaving the defaults) would be caught too. An inference
    # pass changes nothing, so what comes back must be exactly what went in.
    expected = forward_inputs(model)[1]
    assert mismatches(expected, exported(forwards, framework, model, "eval")) == {}


@pytest.mark.parametrize("framework", FRAMEWORK_CASES)
def test_export_reads_the_live_model(forwards, framework):
    """A training pass moves every running statistic and nothing else: the export reflects the
    model's state after the pass (it is not an echo of the loaded arrays, which would make the
    round trip above pass vacuously)."""
    expected = forward_inputs("resnet")[1]
    changed = mismatches(expected, exported(forwards, framework, "resnet", "train"))
    assert set(changed) == {name for name in expected if ".running_" in name}
    assert all(why.startswith("values differ") for why in changed.values()), changed


def test_comparison_catches_transposed_cast_rounded_signed_and_renamed_tensors():
    weights = initial_weights(build_spec("resnet", (3, 16, 16), 10), seed=0)
    square = next(name for name, w in weights.items() if w.ndim == 4 and w.shape[0] == w.shape[1])
    assert mismatches(weights, {k: v.copy() for k, v in weights.items()}) == {}

    transposed = {**weights, square: np.swapaxes(weights[square], 0, 1)}  # IOHW read as OIHW
    assert transposed[square].shape == weights[square].shape  # the shape cannot tell
    (why,) = mismatches(weights, transposed).values()
    assert list(mismatches(weights, transposed)) == [square] and why.startswith("values differ")

    widened = {**weights, square: weights[square].astype(np.float64)}
    assert np.array_equal(widened[square], weights[square])  # equal values, other dtype
    assert mismatches(weights, widened) == {square: "dtype float64, expected float32"}

    rounded = {**weights, square: weights[square].astype(np.float16).astype(np.float32)}
    assert list(mismatches(weights, rounded)) == [square]

    zeros = np.zeros(4, np.float32)
    assert list(mismatches({"bias": zeros}, {"bias": -zeros})) == ["bias"]  # -0.0 == 0.0

    renamed = {("renamed" if k == square else k): v for k, v in weights.items()}
    assert mismatches(weights, renamed) == {square: "missing", "renamed": "unexpected"}
