"""Forward passes for the cross-framework parity check (see parbench.cli.parity):
``python -m parbench.frameworks.tensorflow.forward REQUEST.json [REQUEST.json ...]``."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

from parbench.contract.spec import spec_from_dict
from parbench.contract.weights import load_weights, save_weights

from .model import build_model, export_weights
from .tfkeras import tf


def main(*request_paths: str) -> None:
    """Answer each request in turn, in this one process (its import paid once)."""
    # thread count changes the bits; parity compares single-thread
    tf.config.threading.set_intra_op_parallelism_threads(1)
    tf.config.threading.set_inter_op_parallelism_threads(1)
    for request_path in request_paths:
        answer(json.loads(Path(request_path).read_text()))


def answer(request: dict) -> None:
    spec = spec_from_dict(request["model"])
    model = build_model(spec, load_weights(request["weights"]))
    inputs = np.load(request["inputs"])["x"]
    logits = model(inputs, training=request["mode"] == "train").numpy()
    weights = {f"weights/{k}": v for k, v in export_weights(model, spec).items()}
    save_weights(request["output"], {"logits": logits, **weights})


if __name__ == "__main__":
    main(*sys.argv[1:])
