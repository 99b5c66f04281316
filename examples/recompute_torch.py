"""The one-device example with the hidden block's activations recomputed in the backward pass
instead of kept (activation checkpointing): the recomputation step of the porting examples. It
trades compute for memory and changes no number, so the losses printed are single_torch.py's;
the script also prints how many times the block ran in the last step (2: the forward, and again
in the backward).

    python examples/recompute_torch.py [--steps 20]
"""

import argparse

import torch
from data import LR, batches, initial_weights, make_data
from single_torch import Classifier, train_step
from torch.utils.checkpoint import checkpoint


# --- model: use_reentrant=False, since the block's input (the data) needs no gradient. The
# reentrant variant (torch 2.13's default, with a warning) then leaves the weights' .grad None
class RecomputedClassifier(Classifier):
    block_runs = 0

    def hidden_block(self, x):
        self.block_runs += 1
        return torch.relu(self.hidden(x))

    def forward(self, x):
        return self.head(checkpoint(self.hidden_block, x, use_reentrant=False))


def main():
    parser = argparse.ArgumentParser(description="activation checkpointing, PyTorch")
    parser.add_argument("--steps", type=int, default=20)
    steps = parser.parse_args().steps
    if steps < 1:
        parser.error(f"--steps must be at least 1, got {steps}")
    features, labels = make_data()
    model = RecomputedClassifier()
    model.load_state_dict({k: torch.from_numpy(v) for k, v in initial_weights().items()})
    optimizer = torch.optim.SGD(model.parameters(), lr=LR)
    for step, rows in enumerate(batches(steps)):
        model.block_runs = 0
        loss = train_step(model, optimizer, torch.from_numpy(features[rows]),
                          torch.from_numpy(labels[rows]))
        print(f"step {step} loss {loss:.7f}")
    print(f"block runs per step {model.block_runs}")


if __name__ == "__main__":
    main()
