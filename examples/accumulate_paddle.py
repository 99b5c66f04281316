"""The one-device example with each batch of 32 in 2 micro-batches of 16, their gradients
accumulated before one optimizer step: the gradient-accumulation step of the porting examples.
Each micro-batch's mean loss is divided by the micro-batch count, so the accumulated gradient is
the whole batch's mean gradient, and the losses printed (the micro-batches' summed) are
single_paddle.py's.

    python examples/accumulate_paddle.py [--steps 20]
"""

import argparse

import paddle
import paddle.nn.functional as F
from data import LR, batches, initial_weights, make_data, micro_batches
from single_paddle import Classifier, load


# --- step: backward() adds into .grad until clear_grad(), as torch's does until zero_grad()
def train_step(model, optimizer, parts):
    total = 0.0
    for x, y in parts:
        loss = F.cross_entropy(model(x), y) / len(parts)
        loss.backward()
        total += float(loss)
    optimizer.step()
    optimizer.clear_grad()
    return total


def main():
    parser = argparse.ArgumentParser(description="gradient accumulation, Paddle")
    parser.add_argument("--steps", type=int, default=20)
    steps = parser.parse_args().steps
    if steps < 1:
        parser.error(f"--steps must be at least 1, got {steps}")
    paddle.set_device("cpu")
    features, labels = make_data()
    model = Classifier()
    load(model, initial_weights())
    optimizer = paddle.optimizer.SGD(learning_rate=LR, parameters=model.parameters())
    for step, rows in enumerate(batches(steps)):
        parts = [(paddle.to_tensor(features[part]), paddle.to_tensor(labels[part]))
                 for part in micro_batches(rows)]
        print(f"step {step} loss {train_step(model, optimizer, parts):.7f}")


if __name__ == "__main__":
    main()
