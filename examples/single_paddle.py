"""Train a small classifier on one device with Paddle: the first step of the porting examples.

It imports Paddle and examples/data.py (numpy only), nothing of parbench: the data, the initial
weights and the batch order come from there, as in the PyTorch, TensorFlow and JAX versions
beside this file, so all four print the same losses (to float32 rounding).

    python examples/single_paddle.py [--steps 20]
"""

import argparse

import paddle
import paddle.nn.functional as F
from data import CLASSES, FEATURES, HIDDEN, LR, batches, initial_weights, make_data


# --- model: Paddle's Linear keeps its weight as [in, out], the transpose of torch's
class Classifier(paddle.nn.Layer):
    def __init__(self):
        super().__init__()
        self.hidden = paddle.nn.Linear(FEATURES, HIDDEN)
        self.head = paddle.nn.Linear(HIDDEN, CLASSES)

    def forward(self, x):
        return self.head(F.relu(self.hidden(x)))


def load(model, weights):
    model.set_state_dict({name: value.T if name.endswith(".weight") else value
                          for name, value in weights.items()})


# --- step
def train_step(model, optimizer, x, y):
    loss = F.cross_entropy(model(x), y)  # mean over the batch
    loss.backward()
    optimizer.step()
    optimizer.clear_grad()
    return float(loss)


def main():
    parser = argparse.ArgumentParser(description="one-device training, Paddle")
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
        loss = train_step(model, optimizer, paddle.to_tensor(features[rows]),
                          paddle.to_tensor(labels[rows]))
        print(f"step {step} loss {loss:.7f}")


if __name__ == "__main__":
    main()
