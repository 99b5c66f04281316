"""Canonical initial weights: drawn once with numpy from the spec and a seed, stored as .npz.

Layout is framework-neutral and fixed: conv kernels OIHW, dense kernels [out, in], biases and
BatchNorm vectors 1-D. Each framework's builder converts from this layout on load and back on
export, so the same arrays enter (and can be compared after) every backend and strategy.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import numpy as np

from .spec import ROLE_RULES, ModelSpec, Role, parameters

INITIALISERS = {
    "he_normal": lambda rng, shape, fan_in: rng.normal(0.0, np.sqrt(2.0 / fan_in), shape),
    # torch's nn.Linear default, for weight and bias alike
    "fan_in_uniform": lambda rng, shape, fan_in: rng.uniform(-1 / np.sqrt(fan_in),
                                                             1 / np.sqrt(fan_in), shape),
    "normal_002": lambda rng, shape, fan_in: rng.normal(0.0, 0.02, shape),  # ViT embeddings
    "ones": lambda rng, shape, fan_in: np.ones(shape),
    "zeros": lambda rng, shape, fan_in: np.zeros(shape),
    # a detector's heat-map bias: a face in 1 cell of 10 before training (CenterNet's -2.19)
    "focal_prior": lambda rng, shape, fan_in: np.full(shape, -np.log((1 - 0.1) / 0.1)),
}


def initial_weights(spec: ModelSpec, seed: int) -> dict[str, np.ndarray]:
    """The canonical weights of ``spec`` for ``seed``, float32, in canonical order; each
    tensor drawn by its role's initialiser (parbench.spec.ROLE_RULES)."""
    rng = np.random.default_rng([seed, 0x5EED])
    weights, fan_in = {}, 1
    for name, param in parameters(spec).items():
        if param.role in (Role.CONV_WEIGHT, Role.DENSE_WEIGHT):
            fan_in = int(np.prod(param.shape[1:]))  # a bias follows its kernel: same fan-in
        draw = INITIALISERS[ROLE_RULES[param.role].init]
        weights[name] = draw(rng, param.shape, fan_in).astype(np.float32)
    return weights


def check_weights(spec: ModelSpec, weights: dict[str, np.ndarray]) -> None:
    """Raise ValueError unless ``weights`` has exactly the spec's names and shapes."""
    expected = parameters(spec)
    if set(weights) != set(expected):
        missing, extra = set(expected) - set(weights), set(weights) - set(expected)
        raise ValueError(f"weights do not match the spec: missing {sorted(missing)}, "
                         f"unexpected {sorted(extra)}")
    for name, param in expected.items():
        if tuple(weights[name].shape) != param.shape:
            raise ValueError(f"{name}: shape {weights[name].shape}, spec says {param.shape}")


def save_weights(path: Path, weights: dict[str, np.ndarray]) -> None:
    """Write an .npz atomically (a crash never leaves a half-written file)."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".npz.tmp")
    try:
        with os.fdopen(fd, "wb") as handle:
            np.savez(handle, **weights)
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise


def load_weights(path: Path) -> dict[str, np.ndarray]:
    with np.load(path) as archive:
        return {name: archive[name] for name in archive.files}
