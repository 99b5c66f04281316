"""The one-device example computing in bfloat16 (mixed precision): the precision step of the
porting examples. The weights and the optimizer stay float32; the forward's products run in
bfloat16 under autocast, and the loss in float32. bfloat16 keeps float32's range, so no loss
scaling is needed (float16's GradScaler is). The losses printed follow single_torch.py's to
bfloat16's rounding, not to float32's; the script prints the logits' dtype first.

    python examples/bf16_torch.py [--steps 20]
"""

import argparse

import torch
from data import LR, batches, initial_weights, make_data
from single_torch import Classifier


# --- step: autocast around the forward and the loss only; backward() and step() outside it
def train_step(model, optimizer, x, y):
    optimizer.zero_grad()
    with torch.autocast("cpu", dtype=torch.bfloat16):  # "cuda" on a GPU
        loss = torch.nn.functional.cross_entropy(model(x), y)  # autocast runs it in float32
    loss.backward()
    optimizer.step()
    return loss.item()


def main():
    parser = argparse.ArgumentParser(description="bfloat16 mixed precision, PyTorch")
    parser.add_argument("--steps", type=int, default=20)
    steps = parser.parse_args().steps
    if steps < 1:
        parser.error(f"--steps must be at least 1, got {steps}")
    features, labels = make_data()
    model = Classifier()
    model.load_state_dict({k: torch.from_numpy(v) for k, v in initial_weights().items()})
    optimizer = torch.optim.SGD(model.parameters(), lr=LR)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        print(f"logits {model(torch.from_numpy(features[:1])).dtype}")
    for step, rows in enumerate(batches(steps)):
        loss = train_step(model, optimizer, torch.from_numpy(features[rows]),
                          torch.from_numpy(labels[rows]))
        print(f"step {step} loss {loss:.7f}")


if __name__ == "__main__":
    main()
