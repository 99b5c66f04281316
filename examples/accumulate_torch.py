"""The one-device example with each batch of 32 in 2 micro-batches of 16, their gradients
accumulated before one optimizer step: the gradient-accumulation step of the porting examples.
Each micro-batch's mean loss is divided by the micro-batch count, so the accumulated gradient is
the whole batch's mean gradient, and the losses printed (the micro-batches' summed) are
single_torch.py's.

    python examples/accumulate_torch.py [--steps 20]
"""

import argparse

import torch
from data import LR, batches, initial_weights, make_data, micro_batches
from single_torch import Classifier


# --- step: backward() adds into .grad, so the micro-batches' gradients sum where they are
def train_step(model, optimizer, parts):
    optimizer.zero_grad()
    total = 0.0
    for x, y in parts:
        loss = torch.nn.functional.cross_entropy(model(x), y) / len(parts)
        loss.backward()
        total += loss.item()
    optimizer.step()
    return total


def main():
    parser = argparse.ArgumentParser(description="gradient accumulation, PyTorch")
    parser.add_argument("--steps", type=int, default=20)
    steps = parser.parse_args().steps
    if steps < 1:
        parser.error(f"--steps must be at least 1, got {steps}")
    features, labels = make_data()
    model = Classifier()
    model.load_state_dict({k: torch.from_numpy(v) for k, v in initial_weights().items()})
    optimizer = torch.optim.SGD(model.parameters(), lr=LR)
    for step, rows in enumerate(batches(steps)):
        parts = [(torch.from_numpy(features[part]), torch.from_numpy(labels[part]))
                 for part in micro_batches(rows)]
        print(f"step {step} loss {train_step(model, optimizer, parts):.7f}")


if __name__ == "__main__":
    main()
