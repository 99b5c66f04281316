"""Forward passes for the cross-framework parity check (see parbench.cli.parity):
``python -m parbench.frameworks.paddle.forward REQUEST.json [REQUEST.json ...]``."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import paddle

from parbench.contract.spec import spec_from_dict
from parbench.contract.weights import load_weights, save_weights

from .model import build_model, export_weights


def main(*request_paths: str) -> None:
    """Answer each request in turn, in this one process (its import paid once)."""
    # thread count changes the bits; parity compares single-thread
    paddle.base.core.set_num_threads(1)
    paddle.set_device("cpu")  # the torch reference runs on the CPU too
    for request_path in request_paths:
        answer(json.loads(Path(request_path).read_text()))


def answer(request: dict) -> None:
    model = build_model(spec_from_dict(request["model"]), load_weights(request["weights"]))
    if request["mode"] == "train":
        model.train()
    else:
        model.eval()
    with paddle.no_grad():
        logits = model(paddle.to_tensor(np.load(request["inputs"])["x"])).numpy()
    weights = {f"weights/{k}": v for k, v in export_weights(model).items()}
    save_weights(request["output"], {"logits": logits, **weights})


if __name__ == "__main__":
    main(*sys.argv[1:])
