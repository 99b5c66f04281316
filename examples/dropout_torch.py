"""The one-device example with dropout on the hidden layer: the random-numbers step of the
porting examples. The masks come from numpy (data.dropout_masks: one per row of each global
batch, from the seed and the step), not from torch's generator, so every framework drops the
same units and prints the same losses. torch's own generator, seeded alike, draws other numbers
than the other frameworks' (the script prints its first draws).

    python examples/dropout_torch.py [--steps 20]
"""

import argparse

import torch
from data import LR, batches, dropout_masks, initial_weights, make_data
from single_torch import Classifier


# --- model: the hidden layer's output times the step's mask (what nn.Dropout draws itself)
class DropoutClassifier(Classifier):
    def forward(self, x, mask):
        return self.head(torch.relu(self.hidden(x)) * mask)


# --- step
def train_step(model, optimizer, x, y, mask):
    optimizer.zero_grad()
    loss = torch.nn.functional.cross_entropy(model(x, mask), y)
    loss.backward()
    optimizer.step()
    return loss.item()


def main():
    parser = argparse.ArgumentParser(description="dropout from host masks, PyTorch")
    parser.add_argument("--steps", type=int, default=20)
    steps = parser.parse_args().steps
    if steps < 1:
        parser.error(f"--steps must be at least 1, got {steps}")
    torch.manual_seed(0)
    print("own draws", " ".join(f"{v:.7f}" for v in torch.rand(3).tolist()))
    features, labels = make_data()
    model = DropoutClassifier()
    model.load_state_dict({k: torch.from_numpy(v) for k, v in initial_weights().items()})
    optimizer = torch.optim.SGD(model.parameters(), lr=LR)
    for step, rows in enumerate(batches(steps)):
        loss = train_step(model, optimizer, torch.from_numpy(features[rows]),
                          torch.from_numpy(labels[rows]), torch.from_numpy(dropout_masks(step)))
        print(f"step {step} loss {loss:.7f}")


if __name__ == "__main__":
    main()
