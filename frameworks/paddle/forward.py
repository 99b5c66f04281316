"""One forward pass for the cross-framework parity check (see parbench.cli.parity)."""

from __future__ import annotations

import json
import sys

import numpy as np
import paddle

from parbench.contract.spec import spec_from_dict
from parbench.contract.weights import load_weights, save_weights

from .model import build_model, export_weights


def main(request_path: str) -> None:
    request = json.loads(open(request_path).read())
    # thread count changes the bits; parity compares single-thread
    paddle.base.core.set_num_threads(1)
    paddle.set_device("cpu")  # the torch reference runs on the CPU too
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
    main(sys.argv[1])
