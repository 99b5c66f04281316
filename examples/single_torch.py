"""Train a small classifier on one device with PyTorch: the first step of the porting examples.

It imports PyTorch and examples/data.py (numpy only), nothing of parbench: the data, the
initial weights and the batch order come from there, as in the TensorFlow, Paddle and JAX
versions beside this file, so all four print the same losses (to float32 rounding).

    python examples/single_torch.py [--steps 20]
"""

import argparse

import torch
from data import CLASSES, FEATURES, HIDDEN, LR, batches, initial_weights, make_data


# --- model
class Classifier(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.hidden = torch.nn.Linear(FEATURES, HIDDEN)
        self.head = torch.nn.Linear(HIDDEN, CLASSES)

    def forward(self, x):
        return self.head(torch.relu(self.hidden(x)))


# --- step
def train_step(model, optimizer, x, y):
    optimizer.zero_grad()
    loss = torch.nn.functional.cross_entropy(model(x), y)  # mean over the batch
    loss.backward()
    optimizer.step()
    return loss.item()


def main():
    parser = argparse.ArgumentParser(description="one-device training, PyTorch")
    parser.add_argument("--steps", type=int, default=20)
    steps = parser.parse_args().steps
    if steps < 1:
        parser.error(f"--steps must be at least 1, got {steps}")
    features, labels = make_data()
    model = Classifier()
    model.load_state_dict({k: torch.from_numpy(v) for k, v in initial_weights().items()})
    optimizer = torch.optim.SGD(model.parameters(), lr=LR)
    for step, rows in enumerate(batches(steps)):
        loss = train_step(model, optimizer, torch.from_numpy(features[rows]),
                          torch.from_numpy(labels[rows]))
        print(f"step {step} loss {loss:.7f}")


if __name__ == "__main__":
    main()
