"""One forward pass for the cross-framework parity check (see parbench.cli.parity)."""

from __future__ import annotations

import json
import sys

import numpy as np

from parbench.contract.spec import spec_from_dict
from parbench.contract.weights import load_weights, save_weights

from .model import build_model, export_weights
from .tfkeras import tf


def main(request_path: str) -> None:
    request = json.loads(open(request_path).read())
    # thread count changes the bits; parity compares single-thread
    tf.config.threading.set_intra_op_parallelism_threads(1)
    tf.config.threading.set_inter_op_parallelism_threads(1)
    spec = spec_from_dict(request["model"])
    model = build_model(spec, load_weights(request["weights"]))
    inputs = np.load(request["inputs"])["x"]
    logits = model(inputs, training=request["mode"] == "train").numpy()
    weights = {f"weights/{k}": v for k, v in export_weights(model, spec).items()}
    save_weights(request["output"], {"logits": logits, **weights})


if __name__ == "__main__":
    main(sys.argv[1])
