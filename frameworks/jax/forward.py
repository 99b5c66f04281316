"""Forward passes for the cross-framework parity check (see parbench.cli.parity):
``python -m parbench.frameworks.jax.forward REQUEST.json [REQUEST.json ...]``.

float32 (x64 off), on one CPU device and one compute thread, like the torch reference; the
environment is set before jax is imported, which is why the imports are inside the functions.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path


def configure() -> None:
    """One CPU device (XLA_FLAGS replaced: a --xla_force_host_platform_device_count inherited
    from a parent is dropped) and one compute thread (PJRT_NPROC is what bounds XLA's CPU pool,
    see runtime.py): thread count changes the bits, parity compares single-thread."""
    os.environ["JAX_PLATFORMS"] = "cpu"
    os.environ["XLA_FLAGS"] = ""
    os.environ["PJRT_NPROC"] = "1"
    os.environ["JAX_ENABLE_X64"] = "0"


def main(*request_paths: str) -> None:
    """Answer each request in turn, in this one process (its import paid once)."""
    configure()
    # imported only now: jax reads JAX_PLATFORMS and JAX_ENABLE_X64 when imported (its
    # backend XLA_FLAGS and PJRT_NPROC when it starts), so configure() goes first
    import jax

    jax.config.update("jax_enable_x64", False)
    for request_path in request_paths:
        answer(json.loads(Path(request_path).read_text()))


def answer(request: dict) -> None:
    import jax
    import numpy as np

    from parbench.contract.spec import spec_from_dict
    from parbench.contract.weights import load_weights, save_weights

    from .model import apply, export_weights, split_weights

    spec = spec_from_dict(request["model"])
    params, stats = split_weights(spec, load_weights(request["weights"]))
    x = jax.numpy.asarray(np.load(request["inputs"])["x"])
    logits, stats = jax.jit(apply, static_argnums=(0, 4))(spec, params, stats, x,
                                                          request["mode"] == "train")
    weights = {f"weights/{k}": v for k, v in export_weights(spec, params, stats).items()}
    save_weights(request["output"], {"logits": np.asarray(logits, np.float32), **weights})


if __name__ == "__main__":
    main(*sys.argv[1:])
